"""Published end-to-end training runs: the tables of ``data/e2e``, the rows an
analysis picks from them, the step time each row measured, and each row as PRISM's specs.

The table layout is the 36 columns of ``e2e_training_visible.csv`` (one run a row: model,
layout, batch, framework, GPUs, networks and what the source measured). A row states its
step time (``iter_time_s``), or tokens/s from which ``iter_time_s_derived`` was worked
out (torchtitan: GBS·seq / (tokens/s/GPU · GPUs)), or only TFLOP/s per GPU: then the step
time is the FLOPs the source counted divided by that rate (:data:`FLOP_COUNT`).

Each row becomes PRISM's specs through :func:`row_workload`, which reads every cell with
the schema of :mod:`predictor.data.runs_table` (units, blanks, spellings, framework
defaults) and says what it assumed. The GPU column picks a hardware profile by its
``device.match`` names (longest match); the inter-node column, where it states a
bandwidth, replaces the profile's network between nodes (a row's cluster is not the
profile's); the intra-node fabric stays the GPU system's.
"""
from __future__ import annotations

import copy
import math
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.framework import (
    FrameworkSpec,
    all_frameworks,
    default_framework,
    load_framework,
    table_framework,
    unrecognised_framework,
    value_spellings,
)
from predictor.core.layout import framework_recompute, validate_layout
from predictor.core.precision import LOW_PRECISION_OPS, check_gemm_dtype
from predictor.core.profiles import load_hardware, match_hardware, match_model, names_profile, other_gpus_named
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.data import cells as plain
from predictor.data.runs_table import (
    BY_NAME,
    INSTEAD,
    MISSING_WORDS,
    OFF_WORDS,
    ON_WORDS,
    PRECISIONS,
    RECOMPUTES,
    SHARDINGS,
    asks_default,
    bandwidth,
    blank_cell,
    cell,
    choice,
    count,
    default_whose,
    framework_default,
    framework_family,
    mentions,
    says,
    switch,
    with_columns,
)
from predictor.workload.decompose import attention_kernel
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


def published_runs(e2e_dir, set_ids=None, gpu: str | None = None) -> pd.DataFrame:
    """Rows of the published-runs table from ``set_ids`` (all sets if None) on GPUs whose
    name contains ``gpu`` (in any case), with the blanks :data:`ASSUMED` fills filled and the measured
    step time in ``measured_s`` (:func:`measured_step_s`)."""
    table = _read(Path(e2e_dir) / RUNS_TABLE)
    if isinstance(set_ids, str):  # one set, not its letters
        set_ids = [set_ids]
    if set_ids is not None:
        unknown = sorted(set(map(str, set_ids)) - set(table.set_id))
        if unknown:
            raise PrismError(f"set_ids: {unknown[0]!r} is no set of {RUNS_TABLE}; choose among: "
                             f"{', '.join(sorted(table.set_id.unique()))}", field="set_ids")
    rows = table[table.set_id.isin(set_ids)] if set_ids is not None else table
    if gpu is not None:
        if not isinstance(gpu, str):
            raise PrismError(f"gpu={gpu!r}: a text the GPU's name contains, e.g. gpu='H100'", field="gpu")
        rows = rows[rows.gpu.str.contains(gpu, case=False, regex=False)]
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
        "framework": "Megatron-DeepSpeed (vTrain data/README.md)", "gpu": "A100", "num_gpus": raw.num_gpus,
        "gpus_per_node": 8, "inter_node": np.nan, "intra_node": np.nan, "iter_time_s": raw.iter_time_ms / 1e3,
        "measured_s": raw.iter_time_ms / 1e3})


def measured_step_s(row: Mapping) -> float:
    """The step time a row (a Series or a dict of the table's columns) measured:
    ``iter_time_s``, else ``iter_time_s_derived``, else the FLOPs its source counted
    (:data:`FLOP_COUNT`) over its TFLOP/s per GPU; NaN if it states none of them."""
    if not isinstance(row, Mapping | pd.Series):
        raise PrismError(f"row={row!r:.60}: a row of the published-runs table (a pandas Series or a dict of its "
                         f"columns)", field="row")
    for column in ("iter_time_s", "iter_time_s_derived"):
        if cell(row, column):
            return _number(row, column)
    if not cell(row, "tflops_per_gpu"):
        return np.nan
    set_id = cell(row, "set_id")
    if set_id not in FLOP_COUNT:
        raise PrismError(f"set_id={set_id!r}: publishes TFLOP/s but its FLOP count is unknown; add how it "
                         f"counts to predictor.data.published.FLOP_COUNT", field="set_id")
    model, gbs, gpus = row_model(row), count(row, "gbs"), count(row, "num_gpus")
    flops = model_flops_per_step(model, gbs * model.seq_length, model.seq_length, **FLOP_COUNT[set_id])
    return flops / (_number(row, "tflops_per_gpu") * 1e12 * gpus)


def _number(row: Mapping, column: str) -> float:
    """A cell that holds a positive number, as that number; else one error naming the column."""
    try:
        value = float(cell(row, column))
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise PrismError(f"{column}={cell(row, column)!r}: not a positive number; fix the cell", field=column)
    return value


#: The column of the table each field of PRISM's specs comes from, so that a spec's
#: error (``parallel.tp``, ``model.num_kv_heads``, ``gpus``) names what to fix in the row.
SPEC_COLUMNS = {
    "parallel.dp": "dp", "parallel.tp": "tp", "parallel.pp": "pp", "parallel.cp": "cp", "parallel.ep": "ep",
    "parallel.vpp": "vp", "parallel.schedule": "vp", "parallel.micro_batch_size": "mbs",
    "parallel.global_batch_size": "gbs", "parallel.sharding": "zero_or_distopt", "parallel.recompute": "recompute",
    "gpus": "num_gpus", "seq": "seq_len", "model.num_layers": "layers", "model.hidden_size": "hidden",
    "model.head_dim": "hidden", "model.num_heads": "heads", "model.num_kv_heads": "kv_heads",
    "model.ffn_hidden_size": "ffn", "model.vocab_size": "vocab", "model.seq_length": "seq_len",
    "hardware.node.gpus_per_node": "gpus_per_node", "hardware.network.inter_node.bandwidth": "inter_node",
    "model.num_experts": "num_experts", "model.top_k": "top_k", "model.moe_ffn_hidden_size": "expert_ffn",
    "model.moe_layer_freq": "moe_layer_freq", "model.first_dense_layers": "moe_layer_freq",
}


#: Spec fields a message may quote with their value, renamed to the column that holds the
#: same value (``parallel.schedule``, ``model.head_dim`` and ``model.first_dense_layers``
#: map to a column for the fix only).
_QUOTED_AS_COLUMN = {key: column for key, column in SPEC_COLUMNS.items()
                     if key.startswith(("parallel.", "model."))
                     and key not in ("parallel.schedule", "model.head_dim", "model.first_dense_layers")}
# not inside a longer dotted name (x.parallel.tp), yet after a range's dots (1..model.num_experts)
_QUOTED = re.compile(r"(?<!\w)(?<!\w\.)(" + "|".join(map(re.escape, _QUOTED_AS_COLUMN)) + r"|gpus(?==))(?![\w.])")


def in_columns(message: str) -> str:
    """``message`` with the spec fields it quotes (``parallel.tp=3``, ``gpus=63``) named as
    the table's columns (``tp=3``, ``num_gpus=63``): a row's status speaks the table's terms."""
    return _QUOTED.sub(lambda m: _QUOTED_AS_COLUMN.get(m.group(1), "num_gpus"), message)


