"""Predicted vs published step times on H100 (issue 7), through ``prism predict-batch``.

    python benchmarks/bench_hardware.py [--models-dir DIR] [--rows]

The H100 rows of data/e2e (torchtitan, megatronlm_readme_h100, neusight_dist)
publish tokens/s, TFLOP/s or step times; the measured step time is recovered by
:func:`predictor.data.published.measured_step_s` (Megatron-LM's TFLOP/s with its own FLOP
count, no recompute). What the rows leave blank is filled from what their notes and
sources state, printed below (``ASSUMED``); rows that state no layout or batch are not
predicted (``pred_status``).
"""
from __future__ import annotations

import argparse
import time

from predictor.analyses.batch import predict_table
from predictor.core.profiles import DATA_DIR
from predictor.data.published import ASSUMED, published_runs

E2E = DATA_DIR / "e2e"
SETS = ("torchtitan", "megatronlm_readme_h100", "neusight_dist")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=None, help="trained models root (default: the shipped models/)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    rows = published_runs(E2E, SETS, gpu="H100")
    for set_id, (text, _) in ASSUMED.items():
        print(f"ASSUMED {set_id}: {text}")
    t0 = time.perf_counter()
    pred = predict_table(rows, draws=500, models_root=args.models_dir)
    elapsed = time.perf_counter() - t0
    pred["error"] = pred.pred_iter_time_s_p50 / pred.measured_s - 1
    ok = pred.error.notna()
    if args.rows:
        cols = ["set_id", "model", "num_gpus", "tp", "pp", "dp", "cp", "mbs", "gbs", "precision", "measured_s",
                "pred_iter_time_s_p50", "error"]
        print(pred[cols].to_string(max_colwidth=22, float_format=lambda v: f"{v:.3f}"))
    print(f"{ok.sum()} H100 rows predicted in {elapsed:.1f} s; {(~ok).sum()} not: "
          + "; ".join(sorted(set(pred.pred_status[~ok]))))
    for set_id, g in pred[ok].groupby("set_id"):
        print(f"  {set_id:24s} {len(g):3d} rows  median APE {g.error.abs().median():6.1%}  "
              f"signed median {g.error.median():+6.1%}")
    ape = pred.error[ok].abs()
    inside = ((pred.measured_s >= pred.pred_iter_time_s_p5) & (pred.measured_s <= pred.pred_iter_time_s_p95))[ok]
    print(f"all H100 rows: median APE {ape.median():.1%} (issue 7: <= 15%), p90 {ape.quantile(0.9):.1%}; "
          f"measured inside the 90% predictive interval: {inside.mean():.0%} (in-sample; held out: bench_doubt.py)")


if __name__ == "__main__":
    main()
