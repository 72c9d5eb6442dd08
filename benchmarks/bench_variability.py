"""``prism variability`` at 65,536 GPUs: its cost, and the order-statistic shortcut checked.

    python benchmarks/bench_variability.py

Prints (1) the wall time of the whole analysis (slowdown versus scale up to 65,536 GPUs,
variance attribution, slow-node placements, time to train with failures) for Llama 3 70B
on 65,536 H100 with tp 8, pp 8, and of its figure, against a 10 s budget; (2) at 64
and 512 GPUs of the same layout, p50, p95 and each slowdown probability of the shortcut
(the slowest of a stage's N GPUs drawn as F^-1(u^(1/N))) against drawing every GPU, with
the largest differences against a 2-point budget.
"""
from __future__ import annotations

import tempfile
import time

from predictor.analyses.variability import AnalysisConfig, shortcut_check, variability
from predictor.app.plots import save_figure, variability_figure
from predictor.app.render import format_variability
from predictor.core.layout import resolve_layout
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.latency.artifacts import trained_models
from predictor.latency.lookup import QuantileCache
from predictor.workload.decompose import decompose

MODEL, HARDWARE, LAYOUT, GPUS = "llama3-70b", "h100-sxm", ParallelConfig(tp=8, pp=8), 65536
BUDGET_S = 10.0
CHECK_DRAWS = 4000  # the brute-force check compares two Monte Carlo estimates: more draws, less noise


def main():
    t0 = time.perf_counter()
    model, hw = load_model(MODEL), load_hardware(HARDWARE)
    report = variability(model, hw, LAYOUT, GPUS)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        save_figure(variability_figure(report), f"{tmp}/variability.png")
    t2 = time.perf_counter()
    print(format_variability(report))
    print(f"\n{MODEL} on {GPUS} x {HARDWARE}, tp {LAYOUT.tp}, pp {LAYOUT.pp}: analysis {t1 - t0:.2f} s (profiles "
          f"included) + plot {t2 - t1:.2f} s = {t2 - t0:.2f} s; budget {BUDGET_S:.0f} s: "
          f"{'ok' if t2 - t0 <= BUDGET_S else 'OVER'}")

    a = AnalysisConfig(draws=CHECK_DRAWS)
    models = trained_models(hw)
    cache = QuantileCache(models, hw)
    print(f"\nshortcut vs brute force ({CHECK_DRAWS} draws, same seed): differences in points")
    worst = 0.0
    for gpus in (64, 512):
        work = decompose(model, resolve_layout(LAYOUT, gpus), hw, gpus)
        c = shortcut_check(work, models, cache, a, seed=0)
        diffs = [100 * c["p50_rel_diff"], 100 * c["p95_rel_diff"]] + [100 * v for v in c["p_slowdown_diff"].values()]
        worst = max(worst, *map(abs, diffs))
        print(f"  {gpus:>4} GPUs  p50 {c['shortcut']['p50_s']:.3f} vs {c['brute_force']['p50_s']:.3f} s "
              f"({diffs[0]:+.2f}%)  p95 {c['shortcut']['p95_s']:.3f} vs {c['brute_force']['p95_s']:.3f} s "
              f"({diffs[1]:+.2f}%)  " + "  ".join(
                  f"P(>={k}) {c['shortcut']['p_slowdown'][k]:.3f} vs {c['brute_force']['p_slowdown'][k]:.3f}"
                  for k in c["p_slowdown_diff"]))
    print(f"  largest difference {worst:.2f} points; budget 2: {'ok' if worst <= 2 else 'OVER'}")


if __name__ == "__main__":
    main()
