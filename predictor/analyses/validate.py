"""``prism validate``: predicted step-time distributions against measured ones, per layout.

For each layout of a measurement file (:mod:`predictor.data.measurements`) the composer
predicts the step-time distribution from the hardware's operator models, and the
measured steps (the slowest rank of each; those the hypervisor disturbed left out, as the
samples leave them out: :func:`~predictor.data.measurements.undisturbed`) are scored against it:

- ``median_ape``, ``p95_ape``: absolute % error of the predicted median and 95th
  percentile against the measured ones;
- ``ks``: the two-sample Kolmogorov–Smirnov distance between predicted draws and
  measured steps (0 = same distribution, 1 = disjoint);
- ``coverage_80``: the share of measured steps inside the predicted 10–90% interval
  (0.8 when calibrated);
- ``p95_p50_pred`` / ``p95_p50_meas``: the tail ratio each side sees (the within-run
  spread, step-time variability);
- ``median_in_80``: whether the 80% predictive interval of the median step
  (:mod:`predictor.analyses.doubt`) holds the measured median;
- ``notes``: why a layout's scores mean less than they seem (too few steps for a
  distribution, a job the hardware's memory cannot hold); :attr:`Validation.notes` lists them.

A layout whose measured median is over 100 times its predicted one, or under a hundredth of
it, is refused rather than scored (:func:`~predictor.data.measurements.check_step_unit`, which ``prism
calibrate`` applies too): steps in milliseconds given as seconds.

:func:`validate_published` scores a table of published runs the same way a user meets
them: each row's measured step against the predictive distribution of its median step
(median absolute error, coverage of the 50/80/90% intervals, their median relative width,
and the probability integral transform of every run, for a reliability diagram and a
PIT histogram).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp

from predictor.analyses.doubt import COVERAGES, predict_runs
from predictor.core.errors import PrismError
from predictor.core.framework import reference_framework
from predictor.core.profiles import as_hardware
from predictor.core.specs import DISTURBING_STEAL, HardwareConfig
from predictor.data.measurements import COLUMNS, check_step_unit, measured_on, measured_workloads, step_times
from predictor.engine.doubt import doubt_of, shipped_model
from predictor.engine.draws import cdf_at
from predictor.engine.predictor import ModelSet, Predictor, Source, Workload
from predictor.engine.report import predictive_report
from predictor.workload.memory import memory_per_gpu


@dataclass
class LayoutScore:
    layout_id: str
    steps: int
    measured_p50_s: float
    predicted_p50_s: float
    measured_p95_s: float
    predicted_p95_s: float
    median_ape: float
    p95_ape: float
    ks: float | None  # None under MIN_DISTRIBUTION_STEPS steps: no distribution to compare
    coverage_80: float | None
    p95_p50_meas: float
    p95_p50_pred: float
    predictive_80_s: tuple[float, float] | None = None  # the 80% interval of the median step
    median_in_80: bool | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Validation:
    scores: list[LayoutScore]
    measured: dict  # layout_id -> measured step times (s)
    predicted: dict  # layout_id -> predicted draws (s)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([s.to_dict() for s in self.scores])

    @property
    def notes(self) -> list[str]:
        return [f"layout {s.layout_id!r}: {note}" for s in self.scores for note in s.notes]

    def summary(self) -> dict:
        t = self.table()
        spread_ok = (t.p95_p50_pred / t.p95_p50_meas - 1).abs() <= 0.05
        return {"layouts": len(t), "median_ape_median": float(t.median_ape.median()),
                "median_ape_worst": float(t.median_ape.max()), "ks_median": _median(t.ks),
                "coverage_80_median": _median(t.coverage_80), "p95_ape_median": float(t.p95_ape.median()),
                "median_in_80_share": float(t.median_in_80.mean()) if t.median_in_80.notna().all() else None,
                "spread_within_5pct": int(spread_ok.sum())}


def _median(scores: pd.Series) -> float | None:
    """The median of the layouts' scores that exist (None: no layout has one)."""
    known = pd.to_numeric(scores, errors="coerce").dropna()
    return float(known.median()) if len(known) else None


#: Fewer measured steps make no distribution: the KS distance and the 80% coverage of one step are
#: 0 or 1 by where it fell, and of four no finer than a quarter.
MIN_DISTRIBUTION_STEPS = 5
#: The share of a layout's operator time on priors past which validate notes it.
MOSTLY_PRIORS = 0.25
#: A measured step this many times its layout's median is no step of it (the machine's own
#: drift moves steps by up to about twice, docs/validation-log.md, "CPU validation suite").
FAR_STEP = 10.0