def in_table_terms(exc: PrismError) -> PrismError:
    """``exc`` as a row of the table hears it: its field the column (:func:`spec_column`),
    its message quoting columns (:func:`in_columns`) and starting with that column."""
    column = spec_column(exc.field)
    text = in_columns(str(exc))
    return PrismError(text if column is None or text.startswith(column) else f"{column}: {text}", field=column)


def spec_column(field: str | None) -> str | None:
    """The table column behind a spec field (:data:`SPEC_COLUMNS`); ``precision`` for a
    dtype the hardware lacks (``hardware.peak_flops.float8``); else ``field`` itself."""
    if field and field.startswith("hardware.peak_flops."):
        return "precision"
    return SPEC_COLUMNS.get(field, field)


@dataclass
class RowJob:
    """A table row as PRISM's specs, with what was assumed for its blank and free-text
    cells; ``key`` holds every value the prediction depends on, so rows with equal keys
    predict alike."""

    model: ModelConfig
    parallel: ParallelConfig
    hardware: HardwareConfig
    gpus: int
    assumed: list[str]
    key: tuple
    framework: str = ""  # the framework cell as written (the predictive uncertainty reads its family)

    @property
    def hardware_key(self) -> tuple:
        return self.key[2]


#: GPU systems a cell may name whose profile is another file's to add, by the profile's
#: name: "B300", "DGX B300", "HGX B300" (an 8-GPU Blackwell Ultra node, not the GB300 NVL72
#: rack) is conf/hardware/b300.yaml. Where that file is absent the cell matches no profile.
NAMED_PROFILES = {"b300": re.compile(r"(?<![a-z0-9])(?:(?:dgx|hgx|nvidia)[\s-]*)?b300(?![0-9])", re.IGNORECASE)}


def _named_profile(gpu: str) -> str | None:
    from predictor.core.profiles import group_options

    for name, pattern in NAMED_PROFILES.items():
        if pattern.search(gpu) and name in group_options("hardware"):
            return name
    return None


#: A PCIe form factor in a GPU cell: "A100 PCIe", "H100 PCIe", and "H100 NVL" / "H200 NVL" (PCIe
#: cards bridged in pairs; NVIDIA's H100 NVL product brief), not a rack's "NVL72".
_PCIE_CARD = re.compile(r"pcie|(?<![a-z0-9])nvl", re.IGNORECASE)
#: An NVLink domain's size after NVL ("GB200 NVL72", "NVL 36"), not a memory size ("H200 NVL 141GB").
_NVL_DOMAIN = re.compile(r"nvl\s*-?\s*(\d+)(?![\d.]*\s*gi?b)", re.IGNORECASE)


def _pcie_card(text: str) -> re.Match | None:
    """The PCIe form factor ``text`` names (:data:`_PCIE_CARD`), a rack's "NVL72" aside."""
    return _PCIE_CARD.search(_NVL_DOMAIN.sub("", text))


def row_hardware(gpu: str) -> str:
    """The hardware profile a GPU cell names (longest ``device.match`` name it contains, else
    a system of :data:`NAMED_PROFILES` whose file is there)."""
    name = (match_hardware(gpu) or _named_profile(gpu)) if gpu else None
    if name is None:
        raise PrismError(f"gpu={gpu!r}: no hardware profile matches; write a name such as A100, H100, H200, GH200, "
                         f"B200 (B200-SXM-180GB, DGX B200), GB200 or GB300 (NVL72 racks), or add it to a "
                         f"conf/hardware/*.yaml device.match list", field="gpu")
    others = other_gpus_named(gpu)
    if others:
        raise PrismError(f"gpu={gpu!r}: names more than one GPU ({', '.join([name, *others])}); write the one the "
                         f"run used", field="gpu")
    named = _NVL_DOMAIN.search(gpu)  # GB200 NVL36 or NVL4: a smaller NVLink domain
    card = _pcie_card(gpu)
    if card and not any(_pcie_card(m) for m in load_hardware(name).device.match):
        raise PrismError(f"gpu={gpu!r}: a PCIe card ({card.group(0)}: fewer SMs or a lower power limit than the "
                         f"SXM part, its GPUs joined by PCIe or NVLink bridges in pairs, no NVSwitch), and {name} is "
                         f"the SXM part; no profile describes it: add one to conf/hardware or write the GPU the run "
                         f"used", field="gpu")
    domain = load_hardware(name).nvlink_domain if named else None
    if named and int(named[1]) != domain:
        raise PrismError(f"gpu={gpu!r}: an NVLink domain of {named[1]} GPUs, and {name} is one of {domain}; no "
                         f"profile describes it: add one to conf/hardware (hardware.node.nvlink_domain) or write the "
                         f"system the run used", field="gpu")
    return name


def stated_memory_gib(gpu: str) -> float | None:
    """The memory size a GPU cell states ("A100-SXM4-40GB", "H100 80GB HBM3"), None if none."""
    found = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)\s*Gi?B(?![a-z/])", gpu or "", re.IGNORECASE)
    return float(found.group(1)) if found else None


#: Low-precision GEMM recipes a precision cell can name (:mod:`predictor.core.precision`),
#: most specific first: "MXFP8 (e4m3, 1x32 blocks)" is mxfp8, not tensor-wise fp8 for its
#: "e4m3"; "NVFP4 (FP8 attention)" is nvfp4 linears (attention stays bf16 in PRISM).
LOW_PRECISIONS = {
    "nvfp4": ("nvfp4", "nv-fp4", "fp4"),
    "mxfp8": ("mxfp8", "mx-fp8", "mx fp8", "fp8 (mx)"),
    "float8_blockwise": ("fp8 blockwise", "blockwise fp8", "fp8 block-wise", "block-wise fp8", "fp8-blockwise",
                         "blockwise", "block-wise", "sub-channel"),
    "float8": ("fp8", "float8", "e4m3", "tensorwise", "tensor-wise"),
}


def row_precision(text, framework: str) -> tuple[str, str]:
    """(train dtype, GEMM dtype) of a precision cell: the most specific low precision it
    names and does not negate (:data:`LOW_PRECISIONS`: nvfp4, mxfp8, block-wise fp8, fp8)
    runs the linear layers' GEMMs, and the rest runs in the other precision it names
    (:data:`~predictor.data.runs_table.PRECISIONS`), else bf16 (Transformer Engine,
    torchtitan Float8/MXFP8, Megatron-Core fp8/fp4 recipes); a blank cell takes the
    framework's default (bf16; fp32 under HF Accelerate)."""
    row = {"precision": text}
    if not cell(row, "precision") or asks_default(cell(row, "precision")):
        row = {"precision": framework_default("precision", framework_family(framework))[0]}
    written = cell(row, "precision")
    own = value_spellings("precision")  # the frameworks' own: NeMo's fp8 "hybrid", Bridge's "bf16_mixed", "fp8_mx"
    lows = {v: words + own.get(v, ()) for v, words in LOW_PRECISIONS.items()}
    low = {value for value, negated in mentions(written, lows) if not negated}
    gemm = next((v for v in LOW_PRECISIONS if v in low), None)
    words = {v: PRECISIONS.get(v, ()) + plain.PRECISION_WORDS.get(v, ()) + (own.get(v, ()) if v != "float8" else ())
             for v in PRECISIONS}
    named = [value for value, negated in mentions(written, words) if not negated and value != "float8"]
    if not named and gemm is None:
        raise PrismError(f"precision={written!r}: not a precision this reads; write "
                         f"{BY_NAME['precision'].spellings}", field="precision")
    train = named[0] if named else "bfloat16"
    return train, gemm or train


