"""Predicted vs measured step times of published runs (../shared/data/e2e).

    python benchmarks/bench_e2e.py [--single-node-rows N]

vtrain_multi (109 Megatron-LM runs on 64-512 A100): absolute % error of the median
step time (median and 90th percentile), and the Spearman correlation of predicted vs
measured time within each group of rows sharing model and GPU count. narayanan2021_t1/t2
publish hardware TFLOP/s per GPU, not step times: the step time is recovered with their
eq. 3 (hardware FLOPs with full recompute, arXiv 2104.04473). vtrain_single_node: 1,440
runs on one 8-GPU A100 node.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from predictor.analyses.batch import GPT_VOCAB, predict_table

E2E = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2e"


def errors(pred, measured) -> str:
    ape = (np.abs(pred - measured) / measured).dropna()
    signed = ((pred - measured) / measured).dropna()
    return (f"{len(ape)} rows: median APE {ape.median():.1%}, p90 {ape.quantile(0.9):.1%}, "
            f"signed median {signed.median():+.1%}")


def narayanan_step_s(row) -> float:
    """Step time from published hardware TFLOP/s: F = 96·B·s·l·h²·(1 + s/6h + V/16lh) (eq. 3)."""
    b, s, l, h = row.gbs, row.seq_len, row.layers, row.hidden
    v = row.vocab if not np.isnan(row.vocab) else GPT_VOCAB
    flops = 96 * b * s * l * h ** 2 * (1 + s / (6 * h) + v / (16 * l * h))
    return flops / (row.tflops_per_gpu * 1e12 * row.num_gpus)


def single_node_table(n: int | None) -> pd.DataFrame:
    raw = pd.read_csv(E2E / "e2e_vtrain_single_node.csv")
    if n:
        raw = raw.sample(n=min(n, len(raw)), random_state=0)
    return pd.DataFrame({
        "set_id": "vtrain_single_node", "model": "GPT", "layers": raw.layers, "hidden": raw.hidden,
        "heads": raw.heads, "kv_heads": np.nan, "ffn": np.nan, "vocab": np.nan, "seq_len": raw.seq_len,
        "gbs": raw.gbs, "mbs": raw.mbs, "tp": raw.tp, "pp": raw.pp, "dp": raw.dp, "cp": np.nan, "vp": np.nan,
        "seq_parallel": np.nan, "recompute": raw.recompute, "zero_or_distopt": np.nan,
        "framework": "Megatron-LM (vTrain single-node validation)", "gpu": "A100", "num_gpus": raw.num_gpus,
        "gpus_per_node": 8, "inter_node": np.nan, "intra_node": np.nan, "iter_time_s": raw.iter_time_ms / 1e3})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single-node-rows", type=int, default=None, help="a random subset (default: all 1,440)")
    args = ap.parse_args()
    table = pd.read_csv(E2E / "e2e_training_visible.csv")

    t0 = time.perf_counter()
    vt = predict_table(table[table.set_id == "vtrain_multi"], draws=1000)
    print(f"vtrain_multi ({time.perf_counter() - t0:.1f} s): "
          f"{errors(vt.pred_iter_time_s_p50, vt.iter_time_s)}")
    rho = {k: spearmanr(g.iter_time_s, g.pred_iter_time_s_p50).correlation
           for k, g in vt.groupby(["model", "num_gpus"]) if len(g) > 2}
    print("  Spearman within groups: " + ", ".join(f"{m} x{n}: {r:.2f}" for (m, n), r in rho.items())
          + f"; mean {np.mean(list(rho.values())):.3f}")
    inside = ((vt.iter_time_s >= vt.pred_iter_time_s_p5) & (vt.iter_time_s <= vt.pred_iter_time_s_p95)).mean()
    print(f"  measured step inside the predicted 5-95% band: {inside:.1%}")

    for set_id in ("narayanan2021_t1", "narayanan2021_t2"):
        rows = table[table.set_id == set_id]
        pred = predict_table(rows, draws=500)
        measured = rows.apply(narayanan_step_s, axis=1)
        ok = pred.pred_status == "ok"
        print(f"{set_id}: {errors(pred.pred_iter_time_s_p50[ok], measured[ok])}; "
              f"{(~ok).sum()} rows not predicted: {sorted(set(pred.pred_status[~ok]))[:2]}")

    single = single_node_table(args.single_node_rows)
    t0 = time.perf_counter()
    pred = predict_table(single, draws=300)
    ok = pred.pred_status == "ok"
    print(f"vtrain_single_node ({time.perf_counter() - t0:.1f} s): {errors(pred.pred_iter_time_s_p50[ok], single.iter_time_s[ok])}"
          f"; {(~ok).sum()} rows not predicted")


if __name__ == "__main__":
    main()