def score(layout_id: str, predicted: np.ndarray, measured: np.ndarray) -> LayoutScore:
    """The scores of one layout: predicted draws against measured step times (seconds)."""
    t, d = np.asarray(measured, float), np.asarray(predicted, float)
    m50, m95 = np.quantile(t, [0.5, 0.95])
    p10, p50, p90, p95 = np.quantile(d, [0.1, 0.5, 0.9, 0.95])
    enough = len(t) >= MIN_DISTRIBUTION_STEPS
    return LayoutScore(
        layout_id=layout_id, steps=len(t), measured_p50_s=float(m50), predicted_p50_s=float(p50),
        measured_p95_s=float(m95), predicted_p95_s=float(p95), median_ape=float(abs(p50 - m50) / m50),
        p95_ape=float(abs(p95 - m95) / m95), ks=float(ks_2samp(d, t).statistic) if enough else None,
        coverage_80=float(np.mean((t >= p10) & (t <= p90))) if enough else None, p95_p50_meas=float(m95 / m50),
        p95_p50_pred=float(p95 / p50), notes=_step_notes(t, m50))


def _step_notes(t: np.ndarray, median: float) -> list[str]:
    """What a layout's measured steps make of its scores: too few for a distribution, or
    steps no training step of it takes (a unit or a file gone wrong)."""
    notes = []
    if len(t) < MIN_DISTRIBUTION_STEPS:
        notes.append(f"{len(t)} step(s) measured: ks and coverage_80 compare distributions and need at least "
                     f"{MIN_DISTRIBUTION_STEPS} steps, so none is given; measure more (measure.steps=30)")
    far = t > FAR_STEP * median
    if far.any():
        notes.append(f"{int(far.sum())} step(s) over {FAR_STEP:g}x the median step (the longest {t.max():.4g} s "
                     f"against {median:.4g} s): no step of one layout takes that long; check the file's "
                     f"step_time_s (in seconds)")
    return notes


def checked_inputs(measured, hardware: HardwareConfig | str, models) -> HardwareConfig:
    """``hardware`` as a profile (a conf/hardware name loaded, as predict() takes one), once
    ``measured`` is checked to be rows of a measurement file taken on it and ``models`` a
    model set or None: the API's callers give what the command line reads and checks
    (:func:`~predictor.data.measurements.read_measurements`)."""
    if not isinstance(measured, pd.DataFrame):
        raise PrismError(f"measured={measured!r:.60}: a table of measured steps, e.g. "
                         f"read_measurements('runs/measured.parquet') of a prism measure file", field="measured")
    missing = ", ".join(c for c in COLUMNS if c not in measured)
    if missing or measured.empty:
        raise PrismError(f"measured: {f'no column {missing}' if missing else 'no rows'}; give the rows of a prism "
                         f"measure file (read_measurements)", field="measured")
    if models is not None and not isinstance(models, ModelSet):
        raise PrismError(f"models={models!r:.60}: a ModelSet (trained_models(hardware), or ModelSet.load(folder, "
                         f"hardware)), or None for the priors alone", field="models")
    hardware = as_hardware(hardware)
    measured_on(measured, hardware)
    return hardware


def validate(measured: pd.DataFrame, hardware: HardwareConfig | str, models: ModelSet | None, *, draws: int = 4000,
             seed: int = 0, calibrations: dict | None = None) -> Validation:
    """Score every layout of ``measured`` (rows of a measurement file,
    :func:`predictor.data.measurements.read_measurements`) predicted on ``hardware`` with
    ``models`` (None: the priors alone).

    ``calibrations`` maps a layout to the calibration to predict it with (e.g. one fitted
    without that layout, :func:`predictor.analyses.calibrate.cross_validate`); by default every
    layout uses the calibration stored with ``models``, if any.
    """
    hardware = checked_inputs(measured, hardware, models)
    scores, meas, pred = [], {}, {}
    predictor = Predictor.with_models(models, hardware)
    tier, doubt_model = predictor.tier(hardware), predictor.doubt_model
    timed = step_times(measured).groupby("layout_id").size()
    for layout_id, work, t in measured_workloads(measured, hardware):
        dist = predictor.compose(work, draws, seed, on=hardware, calibration=(calibrations or {}).get(layout_id))
        s = score(layout_id, dist.draws, t)
        if timed[layout_id] > len(t):
            s.notes.append(f"{timed[layout_id] - len(t)} step(s) timed while the hypervisor took over "
                           f"{DISTURBING_STEAL:.0%} of the busy CPU time (steal) left out; scored on the other "
                           f"{len(t)}")
        if models is not None and dist.prior_share >= MOSTLY_PRIORS:
            priors = sorted(op for op, e in dist.evidence.items() if e.source is not Source.MODEL)
            s.notes.append(f"{dist.prior_share:.0%} of its operator time rests on priors, not on samples "
                           f"({', '.join(priors[:4])}{', ...' if len(priors) > 4 else ''} have no model in "
                           f"{models.where}): the score and any calibration fitted to it say more of the priors "
                           f"than of the samples; sample those ops and train again")
        unfit = _does_not_fit(work, hardware)
        if unfit:
            s.notes.append(unfit)
        else:  # a job the machine cannot hold is predicted far from any steps, whatever their unit
            check_step_unit(layout_id, s.measured_p50_s, s.predicted_p50_s, hardware.name)
        threads = _other_threads(measured[measured.layout_id == layout_id], models)
        if threads:
            s.notes.append(threads)
        if doubt_model is not None:  # the reference workload runs PyTorch's own parallelism
            doubt = doubt_of(work, dist, tier, reference_framework().name, doubt_model)
            lo, hi = predictive_report(doubt)["interval_s"]["80%"]
            s.predictive_80_s, s.median_in_80 = (lo, hi), bool(lo <= s.measured_p50_s <= hi)
        scores.append(s)
        meas[layout_id], pred[layout_id] = t, dist.draws
    return Validation(scores, meas, pred)


