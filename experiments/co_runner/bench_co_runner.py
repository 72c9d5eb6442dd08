"""How much a CPU rank's operators slow down while another rank on the host runs the same ones.

    python experiments/co_runner/bench_co_runner.py                          # small at seq 256, this CPU
    python experiments/co_runner/bench_co_runner.py --model tiny --seconds 0.5

``prism sample`` times each compute op in one process while the host's other cores idle;
a 2-rank CPU layout (dp, tp or pp = 2 in the validation suite) runs two ranks that execute
the same ops at the same time and share the host's caches and memory bandwidth. For every
distinct compute call of the model's one-rank step (``decompose`` on ``local-cpu``), this
times the call as the sampler does (:class:`~sampling.timers.CpuTimer`, one thread, L2
flushed) alone, then while a forked co-runner loops the same call on another core, and
prints each call's slowdown and the step's: the calls' loaded time over their alone time,
weighted by how often the step makes them. A slowdown the composer does not know about
shows as multi-rank layouts measured slower than predicted.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import torch

from predictor.core.ops import OPS
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.workload.decompose import decompose
from sampling import kernels
from sampling.timers import CpuTimer


def _loop(op: str, pass_: str, shape: dict, core: int, ready, stop) -> None:
    """The co-runner: the same call, over and over, on its own ``core`` (named by the parent:
    a forked child inherits the parent's one-core affinity, so its own mask names no other)."""
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    fn = kernels.build(op, pass_, shape, "float32", torch.device("cpu"))
    fn()
    ready.set()
    while not stop.is_set():
        fn()


def _median_us(fn, timer: CpuTimer, seconds: float) -> float:
    times, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        times += timer.time(fn, repeats=5, warmup=0)
    return statistics.median(times)


def measure(op: str, pass_: str, shape: dict, timer: CpuTimer, seconds: float, core: int) -> tuple[float, float]:
    """(alone, loaded) median microseconds of one call, the co-runner on ``core``."""
    fn = kernels.build(op, pass_, shape, "float32", torch.device("cpu"))
    fn()
    alone = _median_us(fn, timer, seconds)
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_loop, args=(op, pass_, shape, core, ready, stop), daemon=True)
    child.start()
    try:
        ready.wait(30)
        loaded = _median_us(fn, timer, seconds)
    finally:
        stop.set()
        child.join(10)
    return alone, loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small", help="conf/model name (default small, as the suite runs it)")
    ap.add_argument("--seq", type=int, default=256, help="sequence length (default 256)")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per call and condition (default 1 s)")
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        ap.error("needs two cores: one for the timed call, one for its co-runner")
    hw = load_hardware("local-cpu")
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})  # the timed call on the first core, its co-runner on the last
    timer = CpuTimer(1, hw.memory.l2_bytes)
    model = load_model(args.model)
    stage = decompose(model, ParallelConfig(global_batch_size=1), hw, seq=args.seq).stages[0]
    counts: dict[tuple, int] = {}
    for c in stage.forward + stage.backward:
        if not OPS[c.op].host and not OPS[c.op].collective:
            key = (c.op, c.pass_, c.shape)
            counts[key] = counts.get(key, 0) + c.count
    print(f"{args.model} at seq {args.seq}, one micro-batch: {len(counts)} distinct compute calls, "
          f"{args.seconds:g} s each alone and beside a co-runner")
    alone_sum = loaded_sum = 0.0
    by_op: dict[str, list[float]] = {}
    for (op, pass_, shape), n in sorted(counts.items()):
        alone, loaded = measure(op, pass_, dict(shape), timer, args.seconds, cores[-1])
        alone_sum, loaded_sum = alone_sum + n * alone, loaded_sum + n * loaded
        by_op.setdefault(op, [0.0, 0.0])
        by_op[op][0] += n * alone
        by_op[op][1] += n * loaded
        print(f"  {op:14s} {pass_}  x{n:<3d} {dict(shape)}: {alone:9.1f} us alone, {loaded:9.1f} us beside "
              f"(x{loaded / alone:.2f})")
    print("by op, weighted by the step's calls:")
    for op, (a, b) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        print(f"  {op:14s} {a / alone_sum:6.1%} of the step's op time alone, slowdown x{b / a:.2f}")
    print(f"the step's compute: {alone_sum / 1e3:.1f} ms alone, {loaded_sum / 1e3:.1f} ms beside a co-runner "
          f"(x{loaded_sum / alone_sum:.2f})")


if __name__ == "__main__":
    main()
