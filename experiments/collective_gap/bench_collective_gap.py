"""A CPU collective's latency against the compute gap before it, and the gaps the suite's
tensor-parallel layouts leave between their collectives.

    python experiments/collective_gap/bench_collective_gap.py                 # 2 ranks, 40 rounds (~1 min)
    python experiments/collective_gap/bench_collective_gap.py --rounds 100

``prism sample`` times a CPU's collectives after ``STEP_GAP_S`` (10 ms) of computing on
every member (:mod:`sampling.collectives`), because gloo's collectives cost several times
more after a step's compute than straight after a barrier. This times a gloo all_reduce on
two ranks after gaps of 0 to 20 ms of computing (the sampler's busy loop), the gaps
interleaved round by round, and prints each size's median and 10th/90th percentiles per
gap. Then, for the validation suite's tp=2 layouts, the median compute time between two
collectives of a pass (the pass's compute calls at their medians in ``models/local-cpu``,
over its collectives): the gap each of its collectives follows in a step.
"""
from __future__ import annotations

import argparse
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from predictor.core.ops import OPS
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.latency.lookup import QuantileCache
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import decompose
from sampling.cpu.collective_gap import compute_for

GAPS_MS = (0, 0.5, 1, 2, 5, 10, 20)
SIZES = (3072, 98304)  # float32 elements: 12 KB (tiny's activations at seq 128) and 384 KB (small's at 256)


def _rank(rank: int, port: int, rounds: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    buffers = {n: torch.ones(n) for n in SIZES}
    for b in buffers.values():
        for _ in range(5):
            dist.all_reduce(b)
    times = {(g, n): [] for g in GAPS_MS for n in SIZES}
    for _ in range(rounds):
        for g in GAPS_MS:
            for n, b in buffers.items():
                dist.barrier()
                compute_for(g / 1e3)
                t0 = time.perf_counter_ns()
                dist.all_reduce(b)
                times[g, n].append((time.perf_counter_ns() - t0) / 1e3)
    slowest = torch.tensor([times[k] for k in times], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends when its last member does
    if rank == 0:
        out.put({k: row for k, row in zip(times, slowest.tolist())})
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def suite_gaps() -> list[str]:
    """The median compute gap before each collective of the suite's tp=2 layouts' passes."""
    hw = load_hardware("local-cpu")
    models = ModelSet.load(models_dir() / hw.name, hw)
    cache = QuantileCache(models, hw)
    lines = []
    for name in ("tiny", "small"):  # at their own sequence lengths, as the suite's tp=2 layouts
        model = load_model(name)
        work = decompose(model, ParallelConfig(tp=2, micro_batch_size=1, global_batch_size=4), hw)
        stage, seq = work.stages[0], model.seq_length
        for pass_, calls in (("forward", stage.forward), ("backward", stage.backward)):
            compute = [c for c in calls if not OPS[c.op].collective and c.role == "compute"]
            collectives = sum(c.count for c in calls if OPS[c.op].collective)
            q, _ = cache.lookup(compute)
            median = q[:, list(DEFAULT_QUANTILES).index(0.5)]
            total = float(sum(c.count * m for c, m in zip(compute, median)))
            lines.append(f"{name} seq{seq} tp=2 {pass_:8s}: {total / 1e3:7.2f} ms of compute over {collectives} "
                         f"collectives, {total / max(collectives, 1) / 1e3:5.2f} ms before each")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40, help="repeats of each gap and size (default 40)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    t0 = time.perf_counter()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, args.rounds, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=600)
    for p in procs:
        p.join()
    print(f"gloo all_reduce on 2 ranks after a gap of computing, the slower rank's time, {args.rounds} rounds "
          f"({time.perf_counter() - t0:.0f} s)")
    for g in GAPS_MS:
        print(f"gap {g:4g} ms: " + "   ".join(
            f"{n * 4 // 1024:4d} KB median {np.median(t):6.0f} us (p10 {np.percentile(t, 10):5.0f}, "
            f"p90 {np.percentile(t, 90):5.0f})" for n, t in ((n, result[g, n]) for n in SIZES)))
    print("\n".join(suite_gaps()))


if __name__ == "__main__":
    main()