def _other_threads(rows: pd.DataFrame, models: ModelSet | None) -> str | None:
    """Where a layout was measured at another intra-op thread count than the models' samples
    (the manifest's, where train recorded it): an op's time at one count is not its time at another."""
    sampled = ((models.manifest.get("samples") or {}).get("threads") if models else None)
    measured = sorted({int(n) for n in rows["threads_per_rank"].dropna()})
    if sampled is None or not measured or measured == [sampled]:
        return None
    return (f"measured at {', '.join(map(str, measured))} thread(s) per rank, the models sampled at {sampled}: an "
            f"op's time at one count does not stand for another's; sample and train at sampling.threads="
            f"{measured[0]} to predict these steps")


def _does_not_fit(work: Workload, hardware: HardwareConfig) -> str | None:
    """As prism predict says DOES NOT FIT: the job is predicted, but the steps cannot be its steps on this machine."""
    mem = memory_per_gpu(work.model, work.parallel, flash_attention=work.parallel.attention != "unfused")
    if mem.fits(hardware):
        return None
    return (f"DOES NOT FIT: {mem.total_gib:.1f} GiB per rank of {hardware.name}'s {hardware.memory.capacity_gib:g} "
            f"GiB, so these steps cannot be this job's on it and its errors mean nothing; check the layout's "
            f"model_json and parallel_json, or the profile's memory.capacity_gib")


@dataclass
class PublishedValidation:
    """Published runs against their predictive distributions: ``runs`` per row (source,
    tier, measured and predicted median, the 50/80/90% intervals, ``pit``: the predictive
    CDF at the measured step), ``summary`` overall and per tier, ``reliability``: nominal
    against observed coverage of central intervals (from the PIT), and the rows that could
    not be predicted, by reason."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    reliability: pd.DataFrame
    skipped: dict

    def to_dict(self) -> dict:
        return {"summary": self.summary.to_dict("records"), "reliability": self.reliability.to_dict("records"),
                "skipped": self.skipped, "runs": self.runs.to_dict("records")}


def validate_published(rows: pd.DataFrame, *, draws: int = 300, seed: int = 0) -> PublishedValidation:
    """Score ``rows`` (the published-runs layout, with ``measured_s``; e.g.
    :func:`predictor.analyses.doubt.published_with_steps`) against the predictive
    distribution of each run's median step, from the shipped models."""
    model = shipped_model()
    if model is None:
        raise PrismError("models/doubt: no predictive-uncertainty model to validate; train it with "
                         "python benchmarks/bench_doubt.py --save", field="models_dir")
    if "source" not in rows:
        rows = rows.assign(source=rows.get("set_id", "table"))
    errors = predict_runs(rows, draws=draws, seed=seed)
    if errors.table.empty:
        raise PrismError(f"published: none of the {len(rows)} rows could be predicted ({errors.skipped}); "
                         f"fill in the fields named", field="published")
    levels = np.asarray(model.levels)
    q = errors.table.predicted_s.to_numpy()[:, None] * np.exp(model.predict(errors.X))
    measured = errors.table.measured_s.to_numpy()
    pit = cdf_at(q, levels, measured)
    runs = errors.table.assign(pit=pit, **{f"q{a:g}_s": q[:, i] for i, a in enumerate(levels)})
    groups = [("all", np.ones(len(runs), bool))] + [(f"tier: {t}", (runs.tier == t).to_numpy())
                                                     for t in sorted(runs.tier.unique())]
    mid = len(levels) // 2
    summary = pd.DataFrame([{
        "group": name, "runs": int(mask.sum()),
        "median_ape": float(np.median(np.abs(q[mask, mid] / measured[mask] - 1))),
        **{f"cover{round(c * 100)}": float(np.mean(np.abs(pit[mask] - 0.5) <= c / 2)) for c in COVERAGES},
        "width90": float(np.median((q[mask, -1] - q[mask, 0]) / q[mask, mid]))} for name, mask in groups])
    nominal = np.linspace(0.1, 0.9, 9)
    reliability = pd.DataFrame({"nominal": nominal,
                                "observed": [float(np.mean(np.abs(pit - 0.5) <= c / 2)) for c in nominal]})
    return PublishedValidation(runs, summary, reliability, errors.skipped)
