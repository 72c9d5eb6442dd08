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

Proper scores (issue 53; predictor.latency.scores): every row is also predicted as
``prism predict`` does (predictor.analyses.doubt.predict_runs' path: Predictor.step, the
doubt features) and scored, relative to the measured step, with the coverage of the
50/80/90% central intervals, the median width of the 90% one over the composed median, the
mean interval score at 50/80/90% (Gneiting & Raftery 2007 eq. 43) and the mean CRPS (its
quantile decomposition on the levels p5..p95). Four predictive distributions:
``shipped`` (models/doubt, what predict-batch's pred_iter_time_s_p5..p95 columns state:
in-sample for the sources it was fitted on), ``loso`` (the error model fitted and
calibrated without the row's source, as bench_doubt's check; this machine's suite runs
among the training sources, as one source), ``fitonly`` (score side only: the error model
fitted on the fit side's sources and the suite runs alone, split.yaml's caveat lifted) and
``band`` (no error model: the composed step distribution's own quantiles, the within-run
variability around the composed median). ``--no-loso`` skips the leave-one-source-out
refits and ``fitonly``; ``--table-only`` prints the first table alone (the README's figures).
A last section sets PRISM's step-time spread
(step_time_s p10/p50 and p90/p50, and one run's steps, ``one_run_s``) beside the MLPerf
runs' pooled per-step p10/p50/p90 of data/e2e/e2e_mlperf_visible.csv's notes. ``--prototype`` adds a between-source
random-effects / group-conformal error model (benchmarks only: log(measured/predicted) =
source offset + noise, symmetric in log space, calibrated on sources as units, left out
one source at a time), scored beside the others.
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
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.latency.scores import relative_crps, relative_interval_score, relative_width

LEVELS = np.asarray(DEFAULT_QUANTILES)
#: Nominal coverages scored: central intervals of LEVELS.
SCORED = (0.5, 0.8, 0.9)


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


# ---------------------------------------------------------------- proper scores (issue 53)

def predicted_rows(runs: pd.DataFrame, draws: int):
    """Each row of ``runs`` predicted as ``prism predict`` does (predict_runs' path), its
    index kept: a table (``row``, ``source``, ``predicted_s``, ``measured_s``, the composed
    step distribution's ``p5_s`` .. ``p95_s``) and the doubt features, one row each."""

    from predictor.analyses.doubt import family
    from predictor.analyses.rows import RowLookups, row_job
    from predictor.engine.doubt import features
    from predictor.latency.doubt import FEATURES

    lookups = RowLookups()
    predictor = lookups.predictor
    out, X = [], []
    for i, row in runs.iterrows():
        try:
            fam = family(row.get("framework", ""))
            job = row_job(lookups.job(row))
            tier = predictor.tier(job)
            work = predictor.workload(job)
            dist = predictor.step(job, draws, 0)
            x = features(work, dist, tier, fam)
        except Exception:  # noqa: BLE001 - not predicted; the reach above counts it
            continue
        X.append(x)
        out.append({"row": i, "source": row["source"], "predicted_s": float(np.median(dist.draws)),
                    "measured_s": float(row["measured_s"]),
                    **{f"p{round(a * 100)}_s": float(np.quantile(dist.draws, a)) for a in LEVELS}})
    return pd.DataFrame(out), np.array(X).reshape(len(out), len(FEATURES))


def loso_log_quantiles(X: np.ndarray, y: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """(n, k) quantiles of log(measured / predicted) of each row from the error model fitted
    and calibrated without its source (predictor.analyses.doubt.check's construction)."""
    from predictor.latency.doubt import DoubtModel, left_out_quantiles

    return left_out_quantiles(DoubtModel(), X, y, sources)


def random_effects_log_quantiles(y: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """Prototype (benchmarks only): log(measured / predicted) = a source's offset + noise
    within it; a new source's is predicted as the other sources' mean offset (each source
    weighing the same), its interval symmetric in log space, the half-width at coverage c
    the source-weighted c-quantile of |y - centre| of the other sources, each of them
    scored against the centre its own leaving-out gives (group conformal, sources as
    units). (n, k) quantiles of each row, its own source left out of everything."""
    from predictor.latency.doubt import _weighted_quantile, source_weights

    names = np.unique(sources)
    medians = {s: float(np.median(y[sources == s])) for s in names}

    def centre(without: set) -> float:
        return float(np.mean([medians[s] for s in names if s not in without]))

    q = np.empty((len(y), len(LEVELS)))
    mid = len(LEVELS) // 2
    for source in names:
        train = sources != source
        c0 = centre({source})
        scores = np.abs(y[train] - np.array([centre({source, s}) for s in sources[train]]))
        w = source_weights(sources[train])
        row = np.empty(len(LEVELS))
        row[mid] = c0
        for lo in range(mid):
            hi = len(LEVELS) - 1 - lo
            half = _weighted_quantile(scores, w, LEVELS[hi] - LEVELS[lo])
            row[lo], row[hi] = c0 - half, c0 + half
        q[sources == source] = row
    return q


def scores(quantiles_s: np.ndarray, measured: np.ndarray, median_s: np.ndarray) -> dict:
    """Coverage at 50/80/90%, median 90% width over the composed median, mean relative
    interval score at 50/80/90% and mean relative CRPS of rows with ``quantiles_s`` (n, k)
    at LEVELS."""
    if len(measured) == 0:
        return {}
    levels = list(np.round(LEVELS, 2))
    out = {"n": int(len(measured))}
    for c in SCORED:
        lo = quantiles_s[:, levels.index(round(0.5 - c / 2, 2))]
        hi = quantiles_s[:, levels.index(round(0.5 + c / 2, 2))]
        out[f"cover{round(c * 100)}"] = float(((lo <= measured) & (measured <= hi)).mean())
        out[f"is{round(c * 100)}"] = float(np.mean(relative_interval_score(lo, hi, measured, 1 - c)))
        if c == 0.9:
            out["width90"] = float(np.median(relative_width(lo, hi, median_s)))
    out["crps"] = float(np.mean(relative_crps(LEVELS, quantiles_s, measured)))
    return out


def score_line(name: str, f: dict, width: int = 34) -> str:
    if not f:
        return f"  {name[:width]:<{width}}     -"
    return (f"  {name[:width]:<{width}} n {f['n']:>5}  in50/80/90 {f['cover50']:5.1%} {f['cover80']:5.1%} "
            f"{f['cover90']:5.1%}  w90 {f['width90']:5.2f}  IS50/80/90 {f['is50']:5.2f} {f['is80']:5.2f} "
            f"{f['is90']:6.2f}  CRPS {f['crps']:5.3f}")


def short_line(name: str, fs: dict, width: int = 30) -> str:
    """One source, several distributions side by side: in90, IS90, CRPS each."""
    cells = []
    for label, f in fs.items():
        cells.append(f"{label} {f['cover90']:5.1%} {f['is90']:6.2f} {f['crps']:5.3f}" if f else f"{label}    -")
    return f"  {name[:width]:<{width}} n {next(iter(fs.values())).get('n', 0):>5}  " + "  ".join(cells)


def mean_over_sources(per_source: dict) -> dict:
    """Each source weighing the same: the mean of its figures."""
    fs = [f for f in per_source.values() if f]
    out = {k: float(np.mean([f[k] for f in fs])) for k in fs[0]} if fs else {}
    return {**out, "n": len(fs)} if fs else {}  # n: sources


def within_run(runs: pd.DataFrame, table: pd.DataFrame, draws: int) -> pd.DataFrame:
    """MLPerf runs whose notes give pooled per-step p10/p50/p90: measured p10/p50 and
    p90/p50 beside PRISM's step_time_s (the composed step distribution) p10/p50, p90/p50,
    its one run's steps (``prism predict``'s ``one_run_s``: predictor.engine.report.one_run_draws)
    and the spread of the per-run medians where stated."""
    import re

    from predictor.analyses.rows import RowLookups, row_job
    from predictor.engine.compose import PER_STEP
    from predictor.engine.report import one_run_draws

    lookups = RowLookups()
    pooled = re.compile(r"pooled per-step p10/p50/p90 = ([\d.]+)/([\d.]+)/([\d.]+)")
    per_run = re.compile(r"per-run medians ([\d.]+(?:, [\d.]+)+)")
    rows = []
    by_row = table.set_index("row")
    for i, r in runs.iterrows():
        notes = str(r.get("notes", ""))
        m = pooled.search(notes)
        if not m or "mlperf" not in str(r.get("table", "")):
            continue
        p10, p50, p90 = map(float, m.groups())
        medians = [float(v) for v in per_run.search(notes).group(1).split(", ")] if per_run.search(notes) else []
        pred = by_row.loc[i] if i in by_row.index else None
        one = np.full(3, np.nan)
        if pred is not None:
            full, persistent = lookups.predictor.steps(row_job(lookups.job(r)), [(), PER_STEP], draws, 0)
            one = np.quantile(one_run_draws(full.draws, persistent.draws), (0.1, 0.5, 0.9))
        rows.append({"source": r.source, "model": str(r.model)[:22], "gpu": str(r.gpu)[:10], "gpus": int(r.num_gpus),
                     "derived": "DERIVED" in notes, "meas_p10": p10 / p50, "meas_p90": p90 / p50,
                     "run_spread": (max(medians) / min(medians) - 1) if len(medians) > 1 else np.nan,
                     "pred_p10": pred.p10_s / pred.p50_s if pred is not None else np.nan,
                     "pred_p90": pred.p90_s / pred.p50_s if pred is not None else np.nan,
                     "run_p10": one[0] / one[1], "run_p90": one[2] / one[1],
                     "pred_over_meas": pred.predicted_s / r.measured_s if pred is not None else np.nan})
    return pd.DataFrame(rows)


def proper_scores(runs: pd.DataFrame, pred: pd.DataFrame, side_of: dict, args) -> dict:
    """The proper-scores sections (module docstring); returns their figures."""
    from predictor.analyses.doubt import machine_errors
    from predictor.engine.doubt import shipped_model

    t0 = time.perf_counter()
    table, X = predicted_rows(runs, args.draws)
    y = np.log(table.measured_s.to_numpy() / table.predicted_s.to_numpy())
    sources = table.source.to_numpy().astype(str)
    P = table.predicted_s.to_numpy()[:, None]
    dists = {"shipped": P * np.exp(shipped_model().predict(X)),
             "band": table[[f"p{round(a * 100)}_s" for a in LEVELS]].to_numpy()}
    print(f"proper scores: {len(table)} rows predicted as prism predict does in {time.perf_counter() - t0:.0f} s")
    batch = pred.loc[table.row, [f"pred_iter_time_s_p{p}" for p in (5, 10, 50, 90, 95)]].to_numpy(float)
    ours = np.column_stack([dists["shipped"][:, list(np.round(LEVELS, 2)).index(a)] for a in (0.05, 0.1)]
                           + [table.predicted_s.to_numpy()]
                           + [dists["shipped"][:, list(np.round(LEVELS, 2)).index(a)] for a in (0.9, 0.95)])
    print(f"  shipped p5/p10/p90/p95 and composed median against predict-batch's pred_iter_time_s_p5..p95 columns: "
          f"largest relative difference {np.nanmax(np.abs(ours / batch - 1)):.2e}")
    if not args.no_loso:
        t1 = time.perf_counter()
        suites = machine_errors()  # this machine's suite runs: training sources, as models/doubt has them
        Xs, ys, ss = X, y, sources
        if suites is not None:
            Xs = np.vstack([X, suites.X])
            ys = np.concatenate([y, suites.y])
            # one source for the refits (52 sources would take 2,700 fits): the family they weigh as
            from predictor.latency.doubt import source_family
            ss = np.concatenate([sources, [source_family(s) for s in suites.table.source.astype(str)]])
        dists["loso"] = P * np.exp(loso_log_quantiles(Xs, ys, ss)[:len(y)])
        # fit side only (split.yaml's caveat lifted): the error model fitted on the fit side's sources
        # (and this machine's suite runs), stating the score side's intervals; NaN on the fit side
        from predictor.latency.doubt import DoubtModel
        fit_rows = np.concatenate([table.source.map(side_of).eq("fit").to_numpy(), np.ones(len(ys) - len(y), bool)])
        fitonly = np.full((len(y), len(LEVELS)), np.nan)
        score_rows = ~fit_rows[:len(y)]
        fitonly[score_rows] = DoubtModel().fit(Xs[fit_rows], ys[fit_rows], ss[fit_rows]).predict(X[score_rows])
        dists["fitonly"] = P * np.exp(fitonly)
        if args.prototype:
            dists["re"] = P * np.exp(random_effects_log_quantiles(ys, ss)[:len(y)])
        print(f"leave-one-source-out refits in {time.perf_counter() - t1:.0f} s")
    meta = pred.loc[table.row, ["class"]].reset_index(drop=True)
    table["side"], table["class"] = table.source.map(side_of), meta["class"]
    measured, median = table.measured_s.to_numpy(), table.predicted_s.to_numpy()
    report = {}
    print("Relative to the measured step; in = coverage, w90 = median 90% width / composed median, IS = mean interval\n"
          "score, CRPS = mean CRPS (lower is better).  shipped = models/doubt (predict-batch's p5..p95), loso = the\n"
          "error model left out one source at a time, band = no error model (the composed distribution's quantiles)"
          + (", fitonly = the error model fitted on the fit side's sources only (score side)" if "fitonly" in dists
             else "") + (", re = random-effects prototype" if "re" in dists else "") + ".\n")
    for side in ("fit", "score"):
        on = (table.side == side).to_numpy()
        report[side] = {}
        print(f"{side.upper()} side")
        for label, q in dists.items():
            if np.isnan(q[on]).all():
                continue
            per_source = {s: scores(q[on & (sources == s)], measured[on & (sources == s)], median[on & (sources == s)])
                          for s in sorted(set(sources[on]))}
            f = {"all": scores(q[on], measured[on], median[on]), "sources equal": mean_over_sources(per_source),
                 "sources": per_source,
                 "classes": {c: scores(q[on & m], measured[on & m], median[on & m])
                             for c in sorted(set(table["class"][on])) for m in [(table["class"] == c).to_numpy()]}}
            report[side][label] = f
            print(f" {label}:")
            print(score_line("all rows", f["all"]))
            print(score_line("all, each source the same", f["sources equal"]))
            if label == "shipped":
                print("  per source:")
                for s, g in per_source.items():
                    print(score_line(s, g))
                print("  per class:")
                for c, g in f["classes"].items():
                    print(score_line(c, g, 44))
        print(" per source, side by side (in90, IS90, CRPS):")
        for s in sorted(set(sources[on])):
            print(short_line(s, {k: report[side][k]["sources"][s] for k in report[side]}))
        print(short_line("each source the same", {k: report[side][k]["sources equal"] for k in report[side]}))
        print()
    wr = within_run(runs, table, args.draws)
    if len(wr):
        print("Within-run spread, MLPerf runs (pooled per-step p10/p90 over p50, measured; PRISM's step_time_s "
              "p10/p90 over p50, pred_; its one run's steps, run_):")
        with pd.option_context("display.width", 200, "display.max_rows", 200):
            print(wr.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        ok = wr.dropna(subset=["pred_p10"])
        meas = ok.meas_p90 - ok.meas_p10
        predicted = ok.pred_p90 - ok.pred_p10
        one = ok.run_p90 - ok.run_p10
        ratio = np.log(one / meas)
        print(f"median (p90-p10)/p50: measured {np.median(meas):.4f}, step_time_s {np.median(predicted):.4f}, one "
              f"run's steps {np.median(one):.4f}; wider than measured in {(predicted > meas).sum()} and "
              f"{(one > meas).sum()} of {len(ok)} runs; one run's over measured: median "
              f"{np.exp(np.median(ratio)):.2f}x, "
              f"quartiles {np.exp(np.quantile(ratio, 0.25)):.2f}-{np.exp(np.quantile(ratio, 0.75)):.2f}x; "
              f"per-run median spread (max/min-1) median {np.nanmedian(wr.run_spread):.4f}\n")
        report["within_run"] = wr.to_dict("records")
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=300, help="Monte Carlo draws per row (default 300)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    ap.add_argument("--rows", action="store_true", help="print the reasons rows were not predicted")
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out refits")
    ap.add_argument("--table-only", action="store_true",
                    help="the per-side, per-source and per-class table alone (the README's accuracy figures): no "
                         "proper scores, no within-run section (half the time)")
    ap.add_argument("--prototype", action="store_true", help="add the random-effects / group-conformal prototype")
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
    if not args.table_only:
        report["scores"] = proper_scores(runs, pred, side_of, args)
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
