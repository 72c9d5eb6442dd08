"""Blackwell Ultra's doubled special-function-unit rate, on the softmax of fused attention.

Mechanism: a FlashAttention-style kernel computes, per attention score, the two tensor-core
products QK^T and PV (2 x 2·d FLOPs forward at head dim d; the backward recomputes P and runs
five products, 10·d: :func:`predictor.core.ops.flops`) and one exponential, the softmax's
``exp2`` on the special function units (SASS ``MUFU.EX2``; the backward's recomputed
P = exp2(S - LSE) is one more). On Blackwell (B200, GB200) an SM does 8,192 dense BF16
tensor-core FLOPs per clock (the datasheet's 2.25 PFLOP/s over 148 SMs at ~1.86 GHz) and 16
exponentials per clock, unchanged from Hopper (Zadouri et al., "FlashAttention-4: Algorithm
and Kernel Pipelining Co-Design for Asymmetric Hardware Scaling", arXiv 2603.05451, the
B200 "feeds and speeds": the forward is bound by the exponential unit; Together AI's blog
together.ai/blog/flashattention-4). At d = 128 in BF16 a score costs 512/8,192 = 1/16 clock
of tensor core and 1/16 clock of SFU forward, 1,280/8,192 = 0.156 and 0.0625 backward: the
exponential is half of the forward's time and 29% of the backward's. Blackwell Ultra
(B300, GB300) doubles MUFU.EX2 throughput (NVIDIA technical blogs "Inside NVIDIA Blackwell
Ultra: The Chip Powering the AI Factory Era", 2025, "2x attention-layer acceleration", and
"Making Softmax More Efficient with NVIDIA Blackwell Ultra": on GB200 "matrix engines are
forced to idle while waiting for the SFU datapaths", the BMM1 -> softmax -> BMM2 dependency).

The profile states its rate (``device.exp2_per_clk_per_sm``: 16 on b200/gb200-nvl72, 32 on
b300/gb300-nvl72). A call whose base is a Blackwell model (one trained on a profile stating
a lower rate) or, on a Blackwell-family profile (compute capability 10.x), the roofline
prior (which stands for Blackwell's kernel at :data:`BLACKWELL_EXP2_PER_CLK_PER_SM`) is
priced at ``(1 - s) + s · base_rate / own_rate``, ``s`` the exponential's share of the
per-score time, the tensor-core and SFU parts taken in series (the dependency the blog
draws). In series is the upper bound of the gain: a kernel that hid the exponential under
the products entirely would gain nothing, and FlashAttention-4 reads the B200 backward as
bound by shared-memory traffic, which Blackwell Ultra does not change. Nothing is fitted.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import Call
from predictor.latency.adjustments.base import Adjustment, Batch
from predictor.latency.evidence import Evidence

#: Dense BF16 tensor-core FLOPs per clock per SM on Blackwell (B200: 2.25 PFLOP/s datasheet over
#: 148 SMs at ~1.86 GHz; FlashAttention-4, arXiv 2603.05451, B200 feeds and speeds).
BLACKWELL_BF16_FLOPS_PER_CLK_PER_SM = 8192.0
#: MUFU.EX2 results per clock per SM on Blackwell (FlashAttention-4; CUDA C++ Programming Guide,
#: arithmetic instruction throughput): the rate a Blackwell prior stands for.
BLACKWELL_EXP2_PER_CLK_PER_SM = 16.0
#: Tensor-core FLOPs per attention score per head-dim unit (predictor.core.ops.flops): QK^T and PV
#: forward; the backward's recomputed QK^T, dP, dV, dQ, dK.
FLOPS_PER_SCORE_PER_DIM = {"fwd": 4.0, "bwd": 10.0}
#: Exponentials per score: the softmax forward, the recomputed P backward.
EXP_PER_SCORE = 1.0


@cache
def _profile_rate(name: str) -> float:
    from predictor.core.profiles import load_hardware
    try:
        return float(load_hardware(name).device.exp2_per_clk_per_sm)
    except PrismError:  # a profile built in code: no stated rate
        return 0.0


def exp_share(pass_: str, head_dim, mma_over_bf16, exp_rate: float) -> np.ndarray:
    """The exponential's share of a score's time, tensor-core and SFU parts in series, at the
    Blackwell tensor-core rate times ``mma_over_bf16`` (the call's precision's peak over BF16's)
    and ``exp_rate`` exponentials per clock per SM."""
    mma = FLOPS_PER_SCORE_PER_DIM[pass_] * np.asarray(head_dim, float) / (
        BLACKWELL_BF16_FLOPS_PER_CLK_PER_SM * np.asarray(mma_over_bf16, float))
    exp = EXP_PER_SCORE / exp_rate
    return exp / (mma + exp)


def base_rate(batch: Batch) -> np.ndarray:
    """The exponential rate each call's base stands for (0: none stated, left alone)."""
    prior = BLACKWELL_EXP2_PER_CLK_PER_SM if 10.0 <= batch.hw.device.compute_capability < 11.0 else 0.0
    model = 0.0
    if batch.models is not None:
        model = _profile_rate(str(batch.models.manifest.get("hardware", batch.models.hw.name)))
    return np.where(batch.prior, prior, model)


class AttentionSfu(Adjustment):
    name = "attention_sfu"
    mechanism = ("NVIDIA technical blogs 'Inside NVIDIA Blackwell Ultra' and 'Making Softmax More Efficient with "
                 "NVIDIA Blackwell Ultra' (MUFU.EX2 throughput doubled); FlashAttention-4 arXiv 2603.05451 (B200 "
                 "attention forward bound by the exponential unit, 16 per clock per SM); profile "
                 "device.exp2_per_clk_per_sm")

    def applies(self, batch: Batch, params) -> np.ndarray:
        own = batch.hw.device.exp2_per_clk_per_sm
        if batch.op != "attention" or batch.pass_ not in FLOPS_PER_SCORE_PER_DIM or not own:
            return np.zeros(len(batch), bool)
        rate = base_rate(batch)
        return (rate > 0) & (rate < own)

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        rate = base_rate(batch)[which]
        bf16 = batch.hw.peak("bfloat16")
        dtypes = batch.frame["dtype"][which] if "dtype" in batch.frame else np.full(len(rate), "bfloat16")
        over = np.array([batch.hw.peak(str(d)) / bf16 for d in dtypes], float)
        share = exp_share(batch.pass_, batch.frame["head_dim"][which], over, rate)
        factor = (1.0 - share) + share * rate / batch.hw.device.exp2_per_clk_per_sm
        return q * factor[:, None]

    def evidence(self, evidence: Evidence, batch: Batch) -> Evidence:
        return Evidence(evidence.source, f"{evidence.text} x Blackwell Ultra SFU (MUFU.EX2 "
                                         f"{batch.hw.device.exp2_per_clk_per_sm:g}/clk/SM)")

    def example_calls(self) -> tuple[str, list[Call]]:
        shape = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 4096, "seq_kv": 4096, "head_dim": 128, "causal": 1}
        attention = [Call.of("attention", p, shape) for p in ("fwd", "bwd")]
        return "gb300-nvl72", attention + [Call.of("gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192})]