def row_model(row: Mapping, assumed: list[str] | None = None) -> ModelConfig:
    """The model of a table row: Llama (SwiGLU, RMSNorm, RoPE, untied) or GPT (GELU,
    LayerNorm, learned positions, tied), as its name says; blank kv heads, FFN width and
    vocabulary take multi-head attention, 4·hidden and the family's vocabulary. What was
    assumed is appended to ``assumed``."""
    notes = [] if assumed is None else assumed
    name = cell(row, "model")
    if not name:
        raise PrismError(f"model: blank; fill it in ({BY_NAME['model'].meaning})", field="model")
    plain = ("llama" in name.lower() or "gpt" in name.lower()) and not cell(row, "num_experts")
    known = None if plain else known_moe_model(name)  # a dense Llama or GPT row reads no conf/model entry
    if any(w in _squeezed(name) for w in UNMODELLED):  # before the entry it contains: DeepSeek-V3.2 is not V3
        word = next(w for w in UNMODELLED if w in _squeezed(name))
        raise PrismError(f"model={name!r}: {UNMODELLED[word]}; PRISM does not model it", field="model")
    families = [f for f in ("llama", "gpt") if f in name.lower()]
    blank_dims = [c for c in ("layers", "hidden", "heads", "seq_len") if _given(row, c) is None]
    if (known is None and len(families) != 1) or blank_dims:  # a published architecture by its name
        entry = registry_model(name)
        if entry is not None:
            return _registry_row(entry, row, notes)
    if known is None and VISION_LANGUAGE.search(name):
        raise PrismError(f"model={name!r}: a vision-language model, whose vision encoder and image tokens PRISM does "
                         f"not model; to price its language model alone, name that (e.g. Qwen3-235B-A22B for "
                         f"Qwen3-VL-235B-A22B) and say so in notes", field="model")
    if known is None and len(families) != 1:  # not guessed: the two families differ in every layer
        what = "both GPT and Llama; keep only its family's" if families else "neither GPT nor Llama; put the family"
        raise PrismError(f"model={name!r}: names {what} in the name ({BY_NAME['model'].meaning})", field="model")
    family = known.family if known else families[0]
    layers, hidden, heads, seq = (count(row, c) for c in ("layers", "hidden", "heads", "seq_len"))
    blank = next((c for c, v in zip(("layers", "hidden", "heads", "seq_len"), (layers, hidden, heads, seq))
                  if v is None), None)
    if blank:
        raise PrismError(f"{blank}: blank, and model={name!r} is no architecture conf/model knows by name; fill in "
                         f"{blank} ({BY_NAME[blank].meaning}), or name a published model (prism predict --help lists "
                         f"them)", field=blank)
    if hidden % heads:
        raise PrismError(f"hidden={hidden}: not a multiple of heads={heads}; check both", field="hidden")
    kv_heads, ffn, vocab = (count(row, c) for c in ("kv_heads", "ffn", "vocab"))
    if kv_heads is None:
        kv_heads = heads
        notes.append(f"kv_heads={heads} (blank: multi-head)")
    if ffn is None:
        ffn = 4 * hidden
        notes.append(f"ffn={ffn} (blank: 4 x hidden)")
    if vocab is None:
        vocab = 128256 if family == "llama" else GPT_VOCAB
        notes.append(f"vocab={vocab} (blank: {'Llama 3' if family == 'llama' else 'GPT-2, padded'})")
    llama = family == "llama"
    model = ModelConfig(
        name=name, family=family, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=hidden // heads, ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq,
        activation="swiglu" if llama else "gelu", norm="rmsnorm" if llama else "layernorm",
        position="rope" if llama else "learned", tied_embeddings=not llama)
    if count(row, "num_experts") or known:
        return _with_experts(model, row, known, notes)
    # a dense row: an expert column filled in means num_experts was forgotten, not a dense model meant
    for column in MOE_COLUMNS:
        text = cell(row, column)
        if text.lower() not in ("", "0", *MISSING_WORDS):
            raise PrismError(f"{column}={text!r}: an expert setting on a row without num_experts, which reads as a "
                             f"dense model; fill num_experts (the routed experts) or clear {column}", field=column)
    return model


#: A vision-language model's name: "Qwen3-VL-235B-A22B", "GLM-4.5V", "Llama 3.2 Vision 90B".
VISION_LANGUAGE = re.compile(r"(^|[-_ .])vl($|[-_ .\d])|\d(\.\d+)?v($|[-_ ])|vision", re.IGNORECASE)
#: The columns only a Mixture-of-Experts row reads (num_experts makes a row one).
MOE_COLUMNS = ("top_k", "expert_ffn", "shared_experts", "moe_layer_freq")


#: Architectures a model name may name that PRISM does not model, and why (letters and digits
#: of the name: "Nemotron-H 8B" is nemotronh8b).
UNMODELLED = {
    "qwen3next": "Qwen3-Next's layers are 3 of 4 Gated DeltaNet linear attention (not modelled)",
    "nemotronh": "Nemotron-H is a hybrid of Mamba-2 state-space layers and attention (Mamba layers are not modelled)",
    # NVIDIA-Nemotron-Nano-9B-v2 and 12B-v2 are Nemotron-H hybrids (arXiv 2508.14444); the v1 Nano 8B is a Llama
    "nemotronnano9bv2": "Nemotron Nano 2 is a Nemotron-H hybrid of Mamba-2 layers and attention (Mamba layers are not "
                        "modelled)",
    "nemotronnano12bv2": "Nemotron Nano 2 is a Nemotron-H hybrid of Mamba-2 layers and attention (Mamba layers are not "
                         "modelled)",
    "nemotron3nano": "Nemotron 3 Nano mixes Mamba-2 layers, attention and MoE (Mamba layers are not modelled)",
    "nemotron3super": "Nemotron 3 Super mixes Mamba-2 layers, attention and MoE (Mamba layers are not modelled)",
    "nemotron3ultra": "Nemotron 3 Ultra mixes Mamba-2 layers, attention and MoE (Mamba layers are not modelled)",
    "mamba": "Mamba layers are state-space layers, not attention (not modelled)",
    "jamba": "Jamba interleaves Mamba state-space layers with attention (Mamba layers are not modelled)",
    "zamba": "Zamba is a Mamba hybrid (state-space layers are not modelled)",
    "hymba": "Hymba runs Mamba heads beside attention (state-space layers are not modelled)",
    "falconh1": "Falcon-H1 runs Mamba-2 heads beside attention (state-space layers are not modelled)",
    "rwkv": "RWKV is a linear-attention recurrent network (not modelled)",
    "retnet": "RetNet's retention is linear attention (not modelled)",
    "recurrentgemma": "RecurrentGemma (Griffin) mixes recurrent layers with local attention (not modelled)",
    "minimaxt": "MiniMax-Text-01's layers are mostly lightning (linear) attention (not modelled)",
    "minimaxm1": "MiniMax-M1's layers are mostly lightning (linear) attention (not modelled)",
    "xlstm": "xLSTM is a recurrent network (not modelled)",
    # sparse attention that selects keys per query: its indexer and top-k attention are not the dense (or
    # sliding-window) kernels PRISM prices; V3.1 and R1 keep V3's dense MLA (conf/model/deepseek-v3.yaml)
    "deepseekv32": "DeepSeek-V3.2 attends through DeepSeek Sparse Attention, a lightning indexer choosing each "
                   "query's keys (DeepSeek-V3.2-Exp report, 2025; not modelled)",
    "glm5": "GLM-5 attends through DSA sparse-attention indexer layers (Megatron-Bridge models/glm_moe_dsa/"
            "glm5_bridge.py: MoE + MLA + DSA; not modelled)",
}


