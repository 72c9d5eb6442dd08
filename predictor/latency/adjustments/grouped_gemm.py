"""A grouped GEMM without a model of its own, priced by the GEMM model: one GEMM per local
expert, one after another.

Mechanism: Megatron-Core runs a grouped GEMM as one GEMM per local expert
(megatron/core/extensions/transformer_engine.py, ``TEGroupedLinear``: Transformer Engine's
multi-stream cuBLAS; the DeepSeek-V3 GB200 notes), so the trained GEMM model at one
expert's (m, n, k), times the experts (the call's ``batch``), prices it. Measured against
one grouped kernel and one dense GEMM of every expert's tokens on an H100:
``experiments/grouped_gemm/bench_grouped_gemm.py``, ``measurements/h100-grouped-gemm.csv``.
It replaces the roofline prior, so the call rests on a model.
"""
from __future__ import annotations

import numpy as np

from predictor.core.ops import Call
from predictor.latency.adjustments.base import Adjustment, Batch
from predictor.latency.evidence import Evidence, Source

#: Ops without a model of their own priced by another op's model: (that op, the shape
#: column counting its calls).
STAND_INS = {"grouped_gemm": ("gemm", "batch")}


class GroupedGemm(Adjustment):
    name = "grouped_gemm"
    mechanism = ("megatron/core/extensions/transformer_engine.py TEGroupedLinear; "
                 "measurements/h100-grouped-gemm.csv")

    def applies(self, batch: Batch, params) -> np.ndarray:
        models = batch.models
        if batch.op not in STAND_INS or models is None or not models.has(STAND_INS[batch.op][0], batch.pass_):
            return np.zeros(len(batch), bool)
        return batch.prior  # the op's own model, where it has one, goes first

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        stand_in, times = STAND_INS[batch.op]
        predicted = batch.models.models[(stand_in, batch.pass_)].predict(batch.rows(which), batch.models.hw)
        return predicted[:, batch.quantile_columns()] * batch.frame[times][which][:, None]

    def evidence(self, evidence: Evidence, batch: Batch) -> Evidence:
        return Evidence(Source.MODEL, f"{batch.models.where} ({STAND_INS[batch.op][0]})")

    def example_calls(self) -> tuple[str, list[Call]]:
        shape = {"m": 2048, "n": 1536, "k": 4096}
        return "h100-sxm", [Call.of("grouped_gemm", p, dict(shape, batch=8)) for p in ("fwd", "bwd")] + \
            [Call.of("gemm", "fwd", shape)]  # a GEMM's own model: left alone
