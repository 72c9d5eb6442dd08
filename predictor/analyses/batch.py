"""``prism predict-batch``: workloads in the e2e table layout in, predictions beside them.

Reads the 36-column layout of ``../shared/data/e2e/e2e_training_visible.csv`` and adds
``pred_iter_time_s_p50/_p5/_p95``, ``pred_mem_gib`` and ``pred_status`` (``ok`` or the
error). Blank fields take defaults: micro-batch 1, cp 1, vp 1 (1F1B), no sequence
parallelism, no recompute, no optimizer sharding, a GPT model's vocabulary 51,200
(Megatron's padded GPT-2), bf16 (fp32 under HF Accelerate). A precision of
"fp8 ..." runs the linear layers' GEMMs in float8. The GPU column picks a hardware profile by its
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
from predictor.engine.compose import compose
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.core.profiles import load_hardware, match_hardware
from predictor.workload.decompose import decompose
from predictor.core.errors import PrismError
from predictor.workload.memory import memory_per_gpu
from predictor.latency.artifacts import ModelSet, trained_models

GPT_VOCAB = 51200


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


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or str(v).strip() == ""


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


def row_workload(row: pd.Series, profiles: dict) -> tuple[ModelConfig, ParallelConfig, HardwareConfig]:
    """The model, layout and hardware of a table row; ``profiles`` caches loaded profiles by name."""
    name = str(row["model"])
    llama = "llama" in name.lower()
    hidden, heads = int(row["hidden"]), int(row["heads"])
    model = ModelConfig(
        name=name, family="llama" if llama else "gpt", num_layers=int(row["layers"]), hidden_size=hidden,
        num_heads=heads, num_kv_heads=int(heads if _blank(row["kv_heads"]) else row["kv_heads"]),
        head_dim=hidden // heads, ffn_hidden_size=int(4 * hidden if _blank(row["ffn"]) else row["ffn"]),
        vocab_size=int((128256 if llama else GPT_VOCAB) if _blank(row["vocab"]) else row["vocab"]),
        seq_length=int(row["seq_len"]), activation="swiglu" if llama else "gelu",
        norm="rmsnorm" if llama else "layernorm", position="rope" if llama else "learned",
        tied_embeddings=not llama)
    recompute = str(row["recompute"]).split()[0].lower() if not _blank(row["recompute"]) else "none"
    sharding = str(row["zero_or_distopt"]).lower() if not _blank(row["zero_or_distopt"]) else "none"
    sharding = ("fsdp" if "fsdp" in sharding else "zero3" if "zero-3" in sharding
                else "distributed_optimizer" if "dist" in sharding else "none")
    for field in ("dp", "tp", "pp", "gbs"):
        if _blank(row[field]):
            raise PrismError(f"{field}: not stated in the row; fill it in (a layout needs dp, tp, pp and gbs)", field=field)
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
        overlap_grad_reduce=not legacy_megatron, overlap_tp_comm=tp_overlap, attention="unfused" if legacy_megatron else "flash")
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


def predict_table(table: pd.DataFrame, draws: int = 1000, models_root=None) -> pd.DataFrame:
    """``table`` with the predicted columns added (one prediction per row)."""
    profiles: dict[str, HardwareConfig] = {}
    cache: dict[str, ModelSet | None] = {}
    out = table.copy()
    cols = {c: [] for c in ("pred_iter_time_s_p50", "pred_iter_time_s_p5", "pred_iter_time_s_p95",
                            "pred_mem_gib", "pred_status")}
    for _, row in table.iterrows():
        try:
            model, par, hw = row_workload(row, profiles)
            if hw.name not in cache:
                cache[hw.name] = trained_models(profiles[hw.name], models_root)
            models = cache[hw.name] and cache[hw.name].with_hardware(hw)
            dist = compose(decompose(model, par, hw, int(row["num_gpus"])), models, draws=draws)
            p5, p50, p95 = dist.quantile([0.05, 0.5, 0.95])
            mem = memory_per_gpu(model, par, flash_attention=par.attention == "flash").total_gib
            values = [p50, p5, p95, mem, "ok"]
        except PrismError as exc:
            values = [np.nan] * 4 + [str(exc)]
        for c, v in zip(cols, values):
            cols[c].append(v)
    for c, v in cols.items():
        out[c] = v
    return out


def predict_batch(path, out_path, draws: int = 1000) -> pd.DataFrame:
    table = pd.read_csv(path)
    result = predict_table(table, draws=draws)
    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    result.to_csv(tmp, index=False)
    tmp.replace(out_path)
    return result
