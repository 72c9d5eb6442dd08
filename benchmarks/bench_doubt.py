"""Are PRISM's stated intervals true? Leave-one-source-out over every published run.

    python benchmarks/bench_doubt.py [--save] [--draws N]

Every published run with a measured step in data/e2e (the runs table, vTrain's 1,440
single-node runs, llm-foundry's MPT runs) is predicted as ``prism predict`` would. Each
source's runs are then given the predictive interval a model fitted without that source
states, calibrated on the other sources only (predictor.analyses.doubt.check). Printed
per evidence tier and per source: runs, the median absolute error of the median, the
coverage of the 50/80/90% predictive intervals and the median relative width of the 90%
one; beside them (``band_``) the same figures for the step-time variability's quantiles
alone (what PRISM stated before the error model). ``--save`` fits the model on every run and writes it to
models/doubt, where ``prism predict`` finds it.
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from predictor.analyses.doubt import check, fit, joined, machine_errors, predict_runs, published_with_steps
from predictor.latency.artifacts import models_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="fit on every run and write models/doubt")
    parser.add_argument("--draws", type=int, default=300, help="Monte Carlo draws per run (default 300)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    errors = predict_runs(published_with_steps(), draws=args.draws)
    t1 = time.perf_counter()
    print(f"{len(errors.table)} published runs predicted in {t1 - t0:.1f} s; not predicted: {errors.skipped or 'none'}")
    suites = machine_errors()
    if suites is not None:  # this CPU's suite runs, each predicted from its own fresh sample
        errors = joined(errors, suites)
        print(f"with {len(suites.table)} measured layouts of this machine's suite runs "
              f"({', '.join(sorted(suites.table.source.unique()))}, measurements/*-doubt.csv)")
    scores = check(errors)
    print(f"leave-one-source-out check in {time.perf_counter() - t1:.1f} s\n")
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(scores.to_string(index=False, formatters={
            "median_ape": "{:.1%}".format, **{c: "{:.1%}".format for c in scores if "cover" in c},
            **{c: "{:.0%}".format for c in scores if "width" in c}}))
    if args.save:
        model = fit(errors)
        report = scores.set_index("group")[["runs", "cover50", "cover80", "cover90", "width90"]].to_dict("index")
        path = model.save(models_dir() / "doubt", report)
        print(f"\nsaved {path} ({model.rows_} runs from {len(model.sources_)} sources)")


if __name__ == "__main__":
    main()
