"""How sure a prediction is: the features of a prediction that the predictive-uncertainty
model (:class:`~predictor.latency.doubt.DoubtModel`) reads, the published runs it learns
from, and its leave-one-source-out check.

Every published run with a measured step (``data/e2e``: the runs table, vTrain's
single-node runs, llm-foundry's MPT runs) is predicted as ``prism predict`` would (its
row turned into specs by :mod:`predictor.data.published`), and its error
``log(measured / predicted median)`` is paired with the features the user knew before
the run. :func:`check` scores intervals per evidence tier and source exactly as a user
meets them: each source predicted by a model that never saw it, its interval calibrated
on the other sources only.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.files import write_atomically
from predictor.core.framework import (
    reference_framework,
)
from predictor.core.profiles import DATA_DIR, REPO_ROOT
from predictor.engine.compose import StepDistribution
from predictor.engine.doubt import (  # noqa: F401  (the features and the shipped model, read here by their old names)
    DOUBT,
    Doubt,
    calls_per_step,
    check_framework,
    doubt_of,
    family,
    features,
    shipped_model,
    tier_code,
)
from predictor.engine.predictor import DEFAULT_QUANTILES, TIERS, Predictor
from predictor.latency.doubt import (
    FEATURES,
    DoubtModel,
    left_out_quantiles,
    source_weights,
)
from predictor.workload.decompose import Workload

if TYPE_CHECKING:  # pandas and the published tables only to fit and check: prism predict needs neither
    import pandas as pd

#: Nominal coverages the check scores (central intervals).
COVERAGES = (0.5, 0.8, 0.9)


def published_with_steps(e2e_dir=DATA_DIR / "e2e") -> pd.DataFrame:
    """Every published run with a measured step, in the runs-table layout, ``source`` the
    set it comes from."""
    import pandas as pd

    from predictor.data.llmfoundry import llmfoundry_runs
    from predictor.data.published import published_runs, single_node_runs

    tables = [published_runs(e2e_dir), single_node_runs(e2e_dir), llmfoundry_runs(e2e_dir)]
    rows = pd.concat(tables, ignore_index=True)
    rows = rows[np.isfinite(pd.to_numeric(rows["measured_s"], errors="coerce"))].reset_index(drop=True)
    return rows.assign(source=rows["set_id"])


@dataclass
class Errors:
    """Published runs predicted: per row its source, evidence tier, framework family,
    predicted median and measured step (s), and the features; rows that could not be
    predicted are counted by reason."""

    table: pd.DataFrame
    X: np.ndarray
    skipped: dict

    @property
    def y(self) -> np.ndarray:
        """log(measured / predicted median)."""
        return np.log(self.table.measured_s.to_numpy() / self.table.predicted_s.to_numpy())


def _error_row(source: str, tier: str, framework: str, gpu: str, work: Workload, model: str,
               dist: StepDistribution, measured_s: float) -> dict:
    """One row of an :class:`Errors` table: what was predicted, its step-time quantiles, and
    the measured median step."""
    return {"source": source, "tier": TIERS[tier_code(tier)], "framework": framework, "gpu": gpu,
            "gpus": work.gpus, "model": model, "predicted_s": float(np.median(dist.draws)), "measured_s": measured_s,
            **{f"p{round(a * 100)}_s": float(np.quantile(dist.draws, a)) for a in DEFAULT_QUANTILES}}


def predict_runs(rows: pd.DataFrame, draws: int = 300, seed: int = 0) -> Errors:
    """Predict every row of ``rows`` (the runs-table layout with ``measured_s`` and
    ``source``) as ``prism predict`` would, with ``draws`` draws."""
    import pandas as pd

    from predictor.analyses.rows import RowLookups, row_job

    lookups = RowLookups()
    predictor = lookups.predictor
    out, X, skipped = [], [], {}
    for _, row in rows.iterrows():
        try:
            fam = family(row.get("framework", ""))
            job = row_job(lookups.job(row))
            model, tier = job.model, predictor.tier(job)
            work = predictor.workload(job)
            dist = predictor.step(job, draws, seed)
        except PrismError as exc:
            reason = exc.field or "layout"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        X.append(features(work, dist, tier, fam))
        out.append(_error_row(row["source"], tier, fam, row["gpu"], work, model.name, dist, float(row["measured_s"])))
    return Errors(pd.DataFrame(out), np.array(X).reshape(len(out), len(FEATURES)), skipped)


def measured_errors(measured: pd.DataFrame, models, hardware, source: str, draws: int = 300,
                    seed: int = 0) -> Errors:
    """The layouts of a ``prism measure`` file (``measured``, :func:`~predictor.data.measurements.read_measurements`)
    predicted from ``models`` on ``hardware`` as ``prism validate`` does (the reference
    workload runs PyTorch's own parallelism: its framework file's uncertainty feature), their median step against
    the measured one: the composer's error on this machine, ``source`` naming the run."""
    import pandas as pd

    from predictor.data.measurements import measured_workloads

    predictor = Predictor.with_models(models, hardware)
    tier = predictor.tier(hardware)
    out, X = [], []
    for layout_id, work, t in measured_workloads(measured, hardware):
        dist = predictor.compose(work, draws, seed, on=hardware)
        reference = reference_framework().uncertainty_feature
        X.append(features(work, dist, tier, reference))
        out.append(_error_row(source, tier, reference, hardware.name, work, layout_id, dist, float(np.median(t))))
    return Errors(pd.DataFrame(out), np.array(X).reshape(len(out), len(FEATURES)), {})


