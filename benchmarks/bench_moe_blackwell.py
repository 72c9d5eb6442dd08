"""Predicted vs measured step times of the published Mixture-of-Experts and Blackwell runs.

    python benchmarks/bench_moe_blackwell.py [--draws N]

data/e2e/e2e_moe_blackwell_visible.csv (45 rows): Megatron-Core MoE runs (Qwen3-235B-A22B on
H100/GB200/GB300, DeepSeek-V3 on GB200, Mixtral 8x22B on H100), torchtitan/torchao Llama 4
Scout runs, and MLPerf Training v5.1 dense Llama 3.1 runs on B200/GB200/GB300. Every row
gets a line: its prediction (median step) against the measured step, or the one-line
reason it was not predicted (the column to fix, as ``prism predict-batch`` says it).

Then the median absolute percentage error of the median step per set_id, and overall for
the MoE rows (a num_experts cell) and for the Blackwell rows (B200, GB200, GB300 GPUs); a
row on a Blackwell GPU with experts counts in both. Many measured steps are derived from
published TFLOP/s (``iter_time_s_derived``; the notes column says how): they carry that
source's FLOP count. The Mixtral steps are the scripts' expected TFLOP/s, not logs. Most
Megatron MoE rows force balanced routing (best case). Nothing here is fitted to these rows.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from predictor.analyses.batch import predict_table
from predictor.core.profiles import DATA_DIR
from predictor.data.published import measured_step_s

TABLE = DATA_DIR / "e2e" / "e2e_moe_blackwell_visible.csv"
BLACKWELL = ("B200", "GB200", "GB300")


def median_ape(rows: pd.DataFrame) -> str:
    ape = rows.ape.dropna()
    return f"{ape.median():.1%} over {len(ape)} of {len(rows)} rows" if len(ape) else f"none of {len(rows)} rows"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=500, help="Monte Carlo draws per row (default 500)")
    args = ap.parse_args()
    table = pd.read_csv(TABLE)
    table["measured_s"] = [measured_step_s(row) for _, row in table.iterrows()]
    t0 = time.perf_counter()
    pred = predict_table(table, draws=args.draws)
    seconds = time.perf_counter() - t0
    pred["ape"] = (pred.pred_iter_time_s_p50 - pred.measured_s).abs() / pred.measured_s
    pred["moe"] = pred.num_experts.notna()
    pred["blackwell"] = pred.gpu.astype(str).str.upper().str.contains("|".join(BLACKWELL))
    print(f"{TABLE.name}: {len(pred)} rows predicted in {seconds:.1f} s ({args.draws} draws each)\n")
    for i, r in pred.iterrows():
        model = str(r.model)[:24]
        head = f"{i:>2} {r.set_id[:30]:<30} {model:<24} {str(r.gpu)[:14]:<14} {int(r.num_gpus):>5}"
        if r.pred_status != "ok":
            print(f"{head}  not predicted: {r.pred_status}")
        elif np.isnan(r.measured_s):
            print(f"{head}  predicted {r.pred_iter_time_s_p50:8.3f} s; no measured step (notes: {str(r.notes)[:60]})")
        else:
            signed = (r.pred_iter_time_s_p50 - r.measured_s) / r.measured_s
            print(f"{head}  measured {r.measured_s:8.3f} s  predicted {r.pred_iter_time_s_p50:8.3f} s  "
                  f"({signed:+.1%})")
    print("\nmedian APE of the median step, per set_id:")
    for set_id, rows in pred.groupby("set_id", sort=False):
        print(f"  {set_id:<32} {median_ape(rows)}")
    print(f"\nMoE rows (target <= 15%):       {median_ape(pred[pred.moe])}")
    print(f"  of them on H100:              {median_ape(pred[pred.moe & ~pred.blackwell])}")
    print(f"Blackwell rows (target <= 12%): {median_ape(pred[pred.blackwell])}")
    print(f"  dense (MLPerf v5.1):          {median_ape(pred[pred.blackwell & ~pred.moe])}")


if __name__ == "__main__":
    main()
