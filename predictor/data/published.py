"""Published end-to-end training runs: the tables of ``data/e2e``, the rows an
analysis picks from them, the step time each row measured, and each row as PRISM's specs.

The table layout is the 36 columns of ``e2e_training_visible.csv`` (one run a row: model,
layout, batch, framework, GPUs, networks and what the source measured). A row states its
step time (``iter_time_s``), or tokens/s from which ``iter_time_s_derived`` was worked
out (torchtitan: GBS·seq / (tokens/s/GPU · GPUs)), or only TFLOP/s per GPU: then the step
time is the FLOPs the source counted divided by that rate (:data:`FLOP_COUNT`).

Blank fields of a row take defaults: micro-batch 1, cp 1, vp 1 (1F1B), no sequence
parallelism, no recompute, no optimizer sharding, a GPT model's vocabulary 51,200
(Megatron's padded GPT-2), bf16 (fp32 under HF Accelerate). A precision of "fp8 ..."
runs the linear layers' GEMMs in float8. The GPU column picks a hardware profile by its
``device.match`` names (longest match); the inter-node column, where it states a
bandwidth, replaces the profile's network between nodes (a row's cluster is not the
profile's); the intra-node fabric stays the GPU system's.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, match_hardware
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.workload.flops import model_flops_per_step

GPT_VOCAB = 51200
RUNS_TABLE = "e2e_training_visible.csv"
SINGLE_NODE_TABLE = "e2e_vtrain_single_node.csv"

#: How a source counted the FLOPs behind its published TFLOP/s per GPU, as arguments of
#: :func:`~predictor.workload.flops.model_flops_per_step`. Both count attention unmasked;
#: Narayanan et al. (arXiv 2104.04473, eq. 3) count the layers' forward again under full
#: recompute, Megatron-LM's README (H100 weak scaling, ``num_floating_point_operations``
#: of megatron/training/training.py) does not.
FLOP_COUNT = {"narayanan2021_t1": {"causal": False, "full_recompute": True},
              "narayanan2021_t2": {"causal": False, "full_recompute": True},
              "megatronlm_readme_h100": {"causal": False, "full_recompute": False}}

#: What a source's notes and framework state about the fields its rows leave blank:
#: set_id -> (the statement, {column: value or row -> value}).
ASSUMED = {
    "megatronlm_readme_h100": (
        "sharding distributed_optimizer (--overlap-param-gather exists only with --use-distributed-optimizer); "
        "sequence parallel on where tp > 1 (--tp-comm-overlap requires it)",
        {"zero_or_distopt": "distributed optimizer", "seq_parallel": lambda r: "on" if r.tp > 1 else "off"}),
    "neusight_dist": (
        "one micro-batch per step (notes: 'PP runs use 1 microbatch'): mbs = gbs / dp",
        {"mbs": lambda r: r.gbs // r.dp}),
}


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise PrismError(f"{path}: no such table; point the published-runs folder at data/e2e",
                         field=str(path))
    return pd.read_csv(path)


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or str(v).strip() == ""


def published_runs(e2e_dir, set_ids=None, gpu: str | None = None) -> pd.DataFrame:
    """Rows of the published-runs table from ``set_ids`` (all sets if None) on GPUs whose
    name contains ``gpu``, with the blanks :data:`ASSUMED` fills filled and the measured
    step time in ``measured_s`` (:func:`measured_step_s`)."""
    table = _read(Path(e2e_dir) / RUNS_TABLE)
    rows = table[table.set_id.isin(set_ids)] if set_ids is not None else table
    if gpu is not None:
        rows = rows[rows.gpu.str.contains(gpu)]
    rows = rows.copy()
    for set_id, (_, fills) in ASSUMED.items():
        mask = rows.set_id == set_id
        for column, value in fills.items():
            blank = mask & rows[column].isna()
            if blank.any():
                rows.loc[blank, column] = rows[blank].apply(value, axis=1) if callable(value) else value
    rows["measured_s"] = [measured_step_s(row) for _, row in rows.iterrows()]
    return rows


def single_node_runs(e2e_dir, n: int | None = None) -> pd.DataFrame:
    """vTrain's 1,440 runs on one 8-GPU A100 node in the published-runs layout, or ``n``
    of them drawn at random (seed 0)."""
    raw = _read(Path(e2e_dir) / SINGLE_NODE_TABLE)
    if n:
        raw = raw.sample(n=min(n, len(raw)), random_state=0)
    return pd.DataFrame({
        "set_id": "vtrain_single_node", "model": "GPT", "layers": raw.layers, "hidden": raw.hidden,
        "heads": raw.heads, "kv_heads": np.nan, "ffn": np.nan, "vocab": np.nan, "seq_len": raw.seq_len,
        "gbs": raw.gbs, "mbs": raw.mbs, "tp": raw.tp, "pp": raw.pp, "dp": raw.dp, "cp": np.nan, "vp": np.nan,
        "seq_parallel": np.nan, "recompute": raw.recompute, "zero_or_distopt": np.nan,
        "framework": "Megatron-LM (vTrain single-node validation)", "gpu": "A100", "num_gpus": raw.num_gpus,
        "gpus_per_node": 8, "inter_node": np.nan, "intra_node": np.nan, "iter_time_s": raw.iter_time_ms / 1e3,
        "measured_s": raw.iter_time_ms / 1e3})


def measured_step_s(row: pd.Series) -> float:
    """The step time a row measured: ``iter_time_s``, else ``iter_time_s_derived``, else
    the FLOPs its source counted (:data:`FLOP_COUNT`) over its TFLOP/s per GPU; NaN if
    it states none of them."""
    for column in ("iter_time_s", "iter_time_s_derived"):
        if not _blank(row.get(column)):
            return float(row[column])
    if _blank(row.get("tflops_per_gpu")):
        return np.nan
    if row.set_id not in FLOP_COUNT:
        raise PrismError(f"set_id={row.set_id!r}: publishes TFLOP/s but its FLOP count is unknown; add how it "
                         f"counts to predictor.data.published.FLOP_COUNT", field="set_id")
    seq = int(row.seq_len)
    flops = model_flops_per_step(row_model(row), int(row.gbs) * seq, seq, **FLOP_COUNT[row.set_id])
    return flops / (row.tflops_per_gpu * 1e12 * row.num_gpus)


def _bandwidth(text, gpus_per_node: int) -> float | None:
    """Bytes/s per GPU from text such as '8x 200 Gb/s HDR InfiniBand per node' or '150 GB/s'."""
    if not isinstance(text, str):
        return None
    found = re.search(r"(?:(\d+)\s*x\s*)?([\d.]+)\s*(Gb|GB)/s", text)
    if not found:
        return None
    count, value, unit = found.groups()
    bw = float(value) * (int(count) if count else 1) * (1e9 / 8 if unit == "Gb" else 1e9)
    return bw / gpus_per_node if "per node" in text else bw


def row_hardware(gpu) -> str:
    name = match_hardware(gpu)
    if name is None:
        raise PrismError(f"gpu={gpu!r}: no hardware profile matches; add its name to a conf/hardware/*.yaml "
                         f"device.match list", field='gpu')
    return name


def row_precision(text, framework: str) -> tuple[str, str]:
    """(train dtype, GEMM dtype) of a row's precision column: "fp8 ..." runs the linears
    in float8 and the rest in bf16 (torchtitan Float8, Transformer Engine); blank is
    bf16, except under HF Accelerate, whose default (``mixed_precision="no"``) is fp32."""
    text = "" if _blank(text) else str(text).lower()
    if "fp8" in text:
        return "bfloat16", "float8"
    for key, dtype in (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16")):
        if text.startswith(key):
            return dtype, dtype
    dtype = "float32" if not text and "Accelerate" in framework else "bfloat16"
    return dtype, dtype


def row_model(row: pd.Series) -> ModelConfig:
    """The model of a table row: Llama (SwiGLU, RMSNorm, RoPE, untied) if its name says
    so, else GPT (GELU, LayerNorm, learned positions, tied); blank kv heads, FFN width and
    vocabulary take multi-head attention, 4·hidden and the family's vocabulary."""
    name = str(row["model"])
    llama = "llama" in name.lower()
    hidden, heads = int(row["hidden"]), int(row["heads"])
    return ModelConfig(
        name=name, family="llama" if llama else "gpt", num_layers=int(row["layers"]), hidden_size=hidden,
        num_heads=heads, num_kv_heads=int(heads if _blank(row["kv_heads"]) else row["kv_heads"]),
        head_dim=hidden // heads, ffn_hidden_size=int(4 * hidden if _blank(row["ffn"]) else row["ffn"]),
        vocab_size=int((128256 if llama else GPT_VOCAB) if _blank(row["vocab"]) else row["vocab"]),
        seq_length=int(row["seq_len"]), activation="swiglu" if llama else "gelu",
        norm="rmsnorm" if llama else "layernorm", position="rope" if llama else "learned",
        tied_embeddings=not llama)


