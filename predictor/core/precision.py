"""Training precision: which dtype each operator of a step runs in.

A job trains in ``hardware.train_dtype`` (bf16 mixed precision by default) and may run
its linear layers' GEMMs in a lower precision, ``hardware.gemm_dtype``
(:data:`GEMM_DTYPES`). Which ops run in which precision follows the recipes of NVIDIA
Transformer Engine (``te.Linear`` / ``LayerNormLinear`` quantize the inputs of their
GEMMs only), torchtitan's Float8 / MXFP8 linears and Megatron-Core's fp8 and fp4 recipes:

- in ``gemm_dtype`` (:data:`LOW_PRECISION_OPS`): the linear layers' ``gemm`` calls (QKV,
  attention output, FFN up/gate/down; forward and both backward GEMMs) and the experts'
  ``grouped_gemm``; the output layer (LM head) stays in ``train_dtype`` (:data:`OUTPUT_ROLE`);
- in ``train_dtype`` (bf16): the attention core (``attention``, or ``bmm`` + ``softmax``
  unfused), norms, RoPE, activations, residual adds, the embedding, the loss, the
  optimizer step (fp32 master weights) and every collective (activations and gradients
  are exchanged in bf16).

Where a run states otherwise (MLPerf's "NVFP4 (FP8 attention)"), PRISM still prices
attention in bf16: a stated assumption, not a measured choice.

The low precisions, each a key of ``hardware.peak_flops``: a profile without that key has
no such tensor-core path, and a prediction that needs it is refused in one line naming
``hardware.gemm_dtype`` (:func:`no_peak`), never run in another precision instead:

- ``float8``: FP8 E4M3 with one scale per tensor (Transformer Engine delayed / current
  scaling, torchtitan Float8 "tensorwise"); Hopper and Blackwell.
- ``float8_blockwise``: FP8 E4M3 with an fp32 scale per 1x128 activation and 128x128
  weight block (DeepSeek-V3, arXiv 2412.19437 sec. 3.3; Transformer Engine
  ``Float8BlockScaling``); runs on the FP8 tensor cores.
- ``mxfp8``: OCP Microscaling FP8: E4M3 elements, one E8M0 (power-of-two) scale per 32
  consecutive elements (OCP MX spec v1.0; Transformer Engine ``MXFP8BlockScaling``,
  "native hardware acceleration on Blackwell GPUs (SM 10.0+)"). Blackwell only.
- ``nvfp4``: 4-bit E2M1 elements, one FP8 E4M3 scale per 16 elements and an fp32 scale per
  tensor (Transformer Engine ``NVFP4BlockScaling``; NVIDIA "Introducing NVFP4", 2025).
  Blackwell only.

Bytes per element, the scales included, are :data:`predictor.core.ops.DTYPE_BYTES`.
"""
from __future__ import annotations

from predictor.core.choices import GemmDtype, choice, values
from predictor.core.errors import PrismError

#: Ops that run in ``hardware.gemm_dtype``: the linear layers' GEMMs and the experts'
#: grouped GEMMs. Every other op runs in ``train_dtype`` (module docstring).
LOW_PRECISION_OPS = ("gemm", "grouped_gemm")
#: The role of the one GEMM that stays in ``train_dtype`` under a low-precision recipe: the
#: output layer (LM head). Megatron-Core builds it as a plain ``tensor_parallel.
#: ColumnParallelLinear``, outside Transformer Engine's fp8/fp4 autocast; PRISM assumes the
#: same of every framework.
OUTPUT_ROLE = "output"


def call_dtype(op: str, role: str, train_dtype: str, gemm_dtype: str | None,
               gemm_ops=LOW_PRECISION_OPS) -> str:
    """The precision one call runs in: ``gemm_dtype`` for the ops of ``gemm_ops`` (those of
    :data:`LOW_PRECISION_OPS` a recipe converts; the output layer excepted), else ``train_dtype``."""
    if gemm_dtype and op in gemm_ops and role != OUTPUT_ROLE:
        return gemm_dtype
    return train_dtype


def check_gemm_ops(ops) -> None:
    """One error naming ``hardware.gemm_ops`` unless every entry is one of :data:`LOW_PRECISION_OPS`."""
    unknown = [op for op in ops if op not in LOW_PRECISION_OPS]
    if unknown:
        raise PrismError(f"hardware.gemm_ops={list(ops)}: {', '.join(map(str, unknown))} cannot run in gemm_dtype; "
                         f"choose among {', '.join(LOW_PRECISION_OPS)}", field="hardware.gemm_ops")


#: The precisions ``hardware.gemm_dtype`` may name (null: the GEMMs run in train_dtype).
GEMM_DTYPES = values(GemmDtype)

#: Spellings accepted for ``hardware.gemm_dtype`` (case ignored) and what they mean; a bare
#: "fp4" is NVFP4, Blackwell's training format (MXFP4 is not modelled).
ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "half": "float16",
    "fp8": "float8", "fp8_tensorwise": "float8", "fp8-tensorwise": "float8", "float8_tensorwise": "float8",
    "fp8_blockwise": "float8_blockwise", "fp8-blockwise": "float8_blockwise", "float8-blockwise": "float8_blockwise",
    "mx_fp8": "mxfp8", "mx-fp8": "mxfp8", "nv_fp4": "nvfp4", "nv-fp4": "nvfp4", "fp4": "nvfp4",
}

#: A precision that runs on another's tensor-core path takes that peak where a profile lists
#: none of its own: block-wise FP8 is FP8 GEMMs with finer scales (DeepSeek-V3 ran it on H800).
PEAK_FALLBACK = {"float8_blockwise": "float8"}


def peak_of(peaks: dict, dtype: str) -> float | None:
    """The peak FLOP/s of ``dtype`` in ``peaks`` (``hardware.peak_flops``), through
    :data:`PEAK_FALLBACK`; None where the hardware has none."""
    return peaks.get(dtype) or (peaks.get(PEAK_FALLBACK[dtype]) if dtype in PEAK_FALLBACK else None)


def canonical_gemm_dtype(value: str | None) -> str | None:
    """``value`` as one of :data:`GEMM_DTYPES` (aliases resolved), or None; one error
    naming ``hardware.gemm_dtype`` and the choices for anything else."""
    if value is None:
        return None
    name = str(value).strip().lower()
    name = ALIASES.get(name, name)
    return choice(GemmDtype, name, "hardware.gemm_dtype", "unknown precision; choose one of: {options} (or null: the "
                  "GEMMs run in hardware.train_dtype)", written=value).value


def no_peak(name: str, dtype: str, peaks: dict) -> PrismError:
    """The one-line refusal of a GEMM precision that hardware ``name`` lists no peak for
    (no such tensor-core path, e.g. nvfp4 on H100), naming ``hardware.gemm_dtype``: PRISM
    does not fall back to another precision silently."""
    have = [d for d in GEMM_DTYPES if peak_of(peaks, d)]
    return PrismError(f"hardware.gemm_dtype={dtype}: {name} has no {dtype} peak (hardware.peak_flops.{dtype}: "
                      f"no such tensor-core path); choose one it has: {', '.join(have)}", field="hardware.gemm_dtype")


def check_gemm_dtype(name: str, value: str | None, peaks: dict) -> str | None:
    """``value`` canonical (:func:`canonical_gemm_dtype`), refused (:func:`no_peak`) where
    hardware ``name`` lists no peak for it."""
    dtype = canonical_gemm_dtype(value)
    if dtype is not None and not peak_of(peaks, dtype):
        raise no_peak(name, dtype, peaks)
    return dtype
