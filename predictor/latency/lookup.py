"""Latency quantiles of a workload's operator calls, and the evidence each rests on: the
:class:`~predictor.latency.pricer.Pricer` (a base source, then named adjustments) behind a
cache of distinct calls; :func:`in_step` turns isolated-operator quantiles into quantiles
inside a training step (:mod:`predictor.latency.calibration`).

docs/method.md, Composer step 2 and "Evidence tiers".
The names below are kept here for the modules that read them from this one.
"""
from __future__ import annotations

import numpy as np

from predictor.core.ops import OPS, Call
from predictor.core.specs import HardwareConfig
from predictor.latency.adjustments.grouped_gemm import STAND_INS
from predictor.latency.artifacts import ModelSet
from predictor.latency.calibration import Calibration
from predictor.latency.evidence import Evidence, Source
from predictor.latency.pricer import NCCL_EFFICIENCY, PRIOR_SIGMA, ROOFLINE_EFFICIENCY, Pricer
from predictor.latency.regressor import DEFAULT_QUANTILES

__all__ = ["NCCL_EFFICIENCY", "PRIOR_SIGMA", "ROOFLINE_EFFICIENCY", "STAND_INS", "Evidence", "QuantileCache", "Source",
           "call_quantiles", "in_step"]


def call_quantiles(calls: list[Call], models: ModelSet | None, hw: HardwareConfig, dtype: str,
                   levels=DEFAULT_QUANTILES) -> tuple[np.ndarray, list[Evidence]]:
    """Latency quantiles (us) of each call at ``levels``, shape (len(calls), k), and the
    evidence of each (:meth:`Pricer.price`)."""
    return Pricer(models, hw, dtype).price(calls, levels)


class QuantileCache:
    """Latency quantiles of calls, looked up once per distinct call across many workloads
    (one model query per op for a whole batch of layouts)."""

    def __init__(self, models: ModelSet | None, hw: HardwareConfig, dtype: str | None = None):
        self.models, self.hw, self.dtype = models, hw, dtype or hw.train_dtype
        self.pricer = Pricer(models, hw, self.dtype)
        self._q: dict[Call, np.ndarray] = {}
        self._evidence: dict[Call, Evidence] = {}

    def fill(self, calls: list[Call]) -> None:
        missing = [c for c in dict.fromkeys(calls) if c not in self._q]
        if missing:
            q, evidence = self.pricer.price(missing)
            self._q.update(zip(missing, q))
            self._evidence.update(zip(missing, evidence))

    def lookup(self, calls: list[Call]) -> tuple[np.ndarray, list[Evidence]]:
        """Quantiles (len(calls), k) at :data:`~predictor.latency.regressor.DEFAULT_QUANTILES`
        and the evidence of each call."""
        self.fill(calls)
        return np.stack([self._q[c] for c in calls]), [self._evidence[c] for c in calls]


def in_step(q_us: np.ndarray, calls: list[Call], tp, calibration: Calibration | None) -> np.ndarray:
    """Quantiles ``q_us`` (len(calls), k) of isolated calls as they run inside a training
    step of tensor-parallel degree ``tp`` (one int, or one per call):
    :meth:`Calibration.apply` per call. No calibration: unchanged."""
    if calibration is None:
        return q_us
    degrees = np.broadcast_to(np.asarray(tp, int), (len(calls),)).tolist()
    keys = [(OPS[c.op].collective, d) for c, d in zip(calls, degrees)]
    out = np.empty_like(q_us)
    for collective, degree in set(keys):
        rows = [i for i, k in enumerate(keys) if k == (collective, degree)]
        out[rows] = calibration.apply(q_us[rows], collective, degree)
    return out