def row_workload(row: pd.Series, profiles: dict) -> tuple[ModelConfig, ParallelConfig, HardwareConfig]:
    """The model, layout and hardware of a table row; ``profiles`` caches loaded profiles by name."""
    model = row_model(row)
    recompute = str(row["recompute"]).split()[0].lower() if not _blank(row["recompute"]) else "none"
    sharding = str(row["zero_or_distopt"]).lower() if not _blank(row["zero_or_distopt"]) else "none"
    sharding = ("fsdp" if "fsdp" in sharding else "zero3" if "zero-3" in sharding
                else "distributed_optimizer" if "dist" in sharding else "none")
    for field in ("dp", "tp", "pp", "gbs"):
        if _blank(row[field]):
            raise PrismError(f"{field}: not stated in the row; fill it in (a layout needs dp, tp, pp and gbs)",
                             field=field)
    vp = 1 if _blank(row["vp"]) or not str(row["vp"]).isdigit() else int(row["vp"])
    framework = str(row.get("framework", ""))
    # Megatron-LM before Megatron-Core (2023) reduced DP gradients after the backward
    # (--overlap-grad-reduce came with Core) and ran attention unfused (baddbmm, fused
    # scale-mask-softmax, bmm) rather than FlashAttention.
    legacy_megatron = "Megatron-LM" in framework and "Core" not in framework
    notes = f"{framework} {row.get('notes', '')}".lower()
    tp_overlap = "tp-comm-overlap" in notes or "asynctp" in notes or "async tp" in notes
    par = ParallelConfig(
        dp=int(row["dp"]), tp=int(row["tp"]), pp=int(row["pp"]), cp=int(1 if _blank(row["cp"]) else row["cp"]),
        vpp=vp, schedule="interleaved" if vp > 1 else "1f1b",
        sequence_parallel=str(row["seq_parallel"]).strip().lower() == "on",
        micro_batch_size=int(1 if _blank(row["mbs"]) else row["mbs"]), global_batch_size=int(row["gbs"]),
        recompute=recompute if recompute in ("none", "selective", "full") else "none", sharding=sharding,
        overlap_grad_reduce=not legacy_megatron, overlap_tp_comm=tp_overlap,
        attention="unfused" if legacy_megatron else "flash")
    name = row_hardware(row["gpu"])
    if name not in profiles:
        profiles[name] = load_hardware(name)
    hw = copy.deepcopy(profiles[name])
    hw.train_dtype, gemm = row_precision(row.get("precision"), framework)
    hw.gemm_dtype = gemm if gemm != hw.train_dtype else None
    gpn = int(row["gpus_per_node"]) if not _blank(row.get("gpus_per_node")) else hw.node.gpus_per_node
    hw.node.gpus_per_node = gpn
    # The node's own fabric (NVLink/NVSwitch) comes with the GPU system and stays the
    # profile's; the network between nodes is the cluster's, so the row's figure rules.
    inter = _bandwidth(row.get("inter_node"), gpn)
    if inter:
        hw.network.inter_node.bandwidth = inter
    return model, par, hw
