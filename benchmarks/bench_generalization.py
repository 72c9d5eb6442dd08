"""The generalization protocol: every visible published run predicted, scored per side of
data/e2e/split.yaml (fit: sources one may fit or adjust on; score: only scored).

    python benchmarks/bench_generalization.py [--draws N] [--json PATH] [--rows]

Every row of data/e2e (predictor.data.split.visible_runs: each source once) goes through
``prism predict-batch``'s own function (predictor.analyses.batch.predict_table), and its
predicted median step is compared with the measured step (predictor.data.published.measured_step_s:
``iter_time_s``, else ``iter_time_s_derived``, else the source's FLOPs over its TFLOP/s).
Per side, per source and per class (the GPU's hardware profile x the GEMM precision x
dense/MoE), it prints n (rows with a measured step), reach (the share of them predicted),
the median signed and the median absolute percentage error of the predicted median step,
and the share of measured steps inside the 80% (p10-p90) and 90% (p5-p95) predictive
intervals. models/doubt (the intervals) was fitted on some score-side sources too (the
caveat in split.yaml): their coverage is in-sample until it is refitted on the fit side.
``--json`` writes the same figures; ``--rows`` prints each row not predicted, by reason.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.analyses.batch import predict_table
from predictor.core.errors import PrismError
from predictor.core.profiles import match_hardware
from predictor.data.published import row_precision
from predictor.data.split import load_split, visible_runs


def gpu_class(row) -> str:
    if isinstance(row.pred_hardware, str) and row.pred_hardware:
        return row.pred_hardware
    return match_hardware(str(row.gpu)) or str(row.gpu)


def precision_class(row) -> str:
    try:
        return row_precision(row.precision if isinstance(row.precision, str) else "", str(row.framework))[1]
    except PrismError:
        return "?"


def moe_class(row) -> str:
    experts = pd.to_numeric(pd.Series([row.get("num_experts")]), errors="coerce").iloc[0]
    return "moe" if np.isfinite(experts) and experts > 1 else "dense"


def figures(rows: pd.DataFrame) -> dict:
    """n, reach, median signed / absolute % error and 80%/90% coverage of ``rows``."""
    ok = rows[rows.pred_status == "ok"]
    signed = ok.pred_iter_time_s_p50 / ok.measured_s - 1
    out = {"n": int(len(rows)), "predicted": int(len(ok)), "reach": len(ok) / len(rows) if len(rows) else None,
           "median_signed": float(signed.median()) if len(ok) else None,
           "median_ape": float(signed.abs().median()) if len(ok) else None}
    for level, (lo, hi) in {"cover80": ("p10", "p90"), "cover90": ("p5", "p95")}.items():
        low, high = ok[f"pred_iter_time_s_{lo}"], ok[f"pred_iter_time_s_{hi}"]
        out[level] = float(((ok.measured_s >= low) & (ok.measured_s <= high)).mean()) if len(ok) else None
    return out


def line(name: str, f: dict, width: int = 44) -> str:
    def pct(v, signed=False):
        return "    -" if v is None else (f"{v:+6.1%}" if signed else f"{v:5.1%}")
    return (f"  {name[:width]:<{width}} n {f['n']:>5}  reach {pct(f['reach'])}  signed {pct(f['median_signed'], True)}"
            f"  APE {pct(f['median_ape'])}  in80 {pct(f['cover80'])}  in90 {pct(f['cover90'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=300, help="Monte Carlo draws per row (default 300)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    ap.add_argument("--rows", action="store_true", help="print the reasons rows were not predicted")
    args = ap.parse_args()
    side_of = load_split()
    runs = visible_runs()
    unplaced = sorted(set(runs.source) - set(side_of))
    if unplaced:
        raise SystemExit(f"data/e2e/split.yaml places no side for {', '.join(unplaced)}: place them first")
    runs = runs[np.isfinite(runs.measured_s)].reset_index(drop=True)
    t0 = time.perf_counter()
    pred = predict_table(runs, draws=args.draws)
    seconds = time.perf_counter() - t0
    pred["side"] = pred.source.map(side_of)
    pred["class"] = [f"{gpu_class(r)} x {precision_class(r)} x {moe_class(r)}" for _, r in pred.iterrows()]
    print(f"{len(pred)} visible published runs with a measured step, predicted in {seconds:.0f} s "
          f"({args.draws} draws each); median step vs measured step\n")
    report = {"draws": args.draws, "rows": int(len(pred)), "sides": {}}
    for side in ("fit", "score"):
        rows = pred[pred.side == side]
        f = {"all": figures(rows), "sources": {}, "classes": {}}
        print(f"{side.upper()} side")
        print(line("all", f["all"]))
        print(" per source:")
        for source, g in rows.groupby("source"):
            f["sources"][source] = figures(g)
            print(line(source, f["sources"][source]))
        print(" per class (GPU x GEMM precision x dense/MoE):")
        for cls, g in rows.groupby("class"):
            f["classes"][cls] = figures(g)
            print(line(cls, f["classes"][cls]))
        report["sides"][side] = f
        print()
    failed = pred[pred.pred_status != "ok"]
    reasons = Counter((r.source, str(r.pred_status)[:110]) for _, r in failed.iterrows())
    report["not_predicted"] = [{"source": s, "reason": why, "rows": n} for (s, why), n in reasons.most_common()]
    print(f"{len(failed)} rows not predicted" + (":" if args.rows and len(failed) else
                                                  " (--rows lists the reasons)" if len(failed) else ""))
    if args.rows:
        for (source, why), n in reasons.most_common():
            print(f"  {n:>4} {source}: {why}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
