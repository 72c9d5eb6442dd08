"""prism predict-batch on a large table: speed, resume, and what fewer draws cost.

    python benchmarks/bench_batch.py [--rows 10000] [--draws N]

(1) Builds a table of ``--rows`` jobs from the published runs of data/e2e (the rows that
predict), repeating and perturbing their real layouts: global batch x{1/2, 1, 2}, micro-batch
1/2/4/8, tp and pp traded against each other, GPU count x{1/2, 1, 2} through dp, and
every count written as "12" or "12.0" at random (the reader must not care). Predicts it
with :func:`predictor.analyses.batch.predict_batch` into a temporary file and prints
rows/s and the wall time (the issue asks for 10,000 rows in at most 60 s on 2 cores).

(2) The resume check: the output cut to its first half with a torn last line, as a
Ctrl-C mid-write leaves it, is completed by a second run, which must predict only the
missing rows and leave the file identical to the first run's.

(3) The cost of the batch's draws a row (``predict_batch``'s default) against 1,000 draws on
vtrain_multi (109 Megatron-LM runs on 64-512 A100): median and p90 absolute % error of the
median step, and the mean Spearman correlation within groups of rows sharing model and
GPU count, as benchmarks/bench_e2e.py prints them.
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from predictor.analyses.batch import DRAWS, predict_batch, predict_table
from predictor.core.profiles import DATA_DIR
from predictor.data.published import published_runs

E2E = DATA_DIR / "e2e"


def _count(value: int, rng: random.Random) -> str:
    return f"{value}.0" if rng.random() < 0.5 else str(value)


def build_table(rows: int, seed: int = 0) -> list[dict]:
    """``rows`` jobs perturbed from the published rows that predict (cells as text)."""
    rng = random.Random(seed)
    base = pd.read_csv(E2E / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    ok = predict_table(base, draws=50).pred_status == "ok"
    base = base[ok.to_numpy()].to_dict("records")
    out = []
    while len(out) < rows:
        r = dict(rng.choice(base))
        n = {k: int(float(r[k])) for k in ("tp", "pp", "dp", "gbs", "layers", "heads")}
        cp = int(float(r["cp"] or 1))
        if rng.random() < 0.5:  # trade tp against pp within the model's divisors
            for tp, pp in ((n["tp"] * 2, n["pp"] // 2), (n["tp"] // 2, n["pp"] * 2)):
                if tp >= 1 and pp >= 1 and n["heads"] % tp == 0 and tp <= 8 and n["layers"] >= pp:
                    n["tp"], n["pp"] = tp, pp
                    break
        n["dp"] = max(1, int(n["dp"] * rng.choice((0.5, 1, 1, 2))))
        mbs = rng.choice((1, 2, 4, 8))
        micro = max(1, round(n["gbs"] * rng.choice((0.5, 1, 1, 2)) / (mbs * n["dp"])))
        r.update({k: _count(v, rng) for k, v in n.items()})
        r.update(mbs=_count(mbs, rng), gbs=_count(micro * mbs * n["dp"], rng),
                 num_gpus=_count(n["dp"] * n["tp"] * n["pp"] * cp, rng))
        out.append(r)
    return out


def _write(path: Path, table: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)


def speed_and_resume(rows: int, draws: int) -> None:
    table = build_table(rows)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "jobs.csv", Path(tmp) / "predicted.csv"
        _write(src, table)
        t0, cpu = time.perf_counter(), time.process_time()
        report = predict_batch(src, out, draws=draws)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
        print(f"{rows:,} rows ({report.distinct_jobs:,} distinct jobs), {draws} draws a row, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}: {wall:.1f} s wall ({cpu:.1f} s CPU), {rows / wall:,.0f} rows/s; "
              f"{report.predicted:,} predicted, {report.failed:,} with a pred_status")
        full = out.read_bytes()
        lines = full.splitlines(keepends=True)
        half = len(lines) // 2
        out.write_bytes(b"".join(lines[:half]) + lines[half][: len(lines[half]) // 2])  # a torn last line
        t0 = time.perf_counter()
        again = predict_batch(src, out, draws=draws)
        wall = time.perf_counter() - t0
        same = out.read_bytes() == full
        print(f"resume: {again.resumed:,} rows kept from the cut file, {rows - again.resumed:,} predicted again "
              f"in {wall:.1f} s; output identical to the uninterrupted run: {same}")
        t0 = time.perf_counter()
        done = predict_batch(src, out, draws=draws)
        print(f"rerun of a finished table: {done.resumed:,} rows resumed, nothing predicted, "
              f"{time.perf_counter() - t0:.1f} s")


def accuracy(draws: int) -> None:
    rows = published_runs(E2E, ["vtrain_multi"])
    for n in dict.fromkeys((draws, 1000)):
        t0 = time.perf_counter()
        pred = predict_table(rows, draws=n)
        ape = (pred.pred_iter_time_s_p50 - pred.measured_s).abs() / pred.measured_s
        rho = [spearmanr(g.measured_s, g.pred_iter_time_s_p50).correlation
               for _, g in pred.groupby(["model", "num_gpus"]) if len(g) > 2]
        print(f"vtrain_multi at {n:>4} draws: median APE {ape.median():.1%}, p90 {ape.quantile(0.9):.1%}, "
              f"Spearman within groups {np.mean(rho):.3f} ({time.perf_counter() - t0:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--draws", type=int, default=DRAWS, help=f"draws a row (default: predict-batch's {DRAWS})")
    args = ap.parse_args()
    speed_and_resume(args.rows, args.draws)
    accuracy(args.draws)


if __name__ == "__main__":
    main()
