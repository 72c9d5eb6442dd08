"""This CPU's suite runs again, from their own samples, with the code as it is now.

    python benchmarks/bench_suite_history.py [--runs CC,QQ] [--draws N]

Each kept suite run (``benchmarks/validation_suite.py``) left its fresh sample
(``measurements/local-cpu-suite-<run>-samples.parquet``) and its measured steps
(``measurements/local-cpu-suite-<run>.parquet``). Here every run's sample is trained as
``prism train`` trains it and every layout predicted from it as ``prism validate`` does,
no calibration: the suite's "samples" figures of each run, recomputed with today's code.

One suite run mixes two things: how fast this shared VM happened to run while it sampled
and while it measured (a whole run over or under), and what the composer gets wrong for a
layout. The second part is printed apart: each layout's log error less its run's median
log error (the run's drift taken out), its median over the runs and the spread between
their quartiles. A layout that comes out over or under in run after run, net of drift, is
a model error; one whose sign changes from run to run is noise.
"""
from __future__ import annotations

import argparse
import re
import time

import numpy as np
import pandas as pd

from predictor.analyses.validate import validate
from predictor.app.config import load_config
from predictor.core.profiles import REPO_ROOT, load_hardware, load_model, section
from predictor.core.specs import RegressorConfig
from predictor.data.measurements import read_measurements
from predictor.data.store import read_samples
from predictor.latency.artifacts import train
from predictor.latency.variability_fit import fit_variability

MEASUREMENTS = REPO_ROOT / "measurements"


def kept_runs() -> list[str]:
    """Runs whose sample and measured steps are both kept, in the order they ran."""
    names = [re.fullmatch(r"local-cpu-suite-(\w+)-samples", p.stem) for p in MEASUREMENTS.glob("*-samples.parquet")]
    runs = [m.group(1) for m in names if m and (MEASUREMENTS / f"local-cpu-suite-{m.group(1)}.parquet").exists()]
    return sorted(runs, key=lambda r: (len(r), r))


def run_scores(run: str, draws: int) -> pd.DataFrame:
    """One run's layouts predicted from its own sample: validate's table, and the log error."""
    hw = load_hardware("local-cpu")
    samples = read_samples(MEASUREMENTS / f"local-cpu-suite-{run}-samples.parquet")
    models = train(samples, hw, section(load_config([]), "regressor", RegressorConfig), n_jobs=2)
    models.variability = fit_variability(samples, hw)
    table = validate(read_measurements(MEASUREMENTS / f"local-cpu-suite-{run}.parquet"), hw, models,
                     draws=draws).table()
    return table.assign(run=run, log_error=np.log(table.predicted_p50_s / table.measured_p50_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", help="comma-separated run names (default: every kept run)")
    parser.add_argument("--draws", type=int, default=2000, help="Monte Carlo draws per layout (default 2000)")
    args = parser.parse_args()
    load_model("tiny")  # the suite's models: a missing conf/ fails here, before the first run's training
    runs = args.runs.split(",") if args.runs else kept_runs()
    missing = [r for r in runs if r not in kept_runs()]
    if missing:
        parser.error(f"--runs: no kept sample and measured steps for {', '.join(missing)}; kept: "
                     f"{', '.join(kept_runs())}")
    tables = []
    print(f"{'run':>4} {'median APE':>11} {'worst':>7} {'signed':>7} {'KS':>6}   (samples alone, no calibration)")
    for run in runs:
        t0 = time.perf_counter()
        t = run_scores(run, args.draws)
        tables.append(t)
        print(f"{run:>4} {t.median_ape.median():>11.1%} {t.median_ape.max():>7.1%} "
              f"{np.expm1(t.log_error.median()):>+7.1%} {t.ks.median():>6.3f}   ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    every = pd.concat(tables, ignore_index=True)
    by_run = every.groupby("run")
    print(f"over {len(runs)} runs: median APE {by_run.median_ape.median().median():.1%} (runs within 10%: "
          f"{(by_run.median_ape.median() <= 0.10).sum()}), worst layout {by_run.median_ape.max().median():.1%} "
          f"(within 25%: {(by_run.median_ape.max() <= 0.25).sum()}), KS {by_run.ks.median().median():.3f} "
          f"(within 0.35: {(by_run.ks.median() <= 0.35).sum()}); the medians over the runs")
    every["net"] = every.log_error - by_run.log_error.transform("median")
    layouts = every.groupby("layout_id").net.agg(
        median="median", q25=lambda s: s.quantile(0.25), q75=lambda s: s.quantile(0.75), runs="size")
    print("\neach layout net of its run's drift: median error over the runs, and the quartiles'")
    for layout, r in layouts.sort_values("median").iterrows():
        print(f"  {layout:<52} {np.expm1(r['median']):>+7.1%}   ({np.expm1(r.q25):+.1%} to {np.expm1(r.q75):+.1%}, "
              f"{int(r.runs)} runs)")


if __name__ == "__main__":
    main()
