"""``prism validate``: predicted step-time distributions against measured ones, per layout.

For each layout of a measurement file (:mod:`predictor.data.measurements`) the composer
predicts the step-time distribution from the hardware's operator models, and the
measured steps (the slowest rank of each) are scored against it:

- ``median_ape``, ``p95_ape``: absolute % error of the predicted median and 95th
  percentile against the measured ones;
- ``ks``: the two-sample Kolmogorov–Smirnov distance between predicted draws and
  measured steps (0 = same distribution, 1 = disjoint);
- ``coverage_80``: the share of measured steps inside the predicted 10–90% interval
  (0.8 when calibrated);
- ``p95_p50_pred`` / ``p95_p50_meas``: the tail ratio each side sees.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp

from predictor.core.errors import PrismError
from predictor.core.specs import HardwareConfig
from predictor.data.measurements import measured_workloads
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet
from predictor.latency.lookup import QuantileCache


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
    ks: float
    coverage_80: float
    p95_p50_meas: float
    p95_p50_pred: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Validation:
    scores: list[LayoutScore]
    measured: dict  # layout_id -> measured step times (s)
    predicted: dict  # layout_id -> predicted draws (s)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([s.to_dict() for s in self.scores])

    def summary(self) -> dict:
        t = self.table()
        return {"layouts": len(t), "median_ape_median": float(t.median_ape.median()),
                "median_ape_worst": float(t.median_ape.max()), "ks_median": float(t.ks.median()),
                "coverage_80_median": float(t.coverage_80.median()), "p95_ape_median": float(t.p95_ape.median())}


def score(layout_id: str, predicted: np.ndarray, measured: np.ndarray) -> LayoutScore:
    """The scores of one layout: predicted draws against measured step times (seconds)."""
    t, d = np.asarray(measured, float), np.asarray(predicted, float)
    m50, m95 = np.quantile(t, [0.5, 0.95])
    p10, p50, p90, p95 = np.quantile(d, [0.1, 0.5, 0.9, 0.95])
    return LayoutScore(
        layout_id=layout_id, steps=len(t), measured_p50_s=float(m50), predicted_p50_s=float(p50),
        measured_p95_s=float(m95), predicted_p95_s=float(p95), median_ape=float(abs(p50 - m50) / m50),
        p95_ape=float(abs(p95 - m95) / m95), ks=float(ks_2samp(d, t).statistic),
        coverage_80=float(np.mean((t >= p10) & (t <= p90))), p95_p50_meas=float(m95 / m50),
        p95_p50_pred=float(p95 / p50))


def validate(measured: pd.DataFrame, hardware: HardwareConfig, models: ModelSet | None, *, draws: int = 4000,
             seed: int = 0, calibrations: dict | None = None) -> Validation:
    """Score every layout of ``measured`` (rows of a measurement file,
    :func:`predictor.data.measurements.read_measurements`) predicted on ``hardware`` with
    ``models`` (None: the priors alone).

    ``calibrations`` maps a layout to the calibration to predict it with (e.g. one fitted
    without that layout, :func:`predictor.analyses.calibrate.cross_validate`); by default every
    layout uses the calibration stored with ``models``, if any.
    """
    other = sorted(set(measured.hardware) - {hardware.name})
    if other:
        raise PrismError(f"hardware={hardware.name}: the file was measured on {', '.join(other)}; "
                         f"validate with hardware={other[0]}", field='hardware')
    scores, meas, pred = [], {}, {}
    cache = QuantileCache(models, hardware)
    for layout_id, work, t in measured_workloads(measured, hardware):
        d = compose(work, models, draws=draws, seed=seed, cache=cache,
                    calibration=(calibrations or {}).get(layout_id)).draws
        scores.append(score(layout_id, d, t))
        meas[layout_id], pred[layout_id] = t, d
    return Validation(scores, meas, pred)