#: The row's columns that override a conf/model entry's figures, and its field of each.
REGISTRY_COLUMNS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads", "kv_heads": "num_kv_heads",
                    "ffn": "ffn_hidden_size", "vocab": "vocab_size", "seq_len": "seq_length"}


def _given(row: Mapping, column: str) -> int | None:
    """A count cell, None where blank (a required column's blank too: the registry may fill it)."""
    text = cell(row, column)
    return None if blank_cell(text) else count(row, column)


#: A checkpoint's variant after an architecture's name ("-Base", " Instruct", "-hf"), or the benchmark
#: that trains it ("GPT3-175B-MLPerf"): the same layers.
_VARIANT = re.compile(r"([\s_-]+(base|instruct|chat|hf|it|sft|pretrain(ing)?|pre-?training|mlperf))+$", re.IGNORECASE)
#: A recipe's sequence length after the model's name, as Megatron-Bridge names its recipes
#: (``llama3_8b_16k``, ``llama3_70b_64k``: the 8B or 70B at 16,384 or 65,536 tokens).
_CONTEXT = re.compile(r"[\s_-]+([0-9]+)k$", re.IGNORECASE)


def registry_model(name: str) -> ModelConfig | None:
    """The conf/model entry a model cell names (:func:`~predictor.core.profiles.match_model`:
    its name or an alias, exactly, a trailing parenthesis aside; else the Mixture-of-Experts
    entry whose name the cell contains), None where none does."""
    from predictor.core.profiles import load_model

    bare = re.sub(r"\s*[(\[].*$", "", name)
    for text in (name, bare, _VARIANT.sub("", bare), _CONTEXT.sub("", _VARIANT.sub("", bare))):
        found = match_model(text) if text else None
        if found:
            return load_model(found)
    return known_moe_model(name)


def _registry_row(entry: ModelConfig, row: Mapping, notes: list[str]) -> ModelConfig:
    """The conf/model ``entry`` a row names, with the figures the row states ruling over the
    entry's (:data:`REGISTRY_COLUMNS`) and its MoE columns read over the entry's experts."""
    from dataclasses import replace

    name = cell(row, "model")
    stated = {c: _given(row, c) for c in REGISTRY_COLUMNS}
    context = _CONTEXT.search(_VARIANT.sub("", re.sub(r"\s*[(\[].*$", "", name)))
    if stated["seq_len"] is None and context and not match_model(name):
        stated["seq_len"] = int(context.group(1)) * 1024
        notes.append(f"seq_len={stated['seq_len']} read from the model cell {name!r} "
                     f"(a recipe's '_{context.group(1)}k')")
    fields = {REGISTRY_COLUMNS[c]: v for c, v in stated.items()
              if v is not None and v != getattr(entry, REGISTRY_COLUMNS[c])}
    hidden, heads = fields.get("hidden_size", entry.hidden_size), fields.get("num_heads", entry.num_heads)
    if ("hidden_size" in fields or "num_heads" in fields) and not entry.kv_lora_rank:
        if hidden % heads:
            raise PrismError(f"hidden={hidden}: not a multiple of heads={heads}; check both", field="hidden")
        fields["head_dim"] = hidden // heads
        if stated["kv_heads"] is None and heads % entry.num_kv_heads:
            fields["num_kv_heads"] = heads
    taken = [f"{c}={getattr(entry, f)}" for c, f in REGISTRY_COLUMNS.items() if stated[c] is None]
    ruled = [f"{c}={stated[c]}" for c, f in REGISTRY_COLUMNS.items() if REGISTRY_COLUMNS[c] in fields]
    notes.append(f"model {name!r} read as conf/model {entry.name}" + (f" ({', '.join(taken)} from it)" if taken else "")
                 + (f"; the row's {', '.join(ruled)} rule" if ruled else ""))
    try:
        model = replace(entry, name=name, **fields)
    except PrismError as exc:
        raise in_table_terms(exc) from None
    if count(row, "num_experts") or entry.num_experts:
        return _with_experts(model, row, entry if entry.num_experts else None, notes)
    for column in MOE_COLUMNS:
        text = cell(row, column)
        if text.lower() not in ("", "0", *MISSING_WORDS):
            raise PrismError(f"{column}={text!r}: an expert setting on a row without num_experts, and "
                             f"{entry.name} is dense; fill num_experts (the routed experts) or clear {column}",
                             field=column)
    return model


