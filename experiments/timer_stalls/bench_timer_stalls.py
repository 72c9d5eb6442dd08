"""Stalled repeats in GPU samples: how often one timed repeat of a small op runs far over
its shape's typical time, with the sampler's CUDA timer as it is and as it was.

`samples/h100` holds shapes whose repeats jump from 1.2 us to 0.5-1.3 ms partway through
(a `residual_add` backward at 2,048 x 2,048: repeats 5-9): the device, with nothing of its
own to run, waited for a host that fell behind its lead. Such a shape puts a millisecond a
call into the regressor, and a composed step sums dozens of calls. Variants:

- ``as sampled``: :class:`sampling.timers.CudaTimer` as ``prism sample`` runs it, the device
  :data:`~sampling.timers.FIRST_LEAD_S` behind before a task's first repeat;
- ``lead 0.5 ms``: as it was before that lead, :data:`~sampling.timers.HOST_LEAD_S` alone.

Each variant times the GPU plan's shapes of the backward passes below in turn,
``--rounds`` times, interleaved. A repeat is stalled when it is over 3 times its shape's
median over all variants and at least 20 us over it. Prints, per variant, the stalled
share and time, and the garbage collections that ran while repeats were issued.

Two causes were ruled out on an H200 (11-28, torch 2.11; 15,280 repeats a variant): with
Python's garbage collector off while the repeats are issued, 0.54% stalled against 0.47%
with it on; with the device drained before each repeat (no lead carried from one repeat
to the next), 1.77%.

    python experiments/timer_stalls/bench_timer_stalls.py --hardware h200 --out stalls.csv   # a GPU host
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np
import pandas as pd
import torch

from predictor.app.config import load_config
from predictor.core.files import write_csv
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, SamplingConfig
from sampling import kernels
from sampling.plan import make_plan
from sampling.timers import CudaTimer

OPS = ["residual_add", "rope", "router", "embedding", "gelu", "rmsnorm", "masked_fill", "layernorm"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--shapes", type=int, default=48, help="shapes per op, from the GPU plan")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write each repeat to this CSV")
    args = ap.parse_args()
    cfg = load_config([f"hardware={args.hardware}", "sampling=gpu", f"sampling.ops=[{','.join(OPS)}]",
                       f"sampling.shapes_per_op={args.shapes}"])
    sc, hw = section(cfg, "sampling", SamplingConfig), section(cfg, "hardware", HardwareConfig)
    device = torch.device("cuda", 0)
    tasks = [t for t in make_plan(sc, hw).compute if t.call.pass_ != "fwd"]
    timers = {"as sampled": CudaTimer(hw.memory.l2_bytes, device),
              "lead 0.5 ms": CudaTimer(hw.memory.l2_bytes, device, first_lead_s=0.0)}
    collections = {name: [0, 0.0] for name in timers}
    current, started = [None], [0.0]

    def on_gc(phase, info):
        if current[0] is None:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections[current[0]][0] += 1
            collections[current[0]][1] += time.perf_counter() - started[0]
    gc.callbacks.append(on_gc)
    rows = []
    t0 = time.perf_counter()
    for rnd in range(args.rounds):
        for name, timer in timers.items():
            for task in tasks:
                call = task.call
                try:
                    fn = kernels.build(call.op, call.pass_, call.shape_dict, task.dtype, device)
                    current[0] = name
                    lat = timer.time(fn, sc.repeats, sc.warmup)
                except (RuntimeError, MemoryError):  # a shape the device cannot hold, as prism sample skips it
                    continue
                finally:
                    current[0], fn = None, None
                key = f"{call.op}/{call.pass_} " + " ".join(f"{k}={v}" for k, v in call.shape_dict.items())
                rows += [{"variant": name, "round": rnd, "task": key, "repeat": r, "latency_us": x}
                         for r, x in enumerate(lat)]
    df = pd.DataFrame(rows)
    med = df.groupby("task").latency_us.transform("median")
    df["stalled"] = (df.latency_us > 3 * med) & (df.latency_us > med + 20)
    df["excess_us"] = np.where(df.stalled, df.latency_us - med, 0.0)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, {len(tasks)} tasks x {sc.repeats} "
          f"repeats x {args.rounds} rounds per variant, {time.perf_counter() - t0:.0f} s")
    for name, g in df.groupby("variant", sort=False):
        worst = g[g.stalled].groupby("task").size().sort_values(ascending=False).head(3)
        print(f"{name:11s} stalled {g.stalled.mean():6.2%} of {len(g)} repeats, {g.excess_us.sum() / 1e3:8.2f} ms "
              f"over; shapes with one: {g[g.stalled].task.nunique()}; gc runs while timing "
              f"{collections[name][0]} ({collections[name][1] * 1e3:.1f} ms); most: "
              + "; ".join(f"{t} x{n}" for t, n in worst.items()))
    if args.out:
        write_csv(args.out, df.to_dict("records"))


if __name__ == "__main__":
    main()
