"""Profiling a training step for ``prism import-trace``: the profiler's cost per recorded
op on this CPU, and one-step profiler cycles (why one step each: :mod:`sampling.reference`).

Kept apart from :mod:`sampling.reference` so that the sampler's own framework rows
(:mod:`sampling.framework`) trace steps without importing the distributed layouts, whose
modules (FSDP, pipelining) cost each sampling process about 2 s of its start.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

#: Steps per profiler cycle of :func:`trace_steps`: one untraced, one warm-up, one recorded.
CYCLE = 3


def profiler_cost_us(rounds: int = 11, trim: int = 2) -> float:
    """What recording one op costs on this CPU: the extra wall time per recorded event of a
    small MLP's forward and backward under ``torch.profiler`` (``record_shapes=True``), each
    traced run timed between two untraced ones so that the machine's drift cancels; the mean
    over ``rounds`` of each round's extra per event, its ``trim`` highest and lowest left out:
    a round that caught this machine in another state moves it no more than the others
    (a sum over rounds moved several-fold between calls a minute apart).
    ``prism import-trace`` takes it off the traced timings.

    The op mix is a training step's: modules, autograd nodes, views. A loop of one flat op
    records cheaper events: on a 2-core Xeon (20 interleaved rounds each) a
    ``torch.add`` loop cost 0.63 us an event, where this MLP cost 1.05 and the reference
    workload's tiny step 1.02 (its forward and backward 0.93)."""
    with torch.random.fork_rng(devices=[]):  # the traced job's random state stays its own
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                                  torch.nn.LayerNorm(64))
        x = torch.randn(32, 64)

    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(20):
            mlp(x).sum().backward()
        return time.perf_counter() - t0

    run()  # warm-up
    extra = []
    for _ in range(rounds):
        before = run()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            traced = run()
        extra.append((traced - (before + run()) / 2) / max(len(prof.events()), 1))
    kept = sorted(extra)[trim:len(extra) - trim] or extra
    return max(sum(kept) / len(kept), 0.0) * 1e6


def trace_steps(step: Callable[[], None], device: torch.device, folder: Path, rank: int, steps: int,
                first: int = 0) -> None:
    """Profile ``steps`` more runs of ``step``, one profiler cycle each (see the module doc),
    into ``rank<rank>.step<k>.json`` for k from ``first`` on."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    folder.mkdir(parents=True, exist_ok=True)
    written = []

    def export(prof) -> None:  # to a temporary name first: a trace file is whole or absent
        path = folder / f"rank{rank}.step{first + len(written)}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
        written.append(path)

    # one-step cycles on purpose: torch's note that each cycle clears the last one's events
    warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
    cost = json.dumps(profiler_cost_us())
    cycle = schedule(wait=1, warmup=1, active=1, repeat=steps)  # CYCLE calls of step
    with profile(activities=activities, record_shapes=True, schedule=cycle, on_trace_ready=export) as prof:
        for _ in range(CYCLE * steps):
            prof.add_metadata_json("prism_profiler_cost_us", cost)  # for prism import-trace
            step()
            prof.step()


def trace_points(warmup: int, steps: int, traced: int) -> dict[int, int]:
    """Where a run of ``warmup`` + ``steps`` timed steps profiles ``traced`` steps: step
    index -> profiler cycles to run before it, spread evenly between the timed steps
    (:mod:`sampling.reference`)."""
    points: dict[int, int] = {}
    for j in range(traced):
        at = warmup + steps * (j + 1) // (traced + 1)
        points[at] = points.get(at, 0) + 1
    return points
