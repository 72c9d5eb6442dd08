"""Predicted vs measured step times of published runs (data/e2e).

    python benchmarks/bench_e2e.py [--single-node-rows N]

vtrain_multi (109 Megatron-LM runs on 64-512 A100): absolute % error of the median
step time (median and 90th percentile), and the Spearman correlation of predicted vs
measured time within each group of rows sharing model and GPU count. narayanan2021_t1/t2
publish hardware TFLOP/s per GPU, not step times: the step time is recovered with their
FLOP count (eq. 3 of arXiv 2104.04473, full recompute; predictor.data.published).
vtrain_single_node: 1,440 runs on one 8-GPU A100 node, with the median signed and absolute error per
tp degree and per micro-batch size (small models at high tp are host-bound:
predictor.workload.host), and each layout's step split into a cost per step and a cost per
micro-batch: vTrain repeats a layout at several global batches, so a line through step time
against micro-batches per step gives both (median over layouts by tp and pipeline stages).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from predictor.analyses.batch import predict_table
from predictor.core.profiles import DATA_DIR
from predictor.data.published import published_runs, single_node_runs

E2E = DATA_DIR / "e2e"


def errors(pred, measured) -> str:
    ape = (np.abs(pred - measured) / measured).dropna()
    signed = ((pred - measured) / measured).dropna()
    return (f"{len(ape)} rows: median APE {ape.median():.1%}, p90 {ape.quantile(0.9):.1%}, "
            f"signed median {signed.median():+.1%}")


def per_step_and_micro_batch(pred) -> str:
    """Median intercept (ms, a cost per step) and slope ratio (cost per micro-batch,
    predicted / measured) of step time against micro-batches per step, over the layouts
    measured at three or more global batches, by (tp, pp)."""
    pred = pred.assign(micro_batches=pred.gbs / pred.dp / pred.mbs)
    fits = []
    for (tp, pp), layouts in pred.groupby(["tp", "pp"]):
        for _, g in layouts.groupby(["hidden", "layers", "dp", "mbs"]):
            if g.micro_batches.nunique() < 3:
                continue
            measured = np.polyfit(g.micro_batches, g.measured_s * 1e3, 1)
            predicted = np.polyfit(g.micro_batches, g.pred_iter_time_s_p50 * 1e3, 1)
            fits.append((tp, pp, measured[1], predicted[1], predicted[0] / measured[0] - 1))
    rows = pd.DataFrame(fits, columns=["tp", "pp", "step_measured", "step_predicted", "per_micro_batch"])
    by = rows.groupby(["tp", "pp"]).median()
    return "\n".join(f"    tp {tp} pp {pp}: per step {r.step_measured:.1f} ms measured, {r.step_predicted:.1f} "
                     f"predicted; per micro-batch {r.per_micro_batch:+.1%}" for (tp, pp), r in by.iterrows())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single-node-rows", type=int, default=None, help="a random subset (default: all 1,440)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    vt = predict_table(published_runs(E2E, ["vtrain_multi"]), draws=1000)
    print(f"vtrain_multi ({time.perf_counter() - t0:.1f} s): "
          f"{errors(vt.pred_iter_time_s_p50, vt.measured_s)}")
    rho = {k: spearmanr(g.measured_s, g.pred_iter_time_s_p50).correlation
           for k, g in vt.groupby(["model", "num_gpus"]) if len(g) > 2}
    print("  Spearman within groups: " + ", ".join(f"{m} x{n}: {r:.2f}" for (m, n), r in rho.items())
          + f"; mean {np.mean(list(rho.values())):.3f}")
    inside = ((vt.measured_s >= vt.pred_iter_time_s_p5) & (vt.measured_s <= vt.pred_iter_time_s_p95)).mean()
    print(f"  measured step inside the 90% predictive interval: {inside:.1%} (in-sample: models/doubt learned from "
          f"these runs too; python benchmarks/bench_doubt.py gives it with each source left out)")

    for set_id in ("narayanan2021_t1", "narayanan2021_t2"):
        pred = predict_table(published_runs(E2E, [set_id]), draws=500)
        ok = pred.pred_status == "ok"
        print(f"{set_id}: {errors(pred.pred_iter_time_s_p50[ok], pred.measured_s[ok])}; "
              f"{(~ok).sum()} rows not predicted: {sorted(set(pred.pred_status[~ok]))[:2]}")

    t0 = time.perf_counter()
    pred = predict_table(single_node_runs(E2E, args.single_node_rows), draws=300)
    ok = pred.pred_status == "ok"
    print(f"vtrain_single_node ({time.perf_counter() - t0:.1f} s): "
          f"{errors(pred.pred_iter_time_s_p50[ok], pred.measured_s[ok])}; {(~ok).sum()} rows not predicted")
    signed = ((pred.pred_iter_time_s_p50 - pred.measured_s) / pred.measured_s)[ok]
    for column in ("tp", "mbs"):
        by = signed.groupby(pred[column][ok]).median()
        size = signed.abs().groupby(pred[column][ok]).median()
        print(f"  median signed error by {column}: " + ", ".join(f"{k}: {v:+.1%}" for k, v in by.items())
              + "; median abs. error: " + ", ".join(f"{k}: {v:.1%}" for k, v in size.items()))
    print("  cost per step and per micro-batch (a line through each layout's global batches; medians):\n"
          + per_step_and_micro_batch(pred[ok]))


if __name__ == "__main__":
    main()
