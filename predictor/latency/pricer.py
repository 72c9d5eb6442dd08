"""Latency quantiles of operator calls, and the evidence each rests on: a base source, then
named adjustments in order (README "Evidence tiers").

The base source. A compute op takes its quantiles from the hardware's trained model
(:class:`predictor.latency.artifacts.ModelSet`) where one exists, else from the roofline
prior: the floor of :mod:`predictor.latency.features` over :data:`ROOFLINE_EFFICIENCY`. A
collective takes the trained model only where the models were measured on this profile's
network (and, for models of intra-node microbenchmarks, only inside one node), else the
network prior: the floor over :data:`NCCL_EFFICIENCY`. A host op
(:data:`~predictor.core.ops.HOST_OPS`) takes the model of the host's own samples, else the
host prior: the profile's cited ``host`` costs (:func:`~predictor.latency.features.host_floor_us`).
Priors are lognormal bands of :data:`PRIOR_SIGMA` around that centre.

Then each adjustment of :data:`~predictor.latency.adjustments.ADJUSTMENTS`, in its order,
changes the quantiles (and may change the evidence) of the calls it applies to, with the
parameters ``prism train`` fitted for it (:attr:`ModelSet.adjustments`). Each call's
:class:`~predictor.latency.evidence.Evidence` says what it rests on.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from predictor.core.normal import ndtri
from predictor.core.ops import OPS, Call
from predictor.core.precision import call_dtype
from predictor.core.specs import HardwareConfig
from predictor.latency.adjustments import ADJUSTMENTS, Adjustment, Batch
from predictor.latency.artifacts import ModelSet
from predictor.latency.evidence import Evidence, Source
from predictor.latency.features import floor_us
from predictor.latency.regressor import DEFAULT_QUANTILES

#: Share of link bandwidth NCCL reaches on large messages (nccl-tests bus bandwidth on
#: DGX A100: ~230 of 300 GB/s NVLink, ~23 of 25 GB/s per HDR NIC): a prior, not a fit.
NCCL_EFFICIENCY = 0.8
#: Efficiency of compute ops without a model, relative to the roofline floor.
ROOFLINE_EFFICIENCY = 0.5
#: Relative spread (lognormal sigma) of the priors: no samples, so a wide band.
PRIOR_SIGMA = {Source.NETWORK_PRIOR: 0.15, Source.ROOFLINE_PRIOR: 0.3, Source.HOST_PRIOR: 0.3}
PRIOR_EFFICIENCY = {Source.NETWORK_PRIOR: NCCL_EFFICIENCY, Source.ROOFLINE_PRIOR: ROOFLINE_EFFICIENCY,
                    Source.HOST_PRIOR: 1.0}  # the host prior's floor is the cited cost itself


def prior_quantiles(center_us: np.ndarray, sigma: float, levels: np.ndarray) -> np.ndarray:
    return center_us[:, None] * np.exp(sigma * ndtri(levels))[None, :]


class Pricer:
    """Prices calls on one hardware: ``models`` (None: priors alone) as the base source,
    then ``adjustments`` in order, each with its parameters from ``models``' manifest."""

    def __init__(self, models: ModelSet | None, hw: HardwareConfig, dtype: str | None = None,
                 adjustments: Sequence[Adjustment] = ADJUSTMENTS):
        self.models, self.hw, self.dtype = models, hw, dtype or hw.train_dtype
        self.adjustments = tuple(adjustments)
        self.params = models.adjustments if models is not None else {}
        self.marks = {m: d for a in self.adjustments for m, d in a.marks.items()}  # MARKS, for the registry

    def price(self, calls: list[Call], levels=DEFAULT_QUANTILES) -> tuple[np.ndarray, list[Evidence]]:
        """Latency quantiles (us) of each call at ``levels``, shape (len(calls), k), and the
        evidence of each."""
        levels = np.asarray(levels)
        out = np.zeros((len(calls), len(levels)))
        evidence: list[Evidence | None] = [None] * len(calls)
        by_op: dict[tuple, list[int]] = {}
        for i, c in enumerate(calls):
            by_op.setdefault((c.op, c.pass_), []).append(i)
        for (op, pass_), idx in by_op.items():
            batch = self._base(op, pass_, [calls[i] for i in idx], levels)
            q = batch.quantiles
            for adjustment in self.adjustments:
                params = self.params.get(adjustment.name)
                which = adjustment.applies(batch, params)
                if which.any():
                    q[which] = adjustment.apply(batch, q[which], params, which)
                    for i in np.flatnonzero(which):
                        batch.evidence[i] = adjustment.evidence(batch.evidence[i], batch)
            out[idx] = q
            for i, e in zip(idx, batch.evidence):
                evidence[i] = e
        return out, evidence

    def _base(self, op: str, pass_: str, calls: list[Call], levels: np.ndarray) -> Batch:
        """The batch of one (op, pass)'s calls, priced by the base source (module doc)."""
        models, hw = self.models, self.hw
        # each call's precision: the linears' and experts' GEMMs in gemm_dtype, the rest (the
        # output layer included) in train_dtype (predictor.core.precision)
        rows = [dict(c.shape_dict, dtype=call_dtype(op, c.role, self.dtype, hw.gemm_dtype, hw.gemm_ops),
                     nodes=c.nodes, ranks_per_node=c.ranks_per_node) for c in calls]
        marks = {m: np.array([row.pop(m, default) for row in rows]) for m, default in self.marks.items()}
        frame = {column: np.array([row[column] for row in rows]) for column in rows[0]}  # no pandas: start-up
        collective = OPS[op].collective
        own_network = models is not None and models.manifest.get("collective_network") == hw.network.name
        modelled = np.full(len(calls), models is not None and models.has(op, pass_) and (not collective or own_network))
        if collective and models is not None and models.manifest.get("collective_scope") == "intra-node":
            modelled &= frame["nodes"] <= 1
        q = np.zeros((len(calls), len(levels)))
        if modelled.any():
            predicted = models.models[(op, pass_)].predict({k: v[modelled] for k, v in frame.items()}, models.hw)
            q[modelled] = predicted[:, [models.quantiles.index(a) for a in levels]]
        source = (Source.HOST_PRIOR if OPS[op].host else Source.NETWORK_PRIOR if collective
                  else Source.ROOFLINE_PRIOR)
        rest = ~modelled
        if rest.any():
            center = floor_us(op, pass_, {k: v[rest] for k, v in frame.items()}, hw) / PRIOR_EFFICIENCY[source]
            q[rest] = prior_quantiles(center, PRIOR_SIGMA[source], levels)
        model = Evidence(Source.MODEL, models.where) if models is not None else None
        prior = Evidence(source, f"network prior ({hw.network.name})" if collective else source.value)
        return Batch(op, pass_, calls, frame, marks, [model if m else prior for m in modelled], models, hw, levels, q)
