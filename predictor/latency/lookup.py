"""Latency quantiles of a workload's operator calls, and the evidence each rests on.

DESIGN.md, "Composer" step 2, and README "Evidence tiers". A compute op takes its
quantiles from the hardware's trained model (:class:`predictor.latency.artifacts.ModelSet`)
where one exists, else from the roofline prior: the floor of
:mod:`predictor.latency.features` over :data:`ROOFLINE_EFFICIENCY`. A collective takes
the trained model only where the models were measured on this profile's network (and,
for models of intra-node microbenchmarks, only inside one node), else the network prior:
the floor over :data:`NCCL_EFFICIENCY`. A host op (:data:`~predictor.core.ops.HOST_OPS`)
takes the model of the host's own samples, else the host prior: the profile's cited
``host`` costs (:func:`~predictor.latency.features.host_floor_us`). Priors are lognormal
bands of :data:`PRIOR_SIGMA` around that centre.

Each call's :class:`Evidence` says which of these it rests on as a field, so that
the composer can treat a prior's error as systematic (one draw shared by every call on
a prior) without reading the display text. :func:`in_step` turns isolated-operator
quantiles into quantiles inside a training step (:mod:`predictor.latency.calibration`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from predictor.core.normal import ndtri
from predictor.core.ops import OPS, Call
from predictor.core.precision import call_dtype
from predictor.core.specs import HardwareConfig
from predictor.latency.artifacts import ModelSet
from predictor.latency.attention_backends import cudnn_over_flash, models_flash
from predictor.latency.calibration import Calibration
from predictor.latency.co_run import slowdown
from predictor.latency.features import floor_us
from predictor.latency.regressor import DEFAULT_QUANTILES

#: Ops without a model of their own priced by another op's model: (that op, the shape
#: column counting its calls). Megatron-Core runs a grouped GEMM as one GEMM per local
#: expert (TEGroupedLinear: multi-stream cuBLAS; the DeepSeek-V3 GB200 notes), so the
#: trained GEMM model at one expert's (m, n, k), times the experts, prices it.
STAND_INS = {"grouped_gemm": ("gemm", "batch")}


class Source(Enum):
    """Where a call's latency quantiles come from."""

    MODEL = "model"  # a trained quantile model of samples or microbenchmarks
    NETWORK_PRIOR = "network prior"  # a collective without a model of this network
    ROOFLINE_PRIOR = "roofline prior"  # a compute op without a model
    HOST_PRIOR = "host prior"  # a host op without samples of this host: the profile's cited host costs


#: Share of link bandwidth NCCL reaches on large messages (nccl-tests bus bandwidth on
#: DGX A100: ~230 of 300 GB/s NVLink, ~23 of 25 GB/s per HDR NIC): a prior, not a fit.
NCCL_EFFICIENCY = 0.8
#: Efficiency of compute ops without a model, relative to the roofline floor.
ROOFLINE_EFFICIENCY = 0.5
#: Relative spread (lognormal sigma) of the priors: no samples, so a wide band.
PRIOR_SIGMA = {Source.NETWORK_PRIOR: 0.15, Source.ROOFLINE_PRIOR: 0.3, Source.HOST_PRIOR: 0.3}
_PRIOR_EFFICIENCY = {Source.NETWORK_PRIOR: NCCL_EFFICIENCY, Source.ROOFLINE_PRIOR: ROOFLINE_EFFICIENCY,
                     Source.HOST_PRIOR: 1.0}  # the host prior's floor is the cited cost itself


@dataclass(frozen=True)
class Evidence:
    """What one call's quantiles rest on: ``source``, and ``text`` as reports show it
    (``models/<hardware>``, ``network prior (<network>)``, ``roofline prior``)."""

    source: Source
    text: str

    @property
    def prior(self) -> bool:
        """A prior's error is systematic: wrong alike for every call that rests on it."""
        return self.source is not Source.MODEL


def _prior_quantiles(center_us: np.ndarray, sigma: float, levels: np.ndarray) -> np.ndarray:
    return center_us[:, None] * np.exp(sigma * ndtri(levels))[None, :]