def _squeezed(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


_KNOWN: dict[str, ModelConfig] = {}


def known_moe_model(name: str) -> ModelConfig | None:
    """The conf/model entry of a Mixture-of-Experts model whose name the cell contains
    (letters and digits only: "Qwen3-235B-A22B" is qwen3-235b-a22b, "Llama 4 Scout (...)" is
    llama4-scout): the cited figures a table has no column for (head width, multi-head
    latent attention, router, balancing, dense leading layers) come from it."""
    if not _KNOWN:
        from predictor.core.profiles import group_options, load_model

        for option in group_options("model"):
            entry = load_model(option)
            if entry.num_experts:
                _KNOWN[_squeezed(option)] = entry
    squeezed = _squeezed(name)
    matches = [key for key in _KNOWN if key in squeezed]
    return _KNOWN[max(matches, key=len)] if matches else None


def _layer_pattern(text: str, layers: int) -> tuple[int, int]:
    """(moe_layer_freq, first_dense_layers) of a moe_layer_freq cell: "N ..." (every N-th
    layer), or Megatron's list "[0]*3+[1]*58" (dense layers first, then MoE ones)."""
    text = text.strip()
    if text.startswith("["):
        terms = re.findall(r"\[([01])\]\s*\*\s*(\d+)", text.split("(")[0])
        pattern = [int(v) for v, n in terms for _ in range(int(n))]
        first = pattern.index(1) if 1 in pattern else len(pattern)
        if len(pattern) != layers or any(v != 1 for v in pattern[first:]):
            raise PrismError(f"moe_layer_freq={text!r}: PRISM reads dense leading layers then MoE ones over all "
                             f"{layers} layers, as '[0]*3+[1]*58'", field="moe_layer_freq")
        return 1, first
    number = re.match(r"\d+", text)
    if not number:
        every = plain.layer_pattern(text)  # "all MoE", "every 2nd layer MoE"
        if every:
            return every, 0
    if not number or int(number.group(0)) < 1:
        raise PrismError(f"moe_layer_freq={text!r}: write N (every N-th layer is MoE), 'all MoE', 'every 2nd layer "
                         f"MoE' or '[0]*3+[1]*58'", field="moe_layer_freq")
    return int(number.group(0)), 0


def _with_experts(model: ModelConfig, row: Mapping, known: ModelConfig | None, notes: list[str]) -> ModelConfig:
    """``model`` with the row's MoE columns (num_experts, top_k, expert_ffn, shared_experts,
    moe_layer_freq) and, from the conf/model entry its name matches, the figures the table
    has no column for; the row's own figures rule."""
    from dataclasses import replace

    experts = count(row, "num_experts") or (known.num_experts if known else None)
    top_k = count(row, "top_k") or (known.top_k if known else None)
    if top_k is None:
        raise PrismError("top_k: blank; a Mixture-of-Experts row needs the experts each token is routed to",
                         field="top_k")
    whose = f"from conf/model ({known.name})" if known else None
    blank = [c for c in ("num_experts", *MOE_COLUMNS) if not cell(row, c)]
    expert_ffn = count(row, "expert_ffn") or (known.moe_ffn_hidden_size if known else model.ffn_hidden_size)
    shared_text = cell(row, "shared_experts")
    if shared_text:
        shared = re.match(r"\d+", shared_text)
        if not shared:
            raise PrismError(f"shared_experts={shared_text!r}: write a whole number of shared experts, 0 or more",
                             field="shared_experts")
        shared_ffn = int(shared.group(0)) * expert_ffn
    else:
        shared_ffn = known.shared_expert_ffn_hidden_size if known else 0
    freq, first = _layer_pattern(cell(row, "moe_layer_freq"), model.num_layers) if cell(row, "moe_layer_freq") \
        else ((known.moe_layer_freq, known.first_dense_layers) if known else (1, 0))
    read = {"num_experts": f"num_experts={experts}", "top_k": f"top_k={top_k}",
            "expert_ffn": f"expert_ffn={expert_ffn}", "shared_experts": f"shared experts {shared_ffn} wide in all",
            "moe_layer_freq": f"moe_layer_freq={freq}"}
    unknown_default = {"expert_ffn": "the dense FFN width", "shared_experts": "none", "moe_layer_freq": "every layer"}
    if blank and whose:  # what each blank MoE cell was read as, and from where
        notes.append(", ".join(read[c] for c in blank) + f" (blank: {whose})")
    elif blank:
        notes.append(", ".join(f"{read[c]} (blank: {unknown_default[c]})" for c in blank))
    fields = dict(num_experts=experts, top_k=top_k, moe_ffn_hidden_size=expert_ffn,
                  shared_expert_ffn_hidden_size=shared_ffn, moe_layer_freq=freq, first_dense_layers=first)
    if known:
        taken = dict(head_dim=known.head_dim, router_score=known.router_score, moe_balancing=known.moe_balancing,
                     q_lora_rank=known.q_lora_rank, kv_lora_rank=known.kv_lora_rank,
                     qk_rope_head_dim=known.qk_rope_head_dim, v_head_dim=known.v_head_dim,
                     tied_embeddings=known.tied_embeddings)
        if known.kv_lora_rank:
            taken["num_kv_heads"] = model.num_heads
        changed = {k: v for k, v in taken.items() if getattr(model, k) != v}
        if changed:
            notes.append(f"from conf/model ({known.name}): " + ", ".join(f"{k}={v}" for k, v in changed.items()))
        fields.update(taken)
    try:
        return replace(model, **fields)
    except PrismError as exc:
        raise in_table_terms(exc) from None


def _spec(family: str) -> FrameworkSpec:
    """The spec a row of framework ``family`` is read under ("": none recognised, read as an
    unrecognised framework: gradients overlapped, no loss fusion read from its text; its blank
    cells take the fallback file's defaults, its attention the default framework's)."""
    return load_framework(family) if family else unrecognised_framework()


def _default_note(column: str, value: str, family: str, text: str = "") -> str:
    whose = default_whose(column, family)  # Megatron-LM and -Core: one launcher, one "Megatron"
    return f"{column}={value} ({repr(text) if text else 'blank'}: {whose}'s default)"


#: The framework setting a choice column holds (its values' spellings: ``values:`` of conf/framework).
CHOICE_SETTINGS = {"recompute": "recompute", "zero_or_distopt": "sharding"}


def _chosen(row: Mapping, column: str, phrases, off, framework: str, notes: list[str]) -> str:
    """A choice cell's value, or the default of ``framework`` (a conf/framework file or family
    name) where blank or asked for (noted).
    The frameworks' own spellings of the values are read too (NeMo's ``distributed_fused_adam``,
    DeepSpeed's ``stage 2``); a recompute cell that only says it is on ("yes", "enabled")
    recomputes whole layers (activation checkpointing as DeepSpeed, HF and FSDP wrap it)."""
    try:
        setting = CHOICE_SETTINGS[column]
        own = value_spellings(setting)
        for value, words in plain.PLAIN_VALUES.get(setting, {}).items():
            own[value] = own.get(value, ()) + words
        value, note = choice(row, column, phrases, off, own)
    except PrismError:
        if column != "recompute" or plain.switch_word(cell(row, column)) is not True:
            raise
        value, note = "full", f"recompute {cell(row, column)!r} read as full (activation checkpointing of whole layers)"
    if value is None:
        value, _ = framework_default(column, framework)
        notes.append(_default_note(column, value, framework, cell(row, column)))
    elif note:
        notes.append(note)
    return value


def _virtual_stages(row: Mapping, family: str, notes: list[str]) -> int:
    """The vp cell: a count, or yes/no; "yes" without a size takes torchtitan's 2 stages
    per rank (its spec's ``defaults.interleave_stages``) and is refused under other
    frameworks, which have no default."""
    word = re.match(r"[a-z]+", cell(row, "vp").lower())
    if word and word.group(0) in ("yes", "interleaved", "on", "true"):
        stages = _spec(family).interleave_stages if family else None
        if stages is None:
            raise PrismError(f"vp={cell(row, 'vp')!r}: interleaving without its size; write the virtual stages "
                             f"per rank as a number", field="vp")
        notes.append(f"vp={stages} ({cell(row, 'vp')!r}: {default_whose('vp', family)}'s {stages} stages per rank)")
        return stages
    if word and word.group(0) in OFF_WORDS:
        return 1
    return count(row, "vp") or 1


#: Cells that ask for a degree to fill what the others leave (MaxText's -1: "auto-sharded").
AUTO_WORDS = ("auto", "-1", "rest", "remaining")


def _auto_degree(row: Mapping, column: str, gpus: int, others: int, notes: list[str], fill_blank: bool = False) -> int:
    """A degree cell, or where it says "auto" / -1 (MaxText's ``ici_fsdp_parallelism: -1``),
    or is blank (or absent) and ``fill_blank`` (dp), the only degree that makes the row's GPUs:
    ``gpus`` over the product of the ``others``."""
    text = cell(row, column)
    blank = blank_cell(text) and fill_blank  # another blank degree stays blank
    if not blank and text.lower() not in AUTO_WORDS:
        return count(row, column)
    degree, left = divmod(gpus, others)
    if blank:
        if left:
            raise PrismError(f"{column}: blank, and num_gpus={gpus} is not a multiple of tp·pp·cp={others}; write "
                             f"the degree ({BY_NAME[column].meaning})", field=column)
        notes.append(f"{column}: blank, read as {degree} (num_gpus / tp·pp·cp, the only value that makes the row's "
                     f"GPUs)")
        return degree
    if left:
        raise PrismError(f"{column}={text!r}: the GPUs left over, num_gpus={gpus} / {others}, are not whole; "
                         f"write the degree", field=column)
    notes.append(f"{column} {text!r} read as {degree} (num_gpus / the other degrees)")
    return degree


_FSDP_DEGREE = re.compile(r"(?:(?:ici|dcn)_)?fsdp(?:_parallelism)?\s*(?:[=:]|degree)?\s*(\d+)", re.IGNORECASE)


def _data_parallel(row: Mapping, dp: int, model_parallel: int, gpus: int, notes: list[str]) -> tuple[int, int | None]:
    """(data-parallel degree, FSDP degree or None) of a row that may write MaxText's sharding:
    an FSDP degree (the ``fsdp`` column, or "FSDP=8" / "ici_fsdp_parallelism=64" in the
    zero_or_distopt cell) beside a dp of its other data-parallel axis. Data parallelism is
    dp·fsdp where that makes the GPUs the row states (MaxText's data and fsdp axes are both
    data parallel, the fsdp one sharded); a dp that already counts the FSDP ranks stays."""
    flag = cell(row, "fsdp").lower()
    if flag in OFF_WORDS or flag in ON_WORDS:  # a switch (Megatron-Bridge's tables write FSDP 0 or 1), not a degree
        if flag in ON_WORDS:
            notes.append(f"fsdp {cell(row, 'fsdp')!r} read as on: dp={dp} sharded (FSDP)")
            return dp, dp
        return dp, None
    fsdp = _auto_degree(row, "fsdp", gpus, dp * model_parallel, notes) if flag else None
    if fsdp is None and dp * model_parallel != gpus:
        found = _FSDP_DEGREE.search(cell(row, "zero_or_distopt"))
        fsdp = int(found.group(1)) if found and int(found.group(1)) > 1 else None
    if not fsdp or fsdp == 1:
        return dp, None
    if dp * fsdp * model_parallel == gpus and dp * model_parallel != gpus:
        notes.append(f"dp={dp * fsdp} (dp={dp} x fsdp={fsdp}: the fsdp degree is sharded data parallelism)")
        return dp * fsdp, fsdp
    return dp, fsdp


def _global_batch(row: Mapping, dp: int, seq: int, notes: list[str]) -> int:
    """The row's global batch in sequences: its gbs cell, else worked out from the sequences
    each data-parallel rank takes (``batch_per_dp`` x ``dp``) or the tokens a step takes
    (``tokens_per_step`` / ``seq``, a suffix M or k binary where that makes whole sequences,
    else decimal: "16M" tokens of 8,192 are 2,048 sequences)."""
    given = [c for c in ("gbs", *INSTEAD["gbs"]) if not blank_cell(cell(row, c))]
    if not given:
        raise PrismError("gbs: blank; fill it in (global batch, sequences per step), or give batch_per_dp "
                         "(sequences per data-parallel rank) or tokens_per_step", field="gbs")
    if given[0] == "gbs":
        return count(row, "gbs")
    if given[0] == "batch_per_dp":
        gbs = count(row, "batch_per_dp") * dp
        notes.append(f"gbs={gbs} (blank: batch_per_dp={count(row, 'batch_per_dp')} x dp={dp})")
        return _checked_gbs(gbs, "batch_per_dp", row)
    text = cell(row, "tokens_per_step")
    gbs = plain.whole_sequences(text, seq)
    if gbs is None:
        raise PrismError(f"tokens_per_step={text!r}: not a whole number of {seq}-token sequences; give the token "
                         f"count ('4194304', '4M') or the gbs column (global batch, sequences)",
                         field="tokens_per_step")
    notes.append(f"gbs={gbs} (blank: tokens_per_step {text!r} / seq_len {seq})")
    return _checked_gbs(gbs, "tokens_per_step", row)


def _checked_gbs(gbs: int, column: str, row: Mapping) -> int:
    """``gbs`` worked out from ``column``, held to the gbs column's limit."""
    if gbs > BY_NAME["gbs"].limit:
        raise PrismError(f"{column}={cell(row, column)!r}: makes a global batch of {gbs:,} sequences, more than "
                         f"{BY_NAME['gbs'].limit:,}; check the value", field=column)
    return gbs


def row_workload(row: Mapping, hardware: dict) -> RowJob:
    """The model, layout, hardware and GPU count of a table row (a pandas Series or a
    mapping of column to cell), read by :mod:`predictor.data.runs_table`; ``hardware``
    caches profiles and their per-row variants, so rows on the same hardware share one
    object. One :class:`PrismError` naming the column where a cell cannot be read or the
    layout cannot run."""
    notes: list[str] = []
    row = with_columns(row)  # a header that spells a column as a framework's configuration does
    for column in ("seq_len", "gbs", "mbs", "num_gpus", "dp", "tp", "pp", "cp", "ep"):
        text = cell(row, column)
        if re.fullmatch(r"\d+(\.\d+)?\s*[kK]", text):  # a binary k is what the reader assumes
            notes.append(f"{column} {text!r} read as {plain.plain_number(text)} (k = 1,024)")
    model = row_model(row, notes)
    framework = cell(row, "framework")
    family = framework_family(framework)
    if not framework:
        notes.append(f"framework: blank, read as {default_framework().name}")
    if framework and not family and not says(framework.lower(), *(w for s in all_frameworks()
                                                                   for w in s.uncertainty_cells)):
        notes.append(next(s for s in all_frameworks() if s.blank_fallback).unknown_note.format(
            framework=repr(framework)))
    spec = _spec(family)
    # the framework the cell names (Megatron-Bridge, not its family Megatron-Core): its recipes' defaults
    own = (table_framework(framework) if framework else None) or spec
    tp, pp, gpus = (count(row, c) for c in ("tp", "pp", "num_gpus"))
    mbs, cp, ep = (count(row, c) or 1 for c in ("mbs", "cp", "ep"))
    dp = _auto_degree(row, "dp", gpus, tp * pp * cp, notes, fill_blank=True)
    vp = _virtual_stages(row, family, notes)
    ones = [c for c in ("mbs", "cp", "ep", "vp") if not cell(row, c)]
    if ones:
        notes.append(", ".join(f"{c}=1" for c in ones) + " (blank)")
    dp, fsdp = _data_parallel(row, dp, tp * pp * cp, gpus, notes)
    gbs = _global_batch(row, dp, model.seq_length, notes)
    sp = switch(row, "seq_parallel")
    if sp is None:
        layout = types.SimpleNamespace(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
        required = next((r for r in spec.requires if r.field == "sequence_parallel" and r.holds(layout)), None)
        if required:  # the only value the framework allows
            sp = True
            notes.append(f"seq_parallel: blank, read as on ({required.message})")
        else:
            sp = own.sequence_parallel_default == "with_tp" and tp > 1
            notes.append(_default_note("seq_parallel", "on" if sp else "off", family)
                         if own.sequence_parallel_default == spec.sequence_parallel_default else
                         f"seq_parallel={'on' if sp else 'off'} (blank: {own.display}'s recipes turn it on "
                         f"with tp > 1)")
    # a blank choice cell takes the defaults of the file the cell names (NeMo's sharded optimizer), else its family's
    named = own.name
    if _names_modules_only(cell(row, "recompute")):
        notes.append(f"recompute {cell(row, 'recompute')!r} read as selective (it names Megatron-Core's "
                     f"--recompute-modules only)")
        recompute, note = framework_recompute("selective", family)
    else:
        recompute, note = framework_recompute(_chosen(row, "recompute", RECOMPUTES, "none", named, notes), family)
    if note:
        notes.append(note)
    partial = re.search(r"\bblock\b\D*(\d+)\s*layers?", cell(row, "recompute"), re.IGNORECASE)
    if recompute == "full" and partial:  # Megatron's block method recomputes that many layers of each stage
        notes.append(f"recompute {cell(row, 'recompute')!r}: the block method recomputes {partial.group(1)} layers of "
                     f"each pipeline stage; PRISM prices every layer recomputed (an upper bound)")
    if fsdp and not cell(row, "zero_or_distopt"):
        sharding = "fsdp"
        notes.append("zero_or_distopt=fsdp (blank: the fsdp degree shards weights, gradients and optimizer states)")
    else:
        sharding = _chosen(row, "zero_or_distopt", SHARDINGS, "none", named, notes)
    # the spec's defaults.overlap_grad_reduce: Megatron-LM before Megatron-Core (2023) reduced DP
    # gradients after the backward (--overlap-grad-reduce came with Core) and ran attention
    # unfused (baddbmm, fused scale-mask-softmax, bmm) rather than FlashAttention (its attention).
    text = f"{framework} {cell(row, 'notes')}"
    tp_overlap = says(text, "tp-comm-overlap", "tp comm overlap", "tp_comm_overlap", "asynctp", "async tp", "async-tp")
    if tp_overlap:
        notes.append("TP collectives overlapped (framework or notes say async TP / --tp-comm-overlap)")
    elif own.overlap_tp_comm and tp > 1 and sp:
        tp_overlap = True
        notes.append(f"TP collectives overlapped ({own.display}'s recipes turn tp_comm_overlap on with tp > 1)")
    loss_fusion = spec.reads_loss_fusion and _loss_fused(text)
    if loss_fusion:
        notes.append("loss fused (NeMo's default cross_entropy_loss_fusion, or the notes say so)")
    hw_key = _hardware_key(row, framework, hardware, notes)
    if hw_key not in hardware:
        hardware[hw_key] = _row_hardware(hw_key, hardware[hw_key[0]])
    attention = _attention(family, hardware[hw_key], text, notes)
    graphs = says(text, "cuda graph", "cuda graphs", "cuda_graph", "cudagraph", "cudagraphs", "cuda-graph") and \
        hardware[hw_key].device.kind == "gpu"
    if graphs:
        notes.append("CUDA graphs (the text says so): each pass's host work is one graph launch a layer")
    par = ParallelConfig(
        dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vp, schedule="interleaved" if vp > 1 else "1f1b",
        sequence_parallel=sp, micro_batch_size=mbs, global_batch_size=gbs, recompute=recompute, sharding=sharding,
        overlap_grad_reduce=spec.overlap_grad_reduce, overlap_tp_comm=tp_overlap, loss_fusion=loss_fusion,
        cuda_graphs=graphs,
        attention=attention, mtp_layers=_mtp_layers(model, text, notes),
        **_expert_settings(model, row, text, notes, own),
        recompute_modules=_recompute_modules(cell(row, "recompute"), recompute, notes))
    try:
        validate_layout(model, par, gpus)
    except PrismError as exc:
        raise in_table_terms(exc) from None
    return RowJob(model, par, hardware[hw_key], gpus, notes,
                  (tuple(vars(model).values()), tuple(vars(par).values()), hw_key, gpus, framework), framework)


#: How a runs table names Megatron's fused loss (--cross-entropy-loss-fusion).
LOSS_FUSION = ("cross-entropy-loss-fusion", "cross_entropy_loss_fusion", "cross entropy fusion",
               "cross-entropy fusion", "loss fusion", "fused cross entropy", "fused cross-entropy")


def _loss_fused(text: str) -> bool:
    """Whether a Megatron-Core row fused its loss: as its text says, else by its framework's
    default (NeMo's GPTConfig and Megatron-Bridge's GPT provider turn it on; Megatron-LM's
    flag is off)."""
    named = mentions(text, {"fused": LOSS_FUSION})
    if named:
        return not named[0][1]
    return says(text, *(w for s in all_frameworks() if s.loss_fusion for w in s.table_cells))


#: How a row's framework or notes text names FlashAttention's Triton kernel (llm-foundry's
#: ``attn_config.attn_impl: triton``, MPT's benchmark configs).
TRITON_ATTENTION = ("attn_impl: triton", "attn_impl=triton", "attn_impl triton", "triton flash attention",
                    "flash attention (triton)", "flashattention triton")


def _attention(family: str, hw: HardwareConfig, text: str, notes: list[str]) -> str:
    """The attention kernel of a row: FlashAttention's Triton kernel where its text names it
    (:data:`TRITON_ATTENTION`), else its framework's own on its GPU (:func:`attention_kernel`)."""
    if hw.device.kind == "gpu" and says(text.lower(), *TRITON_ATTENTION):
        notes.append("attention flash_triton (FlashAttention's Triton kernel: the row says attn_impl triton)")
        return "flash_triton"
    kernel = attention_kernel("auto", family, hw)
    if kernel == "cudnn":
        notes.append(f"attention cudnn (Transformer Engine's choice on compute capability "
                     f"{hw.device.compute_capability:g})")
    return kernel


#: Words of a recompute cell naming Megatron-Core's --recompute-modules (model zoo scripts
#: write "norm, act" for layernorm and moe_act).
MODULE_WORDS = {"core_attn": "core_attn", "attn": "core_attn", "layernorm": "layernorm", "norm": "layernorm",
                "mlp": "mlp", "moe": "moe", "moe_act": "moe_act", "act": "moe_act", "shared_expert": "shared_experts",
                "shared_experts": "shared_experts", "up_proj": "mla_up_proj", "mla_up_proj": "mla_up_proj"}


def _module_words(text: str) -> tuple[list[str], list[str]]:
    """The words of a recompute cell's text, and the Megatron-Core modules among them (:data:`MODULE_WORDS`)."""
    words = re.findall(r"[a-z_]+", text.lower())
    return words, [MODULE_WORDS[w] for w in words if w in MODULE_WORDS]


def _names_modules_only(text: str) -> bool:
    """Whether a recompute cell is a list of modules and nothing else ("mlp", "['core_attn', 'mlp']",
    as Megatron-Bridge's recipes write ``recompute_modules``): selective recompute of those."""
    words, modules = _module_words(text)
    return bool(words) and len(modules) == len(words)


def _recompute_modules(text: str, recompute: str, notes: list[str]) -> str:
    """The modules a selective recompute cell names (:data:`MODULE_WORDS`): after "selective:",
    or the whole cell where it names modules only; as ``parallel.recompute_modules``, empty
    where it names none (the attention core)."""
    if recompute != "selective":
        return ""
    _, named = _module_words(text if _names_modules_only(text) else text.partition(":")[2])
    modules = ",".join(dict.fromkeys(named))
    if modules:
        notes.append(f"recompute_modules={modules} (Megatron-Core --recompute-modules the cell names)")
    return modules


def _mtp_layers(model: ModelConfig, text: str, notes: list[str]) -> int:
    """Multi-token prediction modules a row trains (``parallel.mtp_layers``): the count its text
    gives ("MTP=2", "2 MTP layers"), the architecture's own (``model.mtp_layers``) where it names
    MTP without one, none where it says so ("no MTP", "mtp_num_layers=0") or names none.

    A row that names none takes none, though NeMo's and Megatron-Bridge's DeepSeek-V3 recipes
    train the one module the architecture defines (NeMo's pretrain_recipe(use_mtp=True);
    Bridge's cfg.model.mtp_num_layers = 1): their pipeline layouts give the module and the loss
    slots of their own (``pipeline_model_parallel_layout``), which PRISM's even split cannot hold,
    and with it the module priced the last stage of DeepSeek-V3 on pp=8 40% heavier than the rest."""
    low = text.lower()
    if not re.search(r"\bmtp|multi-token prediction", low):
        return 0
    if re.search(r"\b(no|without|disabled?|off)\b[^.;,]{0,20}\bmtp\b|\bmtp\b[^.;,]{0,12}\b(off|disabled?|none)\b"
                 r"|mtp_num_layers\W{0,3}(0|none)\b", low):
        notes.append("mtp_layers=0 (the text says no multi-token prediction)")
        return 0
    count = re.search(r"mtp(?:_num_layers)?\s*[=:]\s*(\d+)|(\d+)\s*mtp\b", low)
    layers = int(next(g for g in count.groups() if g)) if count else (model.mtp_layers or 1)
    notes.append(f"mtp_layers={layers} (the text names multi-token prediction)")
    return layers


def _expert_settings(model: ModelConfig, row: Mapping, text: str, notes: list[str], own: FrameworkSpec) -> dict:
    """A MoE row's expert settings from its etp column and its framework and notes text: expert
    tensor parallelism (the column, else 'ETP=1', 'ETP1'; blank: 1, Megatron's MoE model zoo and torchtitan),
    forced balanced routing ('forced load balancing', Megatron
    --moe-router-force-load-balancing), the allgather dispatcher where named (AlltoAll,
    DeepEP and HybridEP move the same tokens: alltoall) and a capacity factor ('capacity
    factor 1.25'; blank: dropless, Megatron-Core's default). Empty for a dense model."""
    if not model.num_experts:
        return {}
    found = re.search(r"\betp\s*=?\s*(\d+)", text, re.IGNORECASE)
    etp = _given(row, "etp") or (int(found.group(1)) if found else 1)
    if not found and _given(row, "etp") is None:
        notes.append("etp=1 (not stated: Megatron MoE model zoo's and torchtitan's expert tensor parallelism)")
    force = says(text, "forced load balancing", "forced load balance", "force load balancing", "forced balancing",
                 "force-load-balancing", "moe-router-force-load-balancing")
    if force:
        notes.append("balanced routing forced (notes: --moe-router-force-load-balancing)")
    elif own.moe_force_balance and not says(text, "real routing", "unforced", "natural routing"):
        force = True
        notes.append(f"balanced routing forced ({own.display}'s performance recipes set "
                     f"moe_router_force_load_balancing; notes that say 'real routing' turn it off)")
    capacity = re.search(r"capacity[ _-]factor\s*=?\s*(\d+(?:\.\d+)?)", text, re.IGNORECASE)
    gather = says(text, "allgather dispatcher", "all-gather dispatcher", "dispatcher allgather")
    flex = says(text, "deepep", "hybridep", "flex")
    dispatcher = "allgather" if gather else "flex" if flex else "alltoall"
    notes.append(f"moe_dispatcher={dispatcher}" + (" (DeepEP/HybridEP named)" if flex else ""))
    overlap = says(text, "a2a_overlap=1", "a2a overlap", "ep a2a overlap", "overlap-moe-expert-parallel-comm")
    if overlap:
        notes.append("expert-parallel all-to-alls overlapped (notes: A2A overlap)")
    return dict(etp=etp, moe_force_balance=force, moe_capacity_factor=float(capacity.group(1)) if capacity else 0.0,
                moe_dispatcher=dispatcher, overlap_ep_comm=overlap)


def row_gemm_ops(text) -> tuple[str, ...]:
    """The GEMMs a precision cell converts to its low precision: both kinds
    (:data:`~predictor.core.precision.LOW_PRECISION_OPS`), unless it says only one:
    "MXFP8 for Grouped GEMMs only" (the experts), "MXFP8 for Linears only" (the dense linears)."""
    low = cell({"precision": text}, "precision").lower()
    if re.search(r"(?<![a-z])only(?![a-z])", low):
        grouped, linears = "grouped" in low, "linear" in low
        if grouped and not linears:
            return ("grouped_gemm",)
        if linears and not grouped:
            return ("gemm",)
    return LOW_PRECISION_OPS


def _hardware_key(row: Mapping, framework: str, hardware: dict, notes: list[str]) -> tuple:
    """(profile, train dtype, GEMM dtype, GPUs per node, inter-node bytes/s or None, the
    GEMMs in the GEMM dtype, the memory GiB the GPU's name states where it is not the
    profile's, else None): what a row changes of its hardware profile, which is loaded
    into ``hardware`` by name."""
    name = row_hardware(cell(row, "gpu"))
    if name not in hardware:
        hardware[name] = load_hardware(name)
    memory = stated_memory_gib(cell(row, "gpu"))
    if memory == hardware[name].memory.capacity_gib:
        memory = None
    if not names_profile(cell(row, "gpu"), name):  # "A100 40GB", "H100 PCIe": a variant the profile may not be
        profile = hardware[name]
        notes.append(f"gpu {cell(row, 'gpu')!r} read as {name} ({profile.device.name}"
                     + (f", its memory {memory:g} GiB as the name says, the rest the profile's)" if memory else
                        f", {profile.memory.capacity_gib:g} GiB)"))
    text = cell(row, "precision")
    train, gemm = row_precision(text, framework)
    if not text or asks_default(text):
        notes.append(_default_note("precision", "fp32" if train == "float32" else "bf16", framework_family(framework),
                                   text))
    elif text.lower() not in (p for spellings in PRECISIONS.values() for p in spellings):
        scope = {("gemm",): " (linears only)", ("grouped_gemm",): " (experts' grouped GEMMs only)"}
        notes.append(f"precision {text!r} read as {train}"
                     + (f" with {gemm} GEMMs{scope.get(row_gemm_ops(text), '')}" if gemm != train else ""))
    gpn = count(row, "gpus_per_node")
    if gpn is None:
        notes.append(f"gpus_per_node={hardware[name].node.gpus_per_node} (blank: {name}'s)")
    # the node's own fabric (NVLink/NVSwitch) comes with the GPU system and stays the
    # profile's; the network between nodes is the cluster's, so the row's figure rules
    inter, note = bandwidth(row, "inter_node", gpn or hardware[name].node.gpus_per_node)
    if inter is None:
        notes.append(note or f"inter_node={hardware[name].network.name} (blank: {name}'s network)")
    elif note:
        notes.append(note)
    return name, train, gemm, gpn, inter, row_gemm_ops(text), memory


def _row_hardware(key: tuple, profile: HardwareConfig) -> HardwareConfig:
    """``profile`` as a row changes it (:func:`_hardware_key`)."""
    name, train, gemm, gpn, inter, gemm_ops, memory = key
    hw = copy.deepcopy(profile)
    hw.gemm_ops = list(gemm_ops)
    try:  # a precision the GPU has no tensor-core path for (nvfp4 on H100) is refused, not replaced
        hw.train_dtype, hw.gemm_dtype = train, check_gemm_dtype(name, gemm, hw.peak_flops) if gemm != train else None
    except PrismError as exc:
        raise PrismError(f"precision: {exc}", field="precision") from None
    if gpn is not None:
        hw.node.gpus_per_node = gpn
    if inter is not None:
        hw.network.inter_node.bandwidth = inter
    if memory is not None:  # what fits is judged against the card the row ran on
        hw.memory.capacity_gib = memory
    return hw
