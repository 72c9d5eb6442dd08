"""MosaicML llm-foundry's published MPT throughput tables (``data/e2e/e2e_llmfoundry_mpt.csv``,
mosaicml/llm-foundry scripts/train/benchmarking/README.md) in the published-runs layout
of :mod:`predictor.data.published`, so that the same adapters turn each row into specs.

MPT (mosaicml/llm-foundry, ``mpt`` model configs): multi-head attention with ALiBi (no
positional parameters, no RoPE), a GELU MLP of ``arch_ffn`` width, LayerNorm without
biases, tied embeddings, a vocabulary of 50,368; attention by FlashAttention's Triton kernel
(``attn_config.attn_impl: triton`` in scripts/train/yamls/pretrain/mpt-*.yaml, the configs the
benchmark README's tables ran: ``sweep.sh``). Every run is PyTorch FSDP across all its
GPUs (``dp`` = GPUs, no tensor or pipeline parallelism), ``FULL_SHARD`` or
``SHARD_GRAD_OP``, with activation checkpointing of whole blocks where the table says
``True`` (full recompute). The step time is the global batch in tokens over the measured
tokens/s.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError

TABLE = "e2e_llmfoundry_mpt.csv"


def llmfoundry_runs(e2e_dir) -> pd.DataFrame:
    """Every row of the llm-foundry table with its measured step (``measured_s``), in the
    published-runs layout (set_id ``llmfoundry_mpt``)."""
    path = Path(e2e_dir) / TABLE
    if not path.is_file():
        raise PrismError(f"{path}: no such table; the llm-foundry runs ship in data/e2e", field=str(path))
    raw = pd.read_csv(path)
    gpus = raw["# GPUs"].astype(int)
    step = raw["GlobalBatchSize (T)"] / raw["Throughput (T/s)"]
    fp8 = raw["Precision"].str.contains("fp8")
    return pd.DataFrame({
        "set_id": "llmfoundry_mpt", "source": raw["source"],
        "model": "MPT-" + raw["Model"].astype(str) + " (GPT-style)",  # GELU, LayerNorm, tied: read as GPT
        "layers": raw["arch_n_layers"], "hidden": raw["arch_d_model"], "heads": raw["arch_n_heads"],
        "kv_heads": raw["arch_n_heads"], "ffn": raw["arch_ffn"], "vocab": raw["arch_vocab"],
        "seq_len": raw["SeqLen (T)"], "gbs": raw["GlobalBatchSize"], "mbs": raw["MicroBatchSize"],
        "tp": 1, "pp": 1, "dp": gpus, "cp": np.nan, "ep": np.nan, "vp": np.nan, "seq_parallel": np.nan,
        "recompute": np.where(raw["Activation Checkpointing"], "full", "none"),
        "zero_or_distopt": np.where(raw["Sharding Strategy"] == "SHARD_GRAD_OP", "zero2", "fsdp"),
        "precision": np.where(fp8, "fp8 (Transformer Engine)", "bf16"),
        "framework": "llm-foundry (Composer, PyTorch FSDP)", "gpu": raw["GPU"], "num_gpus": gpus,
        "gpus_per_node": 8, "intra_node": np.nan, "inter_node": raw["inter_node"],
        "iter_time_s": step, "notes": raw["section"] + "; attn_impl: triton (mpt-*.yaml)", "measured_s": step})
