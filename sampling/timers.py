"""Per-repeat timers: wall clock on CPU, CUDA events on GPU (docs/architecture.md, "The measuring side").

A host op (:data:`predictor.core.ops.HOST_OPS`: framework calls, their launches) is the
host's time, not the device's: ``time(..., host=True)`` reads it on the host's clock.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch


class CpuTimer:
    """Times a call with ``perf_counter_ns`` on ``threads`` intra-op threads, flushing the
    L2 cache before each repeat as :class:`CudaTimer` does (``l2_bytes`` 0: no flush).

    On a CPU the flush matters most for small ops: a 128x128x128 matmul took 26 us with
    its operands in L2 and 49 us without, a 256x512 RMSNorm 77 and 140 us, a 256x1536x512
    matmul 2.29 and 2.37 ms (torch 2.13, one thread, this machine's Xeon); inside a
    training step the previous ops have always evicted them.
    """

    def __init__(self, threads: int, l2_bytes: int = 0):
        self.threads = threads
        torch.set_num_threads(threads)
        self._flush = torch.empty(2 * l2_bytes, dtype=torch.uint8) if l2_bytes else None

    def time(self, fn: Callable[[], object], repeats: int, warmup: int, host: bool = False) -> list[float]:
        """Microseconds of each of ``repeats`` calls after ``warmup`` untimed ones (on a
        CPU the host is the device: ``host`` changes nothing)."""
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeats):
            if self._flush is not None:
                self._flush.zero_()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e3)
        return out


#: How far each timed repeat puts the device behind its host (a spin kernel after the
#: flush), so that the events bracket the op's kernels and not the host's time issuing
#: them: without it, a small op's backward sample on an H200 held the autograd engine's
#: entry and nodes (a ``small`` step's RoPE backward, 256x6x64: 150 us a call, where the
#: traced step's kernels ran a whole micro-batch's in about 1 ms).
HOST_LEAD_S = 5e-4
#: The device's lead before a task's first timed repeat. The repeats are issued without
#: waiting, so the lead then grows by each repeat's spin less the host's time issuing it;
#: with HOST_LEAD_S alone at the start, a hiccup of the host (up to 3.1 ms over) came out as a
#: device time in 0.47% of an H200's repeats, 30 of 72 a task's first (stalled shapes in
#: `samples/h100` had 1.2 us repeats read as 0.5-1.3 ms; experiments/timer_stalls/bench_timer_stalls.py).
FIRST_LEAD_S = 5e-3
#: Spin-kernel cycles per second: at most the fastest data-centre GPU's clock (H100/H200
#: 1,980 MHz boost), so the lead is at least HOST_LEAD_S on any of them.
SPIN_HZ = 2.0e9


class CudaTimer:
    """Times a call with CUDA events, flushing the L2 cache before each repeat.

    Without the flush a repeat finds its operands in L2 from the previous one, which
    a training step (whose working set dwarfs L2) never does. The flush writes a
    buffer twice the L2 size (Triton's ``do_bench`` does the same). The device is then
    put :data:`HOST_LEAD_S` behind the host (:data:`FIRST_LEAD_S` before a task's first
    repeat): a step's kernels queue up ahead of a busy device, and the host's own time is
    sampled apart (``host=True``; the ``dispatch`` op).
    """

    def __init__(self, l2_bytes: int, device: torch.device, first_lead_s: float = FIRST_LEAD_S):
        self.device = device
        self.first_lead_s = first_lead_s
        self._flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.uint8, device=device)

    def time(self, fn: Callable[[], object], repeats: int, warmup: int, host: bool = False) -> list[float]:
        """Microseconds of each of ``repeats`` calls after ``warmup`` untimed ones: the
        device's time between two events, or with ``host`` the host's until the call
        returns, having issued its work (the device drained first, so that no repeat
        waits on a full launch queue)."""
        for _ in range(warmup):
            fn()
        if host:
            return self._host_time(fn, repeats)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        torch.cuda.synchronize(self.device)
        torch.cuda._sleep(int(self.first_lead_s * SPIN_HZ))
        for start, end in zip(starts, ends):
            self._flush.zero_()
            torch.cuda._sleep(int(HOST_LEAD_S * SPIN_HZ))
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def _host_time(self, fn: Callable[[], object], repeats: int) -> list[float]:
        out = []
        for _ in range(repeats):
            torch.cuda.synchronize(self.device)
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e3)
        torch.cuda.synchronize(self.device)
        return out


def event_median_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """The median of ``repeats`` back-to-back calls of ``fn`` timed with CUDA events, after
    ``warmup`` untimed ones: a kernel's throughput at steady state (no L2 flush, no host
    lead), as the GPU benchmark scripts (experiments/attention_backends/bench_attention_backends.py,
    bench_grouped_gemm.py) report it."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in zip(starts, ends))[repeats // 2]


def make_timer(device: torch.device, threads: int, l2_bytes: int):
    if device.type == "cuda":
        return CudaTimer(l2_bytes, device)
    return CpuTimer(threads, l2_bytes)
