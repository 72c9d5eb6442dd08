"""The hypervisor's steal time: CPU time a virtual machine's vCPUs wanted and the host gave
to another guest, as Linux counts it in ``/proc/stat`` (the ``steal`` field of the ``cpu``
line, in USER_HZ ticks, usually 10 ms; proc(5)).

A timed call that overlaps a burst of steal runs slow for a reason outside the hardware
being sampled: on this project's 2-core VM a suite run's measure stage lost 2.2% of its CPU
time to steal, up to 12% over a minute, and a pass's median step followed the steal of the
minute before it (correlation 0.38 over 48 passes; docs/validation-log.md, "CPU validation suite"). The sampler
times such a call again (:func:`sampling.runner._compute_loop`), and ``prism measure``
stores each step's share beside its time.

The share is of the CPUs' busy time (user, nice, system, irq, softirq, steal; not idle or
iowait): idle vCPUs accrue no steal, so a share of all CPU time would shrink with the
cores a host has idle. A window shorter than a few ticks reads 0 or a large share (the
counters move in whole ticks): a window of 50 ms on one busy core holds about five.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
#: Fields of /proc/stat's cpu line (proc(5)): user nice system idle iowait irq softirq steal ...
_BUSY = (0, 1, 2, 5, 6, 7)
_STEAL = 7


@dataclass(frozen=True)
class CpuTicks:
    """The all-CPU counters of /proc/stat at one moment."""

    busy: int  # user + nice + system + irq + softirq + steal
    steal: int


def read_ticks(path: Path = PROC_STAT) -> CpuTicks | None:
    """The counters now, or None where the system keeps none (not Linux, a kernel too old to
    count steal, an unreadable file)."""
    try:
        with open(path) as f:
            line = f.readline().split()
        if line[0] != "cpu" or len(line) <= _STEAL + 1:
            return None
        ticks = [int(v) for v in line[1:_STEAL + 2]]
    except (OSError, ValueError, IndexError):
        return None
    return CpuTicks(busy=sum(ticks[i] for i in _BUSY), steal=ticks[_STEAL])


def steal_share(before: CpuTicks | None, after: CpuTicks | None) -> float:
    """The share of the busy CPU time between two readings that the hypervisor took: NaN
    where either reading is missing or no busy tick passed."""
    if before is None or after is None or after.busy <= before.busy:
        return float("nan")
    return max(0, after.steal - before.steal) / (after.busy - before.busy)
