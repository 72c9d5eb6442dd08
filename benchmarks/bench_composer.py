"""The composer's cost and its order-statistic shortcut.

    python benchmarks/bench_composer.py

Prints (1) the time to predict 1,000 valid layouts in one process; (2) the cost of an
8-GPU and a 65,536-GPU layout of the same replica; (3) p50/p95 of the shortcut
(the slowest of N GPUs drawn as F^-1(u^(1/N))) against drawing every GPU, at 64 and 512.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import load_model, section
from predictor.core.specs import HardwareConfig, ParallelConfig
from predictor.engine.compose import compose, workload_calls
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.latency.lookup import QuantileCache
from predictor.workload.decompose import decompose

DRAWS = 500


def layouts(hw, count=1000):
    models = [load_model(n) for n in ("gpt3-2.7b", "gpt3-13b", "llama3-8b", "llama3-70b")]
    grid = itertools.product(models, (64, 128, 256, 512, 1024), (1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2, 4),
                             ("none", "selective", "full"), (False, True))
    out = []
    for model, gpus, tp, pp, mbs, recompute, sp in grid:
        if gpus % (tp * pp):
            continue
        dp = gpus // (tp * pp)
        par = ParallelConfig(dp=dp, tp=tp, pp=pp, micro_batch_size=mbs, global_batch_size=mbs * dp * 4 * pp,
                             recompute=recompute, sequence_parallel=sp and tp > 1)
        try:
            out.append(decompose(model, par, hw, gpus))
        except PrismError:
            continue
        if len(out) == count:
            break
    return out


def main():
    hw = section(load_config(["hardware=a100-sxm4-80gb"]), "hardware", HardwareConfig)
    models = ModelSet.load(models_dir() / hw.name, hw)

    t0 = time.perf_counter()
    works = layouts(hw)
    t1 = time.perf_counter()
    cache = QuantileCache(models, hw)
    cache.fill([c for w in works for c in workload_calls(w)])
    t2 = time.perf_counter()
    medians = [np.median(compose(w, models, draws=DRAWS, cache=cache).draws) for w in works]
    t3 = time.perf_counter()
    print(f"{len(works)} layouts ({DRAWS} draws each): {t3 - t0:.2f} s in all = decompose {t1 - t0:.2f} s "
          f"+ model queries {t2 - t1:.2f} s + Monte Carlo and schedules {t3 - t2:.2f} s; "
          f"median step {np.median(medians):.2f} s")

    model = load_model("llama3-70b")
    costs = {}
    for gpus in (8, 65536):
        par = ParallelConfig(dp=gpus // 8, tp=8, pp=1, micro_batch_size=1, global_batch_size=4 * gpus // 8)
        work = decompose(model, par, hw, gpus)
        cache = QuantileCache(models, hw)
        cache.fill(workload_calls(work))
        t0 = time.perf_counter()
        for _ in range(20):
            compose(work, models, draws=2000, cache=cache)
        costs[gpus] = (time.perf_counter() - t0) / 20
    print(f"one layout, 2000 draws: 8 GPUs {costs[8] * 1e3:.1f} ms, 65,536 GPUs {costs[65536] * 1e3:.1f} ms "
          f"(ratio {costs[65536] / costs[8]:.2f})")

    for gpus, tp, pp in ((64, 8, 2), (512, 8, 4)):
        par = ParallelConfig(dp=gpus // (tp * pp), tp=tp, pp=pp, global_batch_size=4 * pp * gpus // (tp * pp))
        work = decompose(model, par, hw, gpus)
        short = compose(work, models, draws=4000, seed=1)
        brute = compose(work, models, draws=4000, seed=1, brute_force=True)
        d50 = short.quantile(0.5) / brute.quantile(0.5) - 1
        d95 = short.quantile(0.95) / brute.quantile(0.95) - 1
        print(f"{gpus} GPUs (tp {tp}, pp {pp}): shortcut vs every GPU drawn: p50 {d50:+.2%}, p95 {d95:+.2%}")


if __name__ == "__main__":
    main()
