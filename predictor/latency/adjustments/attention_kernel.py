"""Which fused-attention kernel a call runs, and what that does to a model of another one.

Mechanism: ``parallel.attention`` names the kernel: ``flash`` (FlashAttention-2, or SDPA's
flash backend), ``cudnn`` (cuDNN's fused attention) or ``unfused``. Transformer Engine, and
so Megatron-Core, runs cuDNN's kernel wherever the device has compute capability 9.0 or
more: its backend selection disables FlashAttention "to give FusedAttention preference on
Hopper+ for performance reasons" (transformer_engine/pytorch/attention/dot_product_attention/
utils.py, ``get_attention_backend``).

PRISM's Hopper attention models are FlashAttention-2's published microbenchmarks. A
``cudnn`` call (mark ``backend``) on such a model is priced at its FlashAttention-2
quantiles times :data:`CUDNN_OVER_FLASH`, the two kernels' measured time ratio on one H100
SXM (``experiments/attention_backends/bench_attention_backends.py``, ``measurements/h100-attention-backends.csv``:
causal, head dim 128, bf16, torch 2.11's SDPA backends). The ratio is applied only to a
model of FlashAttention data; a roofline prior is the same for either kernel.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from predictor.core.ops import Call
from predictor.latency.adjustments.base import Adjustment, Batch
from predictor.latency.evidence import Evidence, Source

if TYPE_CHECKING:
    from predictor.latency.artifacts import ModelSet

#: cuDNN's time over FlashAttention-2's per sequence length: (forward, backward), measured
#: on an H100 SXM (measurements/h100-attention-backends.csv; test_attention_backends checks
#: this table against that file).
CUDNN_OVER_FLASH = {1024: (0.557, 0.654), 2048: (0.528, 0.610), 4096: (0.491, 0.681), 8192: (0.522, 0.664),
                    16384: (0.605, 0.561), 32768: (0.581, 0.605), 65536: (0.579, 0.584), 131072: (0.579, 0.605)}
#: Words in a model's origins that mark FlashAttention microbenchmarks.
FLASH_ORIGINS = ("flashattention", "flash_atten")


def cudnn_over_flash(pass_: str, seq_kv) -> np.ndarray:
    """The time ratio at each ``seq_kv``: interpolated in log2(sequence) between the measured
    lengths, the nearest one's outside them."""
    seqs = np.log2(list(CUDNN_OVER_FLASH))
    ratios = [r[0 if pass_ == "fwd" else 1] for r in CUDNN_OVER_FLASH.values()]
    return np.interp(np.log2(np.asarray(seq_kv, float)), seqs, ratios)


def models_flash(models: ModelSet | None, pass_: str) -> bool:
    """Whether ``models``' attention model of ``pass_`` rests on FlashAttention microbenchmarks."""
    if models is None or not models.has("attention", pass_):
        return False
    origins = models.models[("attention", pass_)].info.get("origins", [])
    return any(word in str(o).lower() for o in origins for word in FLASH_ORIGINS)


class AttentionKernel(Adjustment):
    name = "attention_kernel"
    mechanism = ("transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend; "
                 "measurements/h100-attention-backends.csv")
    marks = {"backend": ""}

    def applies(self, batch: Batch, params) -> np.ndarray:
        cudnn = batch.marks["backend"] == "cudnn"
        if batch.op != "attention" or not cudnn.any() or not models_flash(batch.models, batch.pass_):
            return np.zeros(len(batch), bool)
        return cudnn & ~batch.prior  # a model's quantiles: FlashAttention-2's data, cuDNN's kernel

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        return q * cudnn_over_flash(batch.pass_, batch.frame["seq_kv"][which])[:, None]

    def evidence(self, evidence: Evidence, batch: Batch) -> Evidence:
        return Evidence(Source.MODEL, f"{batch.models.where} (FlashAttention-2 x cuDNN/FA2 on H100)")

    def example_calls(self) -> tuple[str, list[Call]]:
        shape = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 4096, "seq_kv": 4096, "head_dim": 128, "causal": 1}
        return "h100-sxm", [Call.of("attention", p, dict(shape, **kernel)) for p in ("fwd", "bwd")
                            for kernel in ({}, {"backend": "cudnn"})]