def write_errors(errors: Errors, path) -> Path:
    """``errors`` as one CSV (its table, then a column ``x_<feature>`` per feature), written atomically."""
    import pandas as pd

    frame = pd.concat([errors.table.reset_index(drop=True),
                       pd.DataFrame(errors.X, columns=[f"x_{f}" for f in FEATURES])], axis=1)
    return write_atomically(Path(path), lambda tmp: frame.to_csv(tmp, index=False))


def read_errors(path) -> Errors:
    """An :class:`Errors` written by :func:`write_errors`."""
    import pandas as pd

    frame = pd.read_csv(path)
    columns = [f"x_{f}" for f in FEATURES]
    missing = [c for c in columns if c not in frame]
    if missing:
        raise PrismError(f"{path}: no column {missing[0]}; it was written for other features: regenerate it "
                         f"(python benchmarks/validation_suite.py writes doubt_rows.csv)", field=str(path))
    return Errors(frame.drop(columns=columns), frame[columns].to_numpy(float), {})


def machine_errors(directory=REPO_ROOT / "measurements") -> Errors | None:
    """Every run of this machine's validation suite kept in ``directory``
    (``*-doubt.csv``, :func:`write_errors`), each its own source; None where there is none."""
    files = sorted(Path(directory).glob("*-doubt.csv"))
    return joined(*map(read_errors, files)) if files else None


def joined(*parts: Errors) -> Errors:
    """Several :class:`Errors` as one."""
    import pandas as pd

    return Errors(pd.concat([p.table for p in parts], ignore_index=True), np.vstack([p.X for p in parts]),
                  {k: v for p in parts for k, v in p.skipped.items()})


def _covered(q: np.ndarray, y: np.ndarray, levels) -> dict[float, np.ndarray]:
    """Per nominal coverage, whether each row's central interval holds ``y``."""
    levels = list(levels)
    return {c: (q[:, levels.index(round(0.5 - c / 2, 2))] <= y) & (y <= q[:, levels.index(round(0.5 + c / 2, 2))])
            for c in COVERAGES}


def check(errors: Errors, model: DoubtModel | None = None) -> pd.DataFrame:
    """Leave-one-source-out scores, as a user meets them: each source's rows predicted by a
    model fitted without it and calibrated on the other sources' errors, each of those
    predicted by a model that saw neither it nor the source scored. One row per group
    (every run, every source weighing the same, a machine's suite runs as one
    (:func:`~predictor.latency.doubt.source_family`), every tier, every source): runs, median
    absolute error of the median, coverage of the 50/80/90% intervals and the median
    relative width of the 90% one, with the error model and, as ``band_*``, without it
    (the step-time variability's own quantiles)."""
    import pandas as pd

    model = model or DoubtModel()
    X, y, sources = errors.X, errors.y, errors.table.source.to_numpy()
    if len(np.unique(sources)) < 4:
        raise PrismError(f"sources: {len(np.unique(sources))}; the check leaves one source out and calibrates on "
                         f"the others, which needs at least 4", field="sources")
    levels = np.asarray(model.levels)
    q = left_out_quantiles(model, X, y, sources)
    with_model = _covered(q, y, levels)
    # without it: the step-time variability's own quantiles, what PRISM stated before the error model
    band = np.log(errors.table[[f"p{round(a * 100)}_s" for a in levels]].to_numpy()
                  / errors.table.predicted_s.to_numpy()[:, None])
    without = _covered(band, y, levels)
    width90 = np.exp(q[:, list(levels).index(0.95)]) - np.exp(q[:, list(levels).index(0.05)])
    width90_band = np.exp(band[:, list(levels).index(0.95)]) - np.exp(band[:, list(levels).index(0.05)])
    ape = np.abs(np.exp(y) - 1)  # of the prediction's median
    t = errors.table

    def scores(name: str, mask: np.ndarray) -> dict:
        return {"group": name, "runs": int(mask.sum()), "median_ape": float(np.median(ape[mask])),
                **{f"cover{round(c * 100)}": float(with_model[c][mask].mean()) for c in COVERAGES},
                "width90": float(np.median(width90[mask])),
                **{f"band_cover{round(c * 100)}": float(without[c][mask].mean()) for c in COVERAGES},
                "band_width90": float(np.median(width90_band[mask]))}

    per_source = [scores(f"source: {s}", (t.source == s).to_numpy()) for s in sorted(t.source.unique())]
    weight = source_weights(np.array(sorted(t.source.unique())))  # one entry per source: its share
    weight = weight / weight.sum()
    mean = {k: float(np.dot(weight, [r[k] for r in per_source])) for k in per_source[0] if k not in ("group", "runs")}
    out = [scores("all", np.ones(len(y), bool)), {"group": "sources, each weighing the same", "runs": len(y), **mean}]
    out += [scores(f"tier: {tier}", (t.tier == tier).to_numpy()) for tier in TIERS if (t.tier == tier).any()]
    return pd.DataFrame(out + per_source)


def fit(errors: Errors) -> DoubtModel:
    """The predictive-uncertainty model fitted on every predicted run."""
    return DoubtModel().fit(errors.X, errors.y, errors.table.source.to_numpy())


