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
causal, head dim 128, bf16, torch 2.11's SDPA backends). A ``flash_triton`` call
(FlashAttention's Triton implementation, ``flash_attn_triton.py``, which llm-foundry's
``attn_impl: triton`` runs) is priced at the FlashAttention-2 quantiles times the two
kernels' published time ratio (:func:`triton_over_flash`: FlashAttention-2's throughput over
the Triton kernel's in Dao-AILab/flash-attention's A100 forward+backward benchmark, shipped in
``data/microbench/op_flashattention_tflops.csv``, by causal mask, head dimension and sequence
length; the one ratio for both passes, as the benchmark times them together). Each ratio is
applied only to a model of FlashAttention data; a roofline prior is the same for any kernel.
"""
from __future__ import annotations

import functools
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


#: The published benchmark the Triton ratio is read from, and its two kernels' names there.
TRITON_TABLE = ("microbench", "op_flashattention_tflops.csv")
TRITON_KERNELS = ("FlashAttention-2", "FlashAttention Triton")


@functools.cache
def _triton_table() -> dict[tuple[bool, int], tuple[np.ndarray, np.ndarray]]:
    """(causal, head_dim) -> (log2 sequence lengths, FlashAttention-2 over Triton throughput) of
    the A100 forward+backward benchmark."""
    import pandas as pd  # the table is read once, when a flash_triton call is first priced

    from predictor.core.profiles import DATA_DIR
    table = pd.read_csv(DATA_DIR.joinpath(*TRITON_TABLE), dtype=str)
    table = table[table.gpu.str.startswith("A100") & (table.pass_type == "fwd+bwd")]
    table = table.assign(tflops=pd.to_numeric(table.tflops, errors="coerce"),  # "OOM": no time, no ratio
                         seqlen=pd.to_numeric(table.seqlen), head_dim=pd.to_numeric(table.head_dim),
                         causal=table.causal.str.lower() == "yes")
    wide = table.pivot_table(index=["causal", "head_dim", "seqlen"], columns="implementation", values="tflops")
    ratio = (wide[TRITON_KERNELS[0]] / wide[TRITON_KERNELS[1]]).dropna()
    return {key: (np.log2(group.index.get_level_values("seqlen").to_numpy(float)), group.to_numpy(float))
            for key, group in ratio.groupby(level=["causal", "head_dim"])}


def triton_over_flash(causal, head_dim, seq_kv) -> np.ndarray:
    """The Triton kernel's time over FlashAttention-2's per call: the published throughput
    ratio at the call's causal mask and the nearest published head dimension (64, 128),
    interpolated in log2(sequence) between the published lengths (512-16,384), the nearest
    one's outside them."""
    table = _triton_table()
    dims = np.array(sorted({d for _, d in table}))
    out = np.empty(len(np.atleast_1d(seq_kv)))
    for i, (c, d, n) in enumerate(np.broadcast(np.atleast_1d(causal), np.atleast_1d(head_dim),
                                               np.atleast_1d(seq_kv))):
        nearest = int(dims[np.argmin(np.abs(np.log2(dims) - np.log2(max(float(d), 1.0))))])
        seqs, ratios = table[(bool(c), nearest)]
        out[i] = np.interp(np.log2(max(float(n), 1.0)), seqs, ratios)
    return out


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
        other = np.isin(batch.marks["backend"], ("cudnn", "flash_triton"))
        if batch.op != "attention" or not other.any() or not models_flash(batch.models, batch.pass_):
            return np.zeros(len(batch), bool)
        return other & ~batch.prior  # a model's quantiles: FlashAttention-2's data, another kernel

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        backend, seq = batch.marks["backend"][which], batch.frame["seq_kv"][which]
        ratio = np.where(backend == "cudnn", cudnn_over_flash(batch.pass_, seq), 1.0)
        triton = backend == "flash_triton"
        if triton.any():
            ratio[triton] = triton_over_flash(batch.frame["causal"][which][triton],
                                              batch.frame["head_dim"][which][triton], seq[triton])
        return q * ratio[:, None]

    def evidence(self, evidence: Evidence, batch: Batch) -> Evidence:
        kernels = set(batch.marks["backend"]) & {"cudnn", "flash_triton"}
        why = " and ".join({"cudnn": "cuDNN/FA2 on H100", "flash_triton": "Triton/FA2 on A100"}[k]
                           for k in sorted(kernels))
        return Evidence(Source.MODEL, f"{batch.models.where} (FlashAttention-2 x {why})")

    def example_calls(self) -> tuple[str, list[Call]]:
        shape = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 4096, "seq_kv": 4096, "head_dim": 128, "causal": 1}
        return "h100-sxm", [Call.of("attention", p, dict(shape, **kernel)) for p in ("fwd", "bwd")
                            for kernel in ({}, {"backend": "cudnn"}, {"backend": "flash_triton"})]