def call_quantiles(calls: list[Call], models: ModelSet | None, hw: HardwareConfig, dtype: str,
                   levels=DEFAULT_QUANTILES) -> tuple[np.ndarray, list[Evidence]]:
    """Latency quantiles (us) of each call at ``levels``, shape (len(calls), k), and the
    evidence of each."""
    levels = np.asarray(levels)
    out = np.zeros((len(calls), len(levels)))
    evidence: list[Evidence | None] = [None] * len(calls)
    own_network = models is not None and models.manifest.get("collective_network") == hw.network.name
    intra_only = models is not None and models.manifest.get("collective_scope") == "intra-node"
    model = Evidence(Source.MODEL, models.where) if models is not None else None
    by_op: dict[tuple, list[int]] = {}
    for i, c in enumerate(calls):
        by_op.setdefault((c.op, c.pass_), []).append(i)
    for (op, pass_), idx in by_op.items():
        idx = np.asarray(idx)
        # each call's precision: the linears' and experts' GEMMs in gemm_dtype, the rest (the
        # output layer included) in train_dtype (predictor.core.precision)
        rows = [dict(calls[i].shape_dict, dtype=call_dtype(op, calls[i].role, dtype, hw.gemm_dtype, hw.gemm_ops),
                     nodes=calls[i].nodes, ranks_per_node=calls[i].ranks_per_node) for i in idx]
        cudnn = np.array([row.pop("backend", "") == "cudnn" for row in rows])  # attention's kernel, not a feature
        margin = np.array([row.pop("sm_margin", 0) for row in rows])  # SMs a collective holds beside it, neither
        beside = np.array([row.pop("co_runners", 0) for row in rows]) > 0  # ranks computing beside it, nor this
        frame = {column: np.array([row[column] for row in rows]) for column in rows[0]}  # no pandas: start-up
        collective = OPS[op].collective
        modelled = np.full(len(idx), models is not None and models.has(op, pass_) and (not collective or own_network))
        if collective and intra_only:
            modelled &= frame["nodes"] <= 1
        if modelled.any():
            q = models.models[(op, pass_)].predict(_rows(frame, modelled), models.hw)
            out[idx[modelled]] = q[:, [models.quantiles.index(a) for a in levels]]
            converted = modelled & cudnn if models_flash(models, pass_) else np.zeros(len(idx), bool)
            if converted.any():  # FlashAttention-2's data, cuDNN's kernel (attention_backends)
                out[idx[converted]] *= cudnn_over_flash(pass_, frame["seq_kv"][converted])[:, None]
                for i in idx[converted]:
                    evidence[i] = Evidence(Source.MODEL, f"{models.where} (FlashAttention-2 x cuDNN/FA2 on H100)")
        if op in STAND_INS and models is not None and models.has(STAND_INS[op][0], pass_) and (~modelled).any():
            stand_in, times = STAND_INS[op]  # e.g. a grouped GEMM: its experts' GEMMs, one after another
            keep = ~modelled
            q = models.models[(stand_in, pass_)].predict(_rows(frame, keep), models.hw)
            out[idx[keep]] = q[:, [models.quantiles.index(a) for a in levels]] * frame[times][keep][:, None]
            for i in idx[keep]:
                evidence[i] = Evidence(Source.MODEL, f"{models.where} ({stand_in})")
            modelled = np.ones(len(idx), bool)
        source = (Source.HOST_PRIOR if OPS[op].host else Source.NETWORK_PRIOR if collective
                  else Source.ROOFLINE_PRIOR)
        rest = ~modelled
        if rest.any():
            center = floor_us(op, pass_, _rows(frame, rest), hw) / _PRIOR_EFFICIENCY[source]
            out[idx[rest]] = _prior_quantiles(center, PRIOR_SIGMA[source], levels)
        if collective and intra_only and own_network and models.has(op, pass_):
            _floor_by_one_node(out, idx, rest, frame, models.models[(op, pass_)], models, levels)
        if margin.any():  # the kernel runs on the SMs the collective leaves (decompose.userbuffer_sms)
            out[idx] *= (hw.device.sms / (hw.device.sms - margin))[:, None]
        if beside.any() and models is not None:  # the host's caches and memory shared (latency.co_run)
            out[idx[beside]] *= slowdown(models.manifest, op, pass_)
        prior = Evidence(source, f"network prior ({hw.network.name})" if collective else source.value)
        for i, m in zip(idx, modelled):
            evidence[i] = evidence[i] or (model if m else prior)
    return out, evidence


def _floor_by_one_node(out: np.ndarray, idx: np.ndarray, prior: np.ndarray, frame: dict, model, models,
                       levels: np.ndarray) -> None:
    """Floor the network prior of the collectives (``prior``) that span nodes by what the
    models measured of the same message among one node's ranks: across nodes the collective
    runs that part too (or moves its bytes over slower links), so it takes no less. Without
    it a CPU job of two hosts priced its all-reduce by the rough prior, under the measured
    one-host time, and came out faster than the one-host job."""
    spans = prior & (frame["nodes"] > 1) & (frame["ranks_per_node"] > 1)
    if not spans.any():
        return
    one_node = _rows(frame, spans)
    one_node.update(group_size=one_node["ranks_per_node"], nodes=np.ones(int(spans.sum()), int))
    q = model.predict(one_node, models.hw)[:, [models.quantiles.index(a) for a in levels]]
    out[idx[spans]] = np.maximum(out[idx[spans]], q)


def _rows(frame: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {column: values[keep] for column, values in frame.items()}


class QuantileCache:
    """Latency quantiles of calls, looked up once per distinct call across many workloads
    (one model query per op for a whole batch of layouts)."""

    def __init__(self, models: ModelSet | None, hw: HardwareConfig, dtype: str | None = None):
        self.models, self.hw, self.dtype = models, hw, dtype or hw.train_dtype
        self._q: dict[Call, np.ndarray] = {}
        self._evidence: dict[Call, Evidence] = {}

    def fill(self, calls: list[Call]) -> None:
        missing = [c for c in dict.fromkeys(calls) if c not in self._q]
        if missing:
            q, evidence = call_quantiles(missing, self.models, self.hw, self.dtype)
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
