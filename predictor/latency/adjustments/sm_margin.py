"""A GEMM that runs beside a userbuffer collective runs on the SMs the collective leaves.

Mechanism: Transformer Engine's userbuffer overlap (Megatron ``--tp-comm-overlap``) gives
its communication kernels ``num_sm`` SMs (``initialize_ub``, ``set_sm_margin``:
transformer_engine/pytorch/module/base.py), and the GEMM launched beside them is told to
leave those SMs free, so it runs on ``sms - margin`` of them. The decomposition marks the
calls (``sm_margin``: :func:`predictor.workload.decompose.userbuffer_sms`), and the
quantiles scale by ``sms / (sms - margin)``. Measured on an H100:
``experiments/sm_margin/bench_sm_margin.py``, ``measurements/h100-sm-margin.csv``.
"""
from __future__ import annotations

import numpy as np

from predictor.core.ops import Call
from predictor.latency.adjustments.base import Adjustment, Batch


class SmMargin(Adjustment):
    name = "sm_margin"
    mechanism = ("transformer_engine/pytorch/module/base.py initialize_ub (num_sm, set_sm_margin); "
                 "measurements/h100-sm-margin.csv")
    marks = {"sm_margin": 0}

    def applies(self, batch: Batch, params) -> np.ndarray:
        return batch.marks["sm_margin"] > 0

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        margin = batch.marks["sm_margin"][which]
        return q * (batch.hw.device.sms / (batch.hw.device.sms - margin))[:, None]

    def example_calls(self) -> tuple[str, list[Call]]:
        return "h100-sxm", [Call.of("gemm", p, dict({"m": 8192, "n": 8192, "k": 8192}, **mark)) for p in ("fwd", "bwd")
                            for mark in ({}, {"sm_margin": 16})]
