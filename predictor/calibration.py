"""In-situ calibration: what isolated operator samples miss inside a real training step.

An operator timed alone runs with warm caches and no framework around it; inside a
training step the same kernel shares caches with its neighbours, and autograd, the
parallel wrappers (DDP hooks, DTensor dispatch, pipeline stages) and the ops outside
the vocabulary (views, copies, concatenations) add time around every call. Three
numbers per hardware absorb this, fitted to measured reference steps
(:mod:`predictor.measurements`):

``compute_scale``    multiplies every compute op's latency (in-step efficiency),
``op_overhead_us``   is added to every compute op instance (framework time per call:
                     autograd, views and copies outside the vocabulary),
``tp_overhead_us``   is added to every compute op instance of a tensor-parallel job on
                     top (DTensor's sharding propagation and redistribution per call).

Collectives are left as sampled: they were timed end to end between processes already.

They are fitted by least squares on ``log(predicted median / measured median)`` over
the measured layouts and stored in the hardware's model manifest (``calibration``), so
every prediction on that hardware uses them. :func:`cross_validate` scores the idea
honestly: each layout is predicted with factors fitted on the other layouts only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from predictor.config import HardwareConfig
from predictor.decompose import Workload
from predictor.errors import PrismError
from predictor.measurements import measured_workloads


@dataclass(frozen=True)
class Calibration:
    compute_scale: float = 1.0
    op_overhead_us: float = 0.0
    tp_overhead_us: float = 0.0
    layouts: int = 0  # how many measured layouts it was fitted on
    rms_log_error: float = 0.0  # of the fit on those layouts
    source: str = "measured steps"  # or "trace": op_overhead_us read from profiled steps

    def to_dict(self) -> dict:
        return asdict(self)

    def apply(self, q_us: np.ndarray, collective: bool, tp: int) -> np.ndarray:
        """Quantiles (us) of op instances as they run inside a training step of tp degree ``tp``."""
        if collective:
            return q_us
        return q_us * self.compute_scale + self.op_overhead_us + (self.tp_overhead_us if tp > 1 else 0.0)


def _fit(works: list[Workload], medians: np.ndarray, models, draws: int) -> Calibration:
    from predictor.compose import QuantileCache, compose  # compose reads calibrations: import here

    # the operator quantiles do not depend on the calibration: look them up once for the fit
    cache = QuantileCache(models, works[0].hardware)

    def residuals(theta):
        cal = Calibration(*(float(v) for v in np.exp(theta)))
        pred = [np.median(compose(w, models, draws=draws, seed=0, cache=cache, calibration=cal).draws)
                for w in works]
        return np.log(np.asarray(pred) / medians)

    # log-parameters keep every factor positive; bounds keep a poor fit physical
    fit = least_squares(residuals, x0=np.log([1.0, 5.0, 5.0]), diff_step=1e-3,
                        bounds=(np.log([0.25, 0.01, 0.01]), np.log([4.0, 1e4, 1e4])))
    return Calibration(*(float(v) for v in np.exp(fit.x)), layouts=len(works),
                       rms_log_error=float(np.sqrt(np.mean(fit.fun ** 2))))


def _workloads(measured: pd.DataFrame, hw: HardwareConfig) -> tuple[list[str], list[Workload], np.ndarray]:
    layouts = measured_workloads(measured, hw)
    return ([lid for lid, _, _ in layouts], [w for _, w, _ in layouts],
            np.array([np.median(t) for _, _, t in layouts]))


def fit_calibration(measured: pd.DataFrame, hw: HardwareConfig, models, draws: int = 100) -> Calibration:
    """Fit the three numbers to every layout of ``measured`` (at least 3 layouts)."""
    _, works, medians = _workloads(measured, hw)
    if len(works) < 3:
        raise PrismError(f"measured: {len(works)} layout(s); calibration fits 3 numbers and needs at least 3 "
                         f"measured layouts (prism measure ... out=FILE, several times)")
    return _fit(works, medians, models, draws)


def cross_validate(measured: pd.DataFrame, hw: HardwareConfig, models, draws: int = 100) -> dict:
    """Leave-one-layout-out: layout_id -> the calibration fitted without it."""
    ids, works, medians = _workloads(measured, hw)
    if len(works) < 4:
        raise PrismError(f"measured: {len(works)} layout(s); leave-one-out calibration needs at least 4")
    keep = np.ones(len(works), bool)
    out = {}
    for i, layout_id in enumerate(ids):
        keep[:] = True
        keep[i] = False
        out[layout_id] = _fit([w for w, k in zip(works, keep) if k], medians[keep], models, draws)
    return out
