"""Import the estimate-train-time (ETT) sample layout into the sample store.

ETT (arXiv 2509.22832; https://github.com/DebarghaG/estimate-train-time, MIT) profiled
GPT-style Megatron operators and NCCL collectives on Perlmutter (A100-SXM4-80GB) and
Vista (GH200). Its published layout, one folder per cluster::

    <cluster>/operator/<GPU>_<function>_fp16.csv        shape columns, F_dur(us), B_dur(us)
                                                         (optimizers: dur(us); not imported,
                                                         see LEFT_OUT)
    <cluster>/nccl/<GPU>_<function>_fp16[_<nodes>_<gpus per node>].csv
                                                         shape, nodes, GPUsPerNode, dur(us)
    <cluster>/{operator,nccl}/<GPU>.csv                  the authors' regressor per function
                                                         and its error (see ett_baseline)

:func:`import_ett` maps every measurement onto PRISM's vocabulary and writes one run
``ett-<cluster>`` with :func:`predictor.data.store.write_run`. Each row keeps its origin,
``ett:<cluster>/<function>`` (e.g. ``ett:Perlmutter/linear1``), so an evaluation can group
by the ETT function. Every mapping below was read from ETT's sampling code; the comment
beside each names the file. Paths are in DebarghaG/estimate-train-time unless marked
"GPUModeling25": the authors' earlier repository Littlesnakess/GPUModeling25 holds the
files ETT's code imports but does not ship (the ``megatron.stage_simulator`` models and
the NCCL sampler) together with the same CSVs.

What one ETT value is (Kernel_sampling/sampling_controller.py, ``data_collect_one``):
each shape is profiled 10 times (``active: 10`` in every collect config) with the torch
profiler; the latency of one run is the GPU span from the first to the last kernel of the
target op (``sampling_tools.get_GPU_runtime_list``); the stored value is
``np.mean(sorted(runs)[2:7])``, the mean of the 3rd-7th fastest. So a row is one summary
value per shape, not a timed repeat. ``repeat`` numbers the rows of one function that land
on the same PRISM shape (0, then 1, 2, ...): distinct ETT shapes can be the same kernel
(b=2, l=2048 and b=4, l=1024 are both a gemm with m=4096), and a file may list a shape
twice (Perlmutter flash_atten: 41 shapes). Collectives are timed on rank 0 only (GPUModeling25
NCCL_sampling/sampling_controller.py), not on the slowest rank as PRISM's own sampler does.

Data decisions (documented in the run metadata too):

- A sample file of a known function that cannot be parsed, lacks a column or holds no row
  is an error (nothing is written): a silently missing operator would bias everything trained on it.
  A file of a function PRISM has no op for, and a non-CSV file, is skipped with a reason.
- A row whose shape is missing, non-numeric, non-integer, not positive, or violates
  ETT's own divisibility rules (h % mp, dim % h, dim % mp) is skipped; so is a pass whose
  duration is missing, zero or negative. Skipped rows are counted per file and reason.
- NCCL: the pooled file (no ``_<nodes>_<gpn>`` suffix) and the per-topology files share
  most measurements (same shape, topology and duration) and each also holds rows the
  other lacks. Every distinct measurement is imported once: the per-topology rows, then
  the pooled rows not among them. :attr:`ImportReport.nccl_overlap` gives the counts.
- A row more than 100x slower (floor-relative) than the median row of its function and
  pass is a failed measurement and is skipped (counted in the skipped rows). A row
  faster than half the hardware profile's roofline floor is imported unchanged but listed
  in :attr:`ImportReport.suspect` and the run metadata.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.ops import DTYPE_BYTES, OPS, SHAPE_COLUMNS
from predictor.core.profiles import load_hardware, match_hardware
from predictor.core.specs import HardwareConfig
from predictor.data import store
from predictor.data.importers import earlier_import, read_csv, sources_digest
from predictor.latency.features import floor_us

ETT_REPOSITORY = "https://github.com/DebarghaG/estimate-train-time"
ETT_PAPER = "arXiv 2509.22832"
IMPORTER_VERSION = 1
IMPORTER = "predictor.data.importers.ett"

_PRECISION = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
_SAMPLE_FILE = re.compile(r"^(?P<gpu>[^_]+)_(?P<function>.+?)_(?P<precision>fp16|bf16|fp32)"
                          r"(?:_(?P<nodes>\d+)_(?P<gpn>\d+))?\.csv$")
_SUMMARY_FILE = re.compile(r"^(?P<gpu>[^_]+)\.csv$")

# Suspect-row thresholds (see the module docstring).
_FASTER_THAN_FLOOR = 0.5
_SLOWER_THAN_MEDIAN = 100.0

# --------------------------------------------------------------------------------------
# Operator mappings. ``d`` holds the ETT shape columns of a file as int64 arrays.
# --------------------------------------------------------------------------------------

#: GPT-2's vocabulary, hard-coded in Kernel_sampling/target_functions.py (linear_final,
#: parallel_cross_entropy_128, embedding).
GPT2_VOCAB = 50257


def partition_vocab(mp):
    """Megatron's padded vocabulary shard: ``ceil(50257 / (128 * mp)) * 128``.

    Kernel_sampling/target_functions.py (``partition_vocab_size``) and
    Estimator/.../layer_input_to_predictor_input.py: ETT pads the vocabulary to a multiple
    of 128 * mp and gives each tensor-parallel rank ``vocab / mp`` of it.
    """
    return -(-GPT2_VOCAB // (128 * mp)) * 128


_FIRST_STEP = ("the first step of a fresh FusedAdam (its state created per tensor inside the timed span), "
               "not a training step's")
#: ETT functions deliberately not imported, and why.
LEFT_OUT = {
    # A whole-model optimizer step (num_layers, hidden_size, param_tensors, params, dur):
    # neither ETT repository has its sampling code, and per parameter it runs 10-16x slower
    # than the stage optimizer files (FusedAdam), so it is some other optimizer setup that
    # we cannot name; mixed in as adamw it would corrupt the optimizer_step model.
    "optimizer": "whole-model optimizer of unknown setup (no sampling code; 10-16x slower per "
                 "parameter than the FusedAdam stage optimizers)",
    # The stage optimizers time a first step, not the step a training run repeats: each of
    # the ten profiled runs calls the target function, which builds a fresh model and a fresh
    # DeepSpeed FusedAdam and calls step() once (GPUModeling25 Kernel_sampling/
    # target_functions.py *Stage_optimizer; sampling_controller.py profiler_create_one), and
    # FusedAdam.step() creates each parameter's exp_avg and exp_avg_sq with zeros_like on its
    # first call (deepspeed/ops/adam/fused_adam.py). The span timed, first to last kernel in
    # the step (tools.get_GPU_runtime_list), holds that set-up under a profiler recording
    # stacks and memory: fitted over the three Perlmutter files, 46 us per tensor + 19 ns per
    # parameter, 10x the roofline floor at a tensor-parallel shard's 0.2M parameters per
    # tensor, where the steady step of torch's fused AdamW sampled on an H100 (samples/h100)
    # runs at 1.0-1.3x its floor.
    "firstStage_optimizer": _FIRST_STEP,
    "middleStage_optimizer": _FIRST_STEP,
    "lastStage_optimizer": _FIRST_STEP,
}

@dataclass(frozen=True)
class _Function:
    op: str
    columns: tuple[str, ...]            # ETT shape columns
    shape: Callable[[dict], dict]       # ETT shape arrays -> PRISM shape columns
    durations: dict[str, tuple[str, ...]]  # pass -> accepted duration column names
    source: str                         # where the mapping was read (ETT repository paths)
    divisible: tuple[tuple[str, str], ...] = ()   # (a, b): rows need a % b == 0


_FB = {"fwd": ("F_dur(us)",), "bwd": ("B_dur(us)",)}
_TF = "Kernel_sampling/target_functions.py"
_MAP = "GPUModeling25 3D_parallelism_prediction/layer_input_to_predictor_input.py"
_MHD = (("h", "mp"), ("dim", "h"), ("dim", "mp"))  # the ValueError checks of target_functions.py


def _gemm(m, k, n):
    return {"m": m, "n": n, "k": k}


OPERATORS: dict[str, _Function] = {
    # nn.Linear(dim, 3*dim//mp) on [l, b, dim]: Y[b*l, 3d/mp] = X[b*l, d] W; bwd target
    # AddmmBackward0 = dX and dW together, as PRISM's gemm bwd.
    "linear1": _Function("gemm", ("mp", "b", "l", "dim"),
                         lambda d: _gemm(d["b"] * d["l"], d["dim"], 3 * d["dim"] // d["mp"]), _FB,
                         f"{_TF} linear1; configs/collect/linear1.yml; {_MAP} linear1", (("dim", "mp"),)),
    # nn.Linear(dim//mp, dim): attention output projection (row-parallel).
    "linear2": _Function("gemm", ("mp", "b", "l", "dim"),
                         lambda d: _gemm(d["b"] * d["l"], d["dim"] // d["mp"], d["dim"]), _FB,
                         f"{_TF} linear2; {_MAP} linear2", (("dim", "mp"),)),
    # nn.Linear(dim, 4*dim//mp): FFN up (column-parallel).
    "linear3": _Function("gemm", ("mp", "b", "l", "dim"),
                         lambda d: _gemm(d["b"] * d["l"], d["dim"], 4 * d["dim"] // d["mp"]), _FB,
                         f"{_TF} linear3; {_MAP} linear3", (("dim", "mp"),)),
    # nn.Linear(4*dim//mp, dim): FFN down (row-parallel).
    "linear4": _Function("gemm", ("mp", "b", "l", "dim"),
                         lambda d: _gemm(d["b"] * d["l"], 4 * d["dim"] // d["mp"], d["dim"]), _FB,
                         f"{_TF} linear4; {_MAP} linear4", (("dim", "mp"),)),
    # nn.Linear(dim, partition_vocab(mp)): the output head over one vocabulary shard
    # (50257 padded to a multiple of 128*mp, then / mp), not vocab/mp.
    "linear_final": _Function("gemm", ("mp", "b", "l", "dim"),
                              lambda d: _gemm(d["b"] * d["l"], d["dim"], partition_vocab(d["mp"])), _FB,
                              f"{_TF} linear_final; configs/collect/linear_final.yml; {_MAP} linear_final"),
    # torch.baddbmm(c, q[b*h/mp, l, d/h], k[b*h/mp, d/h, l]) = QK^T.
    "baddbmm": _Function("bmm", ("mp", "b", "h", "l", "dim"),
                         lambda d: {"batch": d["b"] * (d["h"] // d["mp"]), "m": d["l"], "n": d["l"],
                                    "k": d["dim"] // d["h"]}, _FB,
                         f"{_TF} baddbmm; GPUModeling25 configs/collect/baddbmm.yml; {_MAP} baddbmm", _MHD),
    # torch.bmm(score[b*h/mp, l, l], v[b*h/mp, l, d/h]) = PV.
    "bmm": _Function("bmm", ("mp", "b", "h", "l", "dim"),
                     lambda d: {"batch": d["b"] * (d["h"] // d["mp"]), "m": d["l"], "n": d["dim"] // d["h"],
                                "k": d["l"]}, _FB, f"{_TF} bmm; {_MAP} bmm", _MHD),
    # flash_attn_func(Q, K, V) with Q, K, V [b, l, h/mp, d/h] and flash-attn's default
    # causal=False: ETT timed NON-causal attention (no causal argument is passed).
    "flash_atten": _Function("attention", ("mp", "b", "h", "l", "dim"),
                             lambda d: {"batch": d["b"], "heads": d["h"] // d["mp"], "kv_heads": d["h"] // d["mp"],
                                        "seq_q": d["l"], "seq_kv": d["l"], "head_dim": d["dim"] // d["h"],
                                        "causal": False}, _FB,
                             f"{_TF} flash_atten; configs/collect/flash_atten.yml", _MHD),
    # nn.Softmax(dim=-1) on [b, h/mp, l, l]: no mask.
    "softmax": _Function("softmax", ("mp", "b", "h", "l"),
                         lambda d: {"batch": d["b"], "heads": d["h"] // d["mp"], "seq_q": d["l"], "seq_kv": d["l"],
                                    "causal": False}, _FB,
                         f"{_TF} softmax; GPUModeling25 configs/collect/softmax.yml", (("h", "mp"),)),
    # Megatron's fused scaled_upper_triang_masked_softmax_cuda on [b*h/mp, l, l].
    "ScaledUpperTriangMaskedSoftmax": _Function(
        "softmax", ("mp", "b", "h", "l"),
        lambda d: {"batch": d["b"], "heads": d["h"] // d["mp"], "seq_q": d["l"], "seq_kv": d["l"], "causal": True},
        _FB, f"{_TF} ScaledUpperTriangMaskedSoftmax", (("h", "mp"),)),
    # att_score.masked_fill_(mask, 0) on [b, h/mp, l, l]; fwd target aten::masked_fill_, bwd
    # the CopySlices/AsStridedBackward0 of that in-place fill (configs/collect/fillmask.yml).
    "fillmask": _Function("masked_fill", ("mp", "b", "h", "l", "dim"),
                          lambda d: {"batch": d["b"], "heads": d["h"] // d["mp"], "seq_q": d["l"], "seq_kv": d["l"]},
                          _FB, f"{_TF} fillmask; src/.../collect/fillmask.yml", _MHD),
    # apply_rotary_pos_emb(q, k, cos, sin) rotates q AND k, each [l, b, h/mp, d/h], in the
    # one timed call (GPUModeling25 Kernel_sampling/megatron/RoPE.py, configs/collect/
    # RoPE.yml). PRISM's rope rotates q or k, so one ETT call = heads 2*h/mp.
    "RoPE": _Function("rope", ("mp", "b", "h", "l", "dim"),
                      lambda d: {"tokens": d["b"] * d["l"], "heads": 2 * (d["h"] // d["mp"]),
                                 "head_dim": d["dim"] // d["h"]}, _FB,
                      f"{_TF} RoPE; GPUModeling25 Kernel_sampling/megatron/RoPE.py", _MHD),
    # F.gelu on [l, b, 4*dim/mp].
    "gelu": _Function("gelu", ("mp", "b", "l", "dim"),
                      lambda d: {"tokens": d["b"] * d["l"], "hidden": 4 * d["dim"] // d["mp"]}, _FB,
                      f"{_TF} gelu; {_MAP} gelu", (("dim", "mp"),)),
    # nn.LayerNorm([dim]) / Megatron RMSNorm(dim) on [l, b, dim]: not sharded by mp.
    "layernorm": _Function("layernorm", ("b", "l", "dim"),
                           lambda d: {"tokens": d["b"] * d["l"], "hidden": d["dim"]}, _FB, f"{_TF} layernorm"),
    "RMSlayernorm": _Function("rmsnorm", ("b", "l", "dim"),
                              lambda d: {"tokens": d["b"] * d["l"], "hidden": d["dim"]}, _FB, f"{_TF} RMSlayernorm"),
    # tensor_a + tensor_b on [l, b, dim]. There is no backward: GPUModeling25 configs/
    # collect/res_add.yml times aten::add for both columns, so B_dur equals F_dur.
    "res_add": _Function("residual_add", ("b", "l", "dim"),
                         lambda d: {"tokens": d["b"] * d["l"], "hidden": d["dim"]}, _FB,
                         f"{_TF} res_add; GPUModeling25 configs/collect/res_add.yml"),
    # nn.Embedding(partition_vocab(mp), dim) looked up with [b, l] token ids.
    "embedding": _Function("embedding", ("mp", "b", "l", "dim"),
                           lambda d: {"tokens": d["b"] * d["l"], "hidden": d["dim"],
                                      "vocab": partition_vocab(d["mp"])}, _FB,
                           f"{_TF} embedding; configs/collect/embedding.yml; {_MAP} embedding"),
    # vocab_parallel_cross_entropy on logits [b, l, partition_vocab(mp)].
    "parallel_cross_entropy_128": _Function(
        "cross_entropy", ("mp", "b", "l"),
        lambda d: {"tokens": d["b"] * d["l"], "vocab": partition_vocab(d["mp"])}, _FB,
        f"{_TF} parallel_cross_entropy_128; GPUModeling25 configs/collect/crossentropy.yml"),
}

# NCCL functions: GPUModeling25 NCCL_sampling/nccl_functions.py and ETT docs/advanced/
# nccl-sampling.md. ``shape`` counts elements of each rank's tensor (fp16: 2 bytes each).
#  - allreduce / allreduce_large: dist.all_reduce of ``shape`` elements: the full vector.
#  - allgather_large: dist.all_gather(gather_list, tensor) with a ``shape``-element INPUT per
#    rank (ETT's estimator passes parameters // dp, mml_3d_prediction.py dp_allgather_cost),
#    so the gathered output PRISM's all_gather counts (vocabulary.BUS_FACTOR) is shape * world.
#  - reducescatter_large: input of ``shape`` elements per rank (PRISM: the input).
#  - p2p: dist.send from rank 0 to rank world-1 of ``shape`` elements.
COLLECTIVES: dict[str, tuple[str, bool]] = {  # function -> (op, shape is per-rank input of a gather)
    "allreduce": ("all_reduce", False),
    "allreduce_large": ("all_reduce", False),
    "allgather_large": ("all_gather", True),
    "reducescatter_large": ("reduce_scatter", False),
    "p2p": ("send_recv", False),
}
_NCCL_COLUMNS = ("shape", "nodes", "GPUsPerNode")
_NCCL_DURATION = ("dur(us)", "dur")


# --------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------

@dataclass
class ImportReport:
    """What :func:`import_ett` wrote, and what it left out and why."""

    run_file: str
    run_id: str
    cluster: str
    hardware: str
    device_name: str
    rows: int
    rows_per_op: dict[str, int]
    rows_per_function: dict[str, int]
    skipped_files: list[dict] = field(default_factory=list)   # {file, reason}
    skipped_rows: list[dict] = field(default_factory=list)    # {file, column, rows, reason}
    nccl_overlap: list[dict] = field(default_factory=list)    # per collective function
    suspect: list[dict] = field(default_factory=list)         # {origin, pass, rows, of, reason}
    elapsed_s: float = 0.0

    def table(self) -> str:
        """The human-readable summary the CLI prints."""
        lines = [f"run file       {self.run_file}",
                 f"hardware       {self.hardware}  (device {self.device_name}, cluster {self.cluster})",
                 f"rows           {self.rows}  ({self.elapsed_s:.2f} s)",
                 "rows per op    " + ", ".join(f"{k} {v}" for k, v in self.rows_per_op.items()),
                 "per function   " + ", ".join(f"{k} {v}" for k, v in self.rows_per_function.items())]
        for o in self.nccl_overlap:
            parts = []
            if o["per_topology_files"]:
                parts.append(f"{o['per_topology_rows']} from {o['per_topology_files']} per-topology file(s)")
            if o["pooled_files"] and o["per_topology_files"]:
                parts.append(f"{o['pooled_only']} more from the pooled file, whose other {o['shared']} rows "
                             f"repeat per-topology rows (same shape, topology and duration: imported once)")
            elif o["pooled_files"]:
                parts.append(f"{o['pooled_rows']} from the pooled file")
            if o["conflicting"]:
                parts.append(f"{o['conflicting']} pooled rows share shape and topology with a per-topology "
                             f"row of another duration (kept: a second measurement)")
            if o["duplicates_dropped"]:
                parts.append(f"{o['duplicates_dropped']} exact duplicate rows dropped")
            lines.append(f"nccl {o['function']:<16} {o['imported']} rows: " + "; ".join(parts))
        for s in self.skipped_files:
            lines.append(f"skipped file   {s['file']}: {s['reason']}")
        for s in self.skipped_rows:
            lines.append(f"skipped rows   {s['file']}: {s['rows']} ({s['reason']})")
        for s in self.suspect:
            lines.append(f"suspect        {s['origin']} {s['pass']}: {s['rows']} of {s['of']} rows {s['reason']}")
        if self.suspect:
            lines.append("               (suspect rows are imported unchanged)")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------

def _cluster_dir(path) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise PrismError(f"{path}: {'a file, not a folder' if root.exists() else 'no such folder'}; pass an ETT "
                         f"cluster folder, e.g. data/ett/Perlmutter", field=str(path))
    if not (root / "operator").is_dir() and not (root / "nccl").is_dir():
        clusters = sorted(p.name for p in root.iterdir()
                          if p.is_dir() and ((p / "operator").is_dir() or (p / "nccl").is_dir()))
        hint = (f"it holds the clusters {', '.join(clusters)}: pass one of them, e.g. {root / clusters[0]}"
                if clusters else "expected operator/ and/or nccl/ with <GPU>_<function>_fp16.csv files")
        raise PrismError(f"{path}: not an ETT cluster folder; {hint}", field=str(path))
    return root


def _read_csv(path: Path) -> pd.DataFrame:
    restore = "restore the file from the ETT artifact or move it out of the folder"
    df = read_csv(path, restore)
    if df.empty:  # its function would be missing from the run without a word
        raise PrismError(f"{path}: only its header line, no rows; {restore}", field=str(path))
    return df


def _require(df: pd.DataFrame, path: Path, columns, function: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise PrismError(f"{path}: missing column(s) {', '.join(missing)} (has {', '.join(df.columns)}); "
                         f"ETT {function} files have {', '.join(columns)}", field=str(path))


def _pick(df: pd.DataFrame, path: Path, names: tuple[str, ...], function: str) -> str:
    for n in names:
        if n in df.columns:
            return n
    raise PrismError(f"{path}: missing duration column {' or '.join(names)} (has {', '.join(df.columns)}); "
                     f"ETT {function} files have one", field=str(path))


def _integers(df: pd.DataFrame, columns, rel: str, skipped: list) -> tuple[dict, np.ndarray]:
    """The shape columns as int64 arrays, and the mask of rows whose shape is valid."""
    ok = np.ones(len(df), dtype=bool)
    values = {}
    for c in columns:
        x = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        good = np.isfinite(x) & (x > 0) & (x == np.round(np.where(np.isfinite(x), x, 0)))
        bad = ok & ~good
        if bad.any():
            skipped.append({"file": rel, "column": c, "rows": int(bad.sum()),
                            "reason": f"column {c}: missing, non-numeric, non-integer or not positive"})
        ok &= good
        values[c] = np.where(good, x, 1).astype(np.int64)
    return values, ok


def _durations(df: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def _skip_bad_durations(lat: np.ndarray, ok: np.ndarray, rel: str, column: str, skipped: list) -> np.ndarray:
    good = np.isfinite(lat) & (lat > 0) & (lat <= MAX_DURATION_US)
    bad = ok & ~good
    if bad.any():
        skipped.append({"file": rel, "column": column, "rows": int(bad.sum()),
                        "reason": f"column {column}: missing, zero, negative or over an hour (no operator's time)"})
    return ok & good


#: No ETT sample of one operator or collective call takes longer (us): an hour is a corrupt
#: duration, and relative screening (:func:`_screen`) cannot see a whole file of them.
MAX_DURATION_US = 3.6e9


# --------------------------------------------------------------------------------------
# Hardware
# --------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------

def _files(root: Path):
    """(kind, path, sample-name match, summary-name match) for each file under operator/ and nccl/."""
    for kind in ("operator", "nccl"):
        folder = root / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.name.startswith("."):  # not a regular file (a folder, a broken link): the caller says so
                yield kind, path, _SAMPLE_FILE.match(path.name), _SUMMARY_FILE.match(path.name)


def _operator_rows(path: Path, rel: str, function: str, spec: _Function, skipped: list) -> pd.DataFrame:
    df = _read_csv(path)
    _require(df, path, spec.columns, function)
    duration_columns = {p: _pick(df, path, names, function) for p, names in spec.durations.items()}
    ett, ok = _integers(df, spec.columns, rel, skipped)
    for a, b in spec.divisible:
        bad = ok & (ett[a] % ett[b] != 0)
        if bad.any():
            skipped.append({"file": rel, "column": a, "rows": int(bad.sum()),
                            "reason": f"{a} not divisible by {b} (ETT's own sampler rejects such shapes)"})
        ok &= ~bad
    shape = {k: (v if isinstance(v, np.ndarray) else np.full(len(df), v)) for k, v in spec.shape(ett).items()}
    frames = []
    for pass_, column in duration_columns.items():
        lat = _durations(df, column)
        keep = _skip_bad_durations(lat, ok, rel, column, skipped)
        frame = pd.DataFrame({k: v[keep] for k, v in shape.items()})
        frame["pass"] = pass_
        frame["latency_us"] = lat[keep]
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out["op"] = spec.op
    out["world_size"], out["ranks_per_node"], out["nodes"] = 1, 1, 1
    out["backend"] = "cuda"
    return out


def _nccl_file(path: Path, rel: str, function: str, topology, skipped: list) -> pd.DataFrame:
    """One NCCL file's valid rows: shape, nodes, gpn (int64), latency_us, file."""
    df = _read_csv(path)
    _require(df, path, _NCCL_COLUMNS, function)
    column = _pick(df, path, _NCCL_DURATION, function)
    v, ok = _integers(df, _NCCL_COLUMNS, rel, skipped)
    if topology is not None:
        bad = ok & ((v["nodes"] != topology[0]) | (v["GPUsPerNode"] != topology[1]))
        if bad.any():
            skipped.append({"file": rel, "column": "nodes", "rows": int(bad.sum()),
                            "reason": f"nodes/GPUsPerNode differ from the file name's {topology[0]}_{topology[1]}"})
        ok &= ~bad
    lat = _durations(df, column)
    ok = _skip_bad_durations(lat, ok, rel, column, skipped)
    return pd.DataFrame({"shape": v["shape"][ok], "nodes": v["nodes"][ok], "gpn": v["GPUsPerNode"][ok],
                         "latency_us": lat[ok], "file": rel})


def _nccl_rows(function: str, dtype: str, files: list, root: Path, skipped: list, overlap: list) -> pd.DataFrame:
    """All distinct measurements of one collective function: per-topology rows + pooled-only rows.

    A measurement is (shape, nodes, GPUsPerNode, duration); the same one found twice (in the
    pooled file and a per-topology file, or twice in one file) is imported once.
    """
    per_topo = [_nccl_file(p, str(p.relative_to(root)), function, topo, skipped) for p, topo in files if topo]
    pooled = [_nccl_file(p, str(p.relative_to(root)), function, None, skipped) for p, topo in files if not topo]
    key = ["shape", "nodes", "gpn"]
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in key} | {"latency_us": pd.Series(dtype=float)})
    topo_df = pd.concat(per_topo, ignore_index=True) if per_topo else empty
    pooled_df = pd.concat(pooled, ignore_index=True) if pooled else empty
    topo_unique = topo_df.drop_duplicates(key + ["latency_us"])
    m = pooled_df.merge(topo_unique[key + ["latency_us"]], on=key + ["latency_us"], how="left", indicator=True)
    new = (m["_merge"] == "left_only").to_numpy()
    extra = pooled_df[new].drop_duplicates(key + ["latency_us"])
    out = pd.concat([topo_unique, extra], ignore_index=True)
    overlap.append({"function": function,
                    "per_topology_files": len(per_topo), "per_topology_rows": len(topo_df),
                    "pooled_files": len(pooled), "pooled_rows": len(pooled_df),
                    "shared": int((~new).sum()), "pooled_only": int(new.sum()),
                    # pooled rows with a per-topology row of the same shape and topology but
                    # another duration: a second measurement, kept
                    "conflicting": int(extra.merge(topo_unique[key].drop_duplicates(), on=key).shape[0]),
                    "duplicates_dropped": (len(topo_df) - len(topo_unique)) + (int(new.sum()) - len(extra)),
                    "imported": len(out)})
    op, gathered = COLLECTIVES[function]
    world = out["nodes"].to_numpy() * out["gpn"].to_numpy()
    elements = out["shape"].to_numpy() * (world if gathered else 1)
    return pd.DataFrame({"op": op, "pass": "step", "message_bytes": elements * DTYPE_BYTES[dtype], "group_size": world,
                         "latency_us": out["latency_us"].to_numpy(), "world_size": world,
                         "ranks_per_node": out["gpn"].to_numpy(), "nodes": out["nodes"].to_numpy(),
                         "backend": "nccl"})


def _screen(df: pd.DataFrame, hw: HardwareConfig, skipped: list) -> tuple[pd.DataFrame, list[dict]]:
    """Drop failed measurements; flag rows faster than the roofline allows.

    Per (origin, pass): a row more than 100x slower, relative to its roofline floor, than
    the median row is a failed measurement and is skipped with a reason. A row faster
    than half the floor (e.g. an operand served from L2) is kept and listed as suspect.
    """
    keep = np.ones(len(df), dtype=bool)
    suspect = []
    for (origin, op, pass_), idx in df.groupby(["origin", "op", "pass"], sort=True).indices.items():
        g = df.iloc[idx]
        ratio = g["latency_us"].to_numpy() / floor_us(op, pass_, g, hw)
        fast = int((ratio < _FASTER_THAN_FLOOR).sum())
        if fast:
            suspect.append({"origin": origin, "pass": pass_, "rows": fast, "of": len(g),
                            "reason": f"faster than {_FASTER_THAN_FLOOR:g}x the {hw.name} roofline floor"})
        slow = ratio > _SLOWER_THAN_MEDIAN * np.median(ratio)
        if slow.any():
            keep[idx[slow]] = False
            skipped.append({"file": origin, "column": "latency_us", "rows": int(slow.sum()),
                            "reason": f"{pass_}: over {_SLOWER_THAN_MEDIAN:g}x slower (floor-relative) than the "
                                      f"median row: a failed measurement"})
    return df[keep].reset_index(drop=True), suspect


def import_ett(path, out_dir) -> ImportReport:
    """Convert one ETT cluster folder into one sample-store run in ``out_dir``.

    Parameters
    ----------
    path : an ETT cluster folder, e.g. ``data/ett/Perlmutter``.
    out_dir : the sample store (a folder of runs) to write ``ett-<cluster>.parquet`` into.

    Returns
    -------
    ImportReport
        run file, rows per PRISM op and per ETT function, skipped files and rows with
        reasons, the NCCL overlap found, and suspect rows.

    Raises
    ------
    PrismError
        for a path that is not a cluster folder, a GPU no hardware profile matches, a
        sample file that cannot be parsed, lacks a column or holds no row, or a run of that
        id already in ``out_dir`` (nothing is written or overwritten then).

    Examples
    --------
    >>> report = import_ett("data/ett/Perlmutter", "samples/ett")  # doctest: +SKIP
    >>> report.rows_per_op["gemm"]                                            # doctest: +SKIP
    """
    started = time.perf_counter()
    out_dir = store.store_folder(out_dir)
    root = _cluster_dir(path)
    cluster = root.resolve().name
    run_id = "ett-" + re.sub(r"[^a-z0-9]+", "-", cluster.lower()).strip("-")
    target = out_dir / f"{run_id}.parquet"
    digest = sources_digest(path for _, path, _, _ in _files(root))
    earlier = earlier_import(target, IMPORTER, IMPORTER_VERSION, digest)  # fails before any work where not ours
    if earlier:  # a rerun of an import that finished: its report, nothing written again
        return ImportReport(**earlier)

    skipped_files, skipped_rows, overlap = [], [], []
    gpus: dict[str, Path] = {}
    frames: list[pd.DataFrame] = []
    nccl: dict[str, list] = {}
    for kind, file, sample, summary in _files(root):
        rel = str(file.relative_to(root))
        if not file.is_file():  # a sample file's name on a folder or a broken link: its rows are missing
            skipped_files.append({"file": rel, "reason": "not a readable file (a folder, or a link to nothing)"})
            continue
        if summary:
            continue  # <GPU>.csv, the authors' summary: read by ett_baseline
        if file.suffix != ".csv":
            skipped_files.append({"file": rel, "reason": "not a CSV file"})
            continue
        if not sample:
            skipped_files.append({"file": rel,
                                  "reason": "name is not <GPU>_<function>_<precision>[_<nodes>_<gpus>].csv"})
            continue
        gpus.setdefault(sample["gpu"], file)
        function, dtype = sample["function"], _PRECISION[sample["precision"]]
        topology = (int(sample["nodes"]), int(sample["gpn"])) if sample["nodes"] else None
        if kind == "operator" and function in OPERATORS:
            if topology:
                skipped_files.append({"file": rel, "reason": "operator files have no topology suffix"})
                continue
            rows = _operator_rows(file, rel, function, OPERATORS[function], skipped_rows)
        elif kind == "nccl" and function in COLLECTIVES:
            nccl.setdefault((function, dtype, sample["gpu"]), []).append((file, topology))
            continue
        else:
            reason = LEFT_OUT.get(function, f"no PRISM op for the ETT {kind} function {function!r}")
            skipped_files.append({"file": rel, "reason": reason})
            continue
        frames.append(rows.assign(dtype=dtype, function=function, gpu=sample["gpu"]))
    skipped_files += [{"file": f"{kind}/", "reason": f"missing: no {what} samples from this cluster"}
                      for kind, what in (("operator", "compute op"), ("nccl", "collective"))
                      if not (root / kind).is_dir()]
    for (function, dtype, gpu), files in sorted(nccl.items()):
        rows = _nccl_rows(function, dtype, files, root, skipped_rows, overlap)
        frames.append(rows.assign(dtype=dtype, function=function, gpu=gpu))

    if not frames:
        left = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped_files[:3])
        raise PrismError(f"{path}: no ETT sample file found (operator/<GPU>_<function>_fp16.csv or "
                         f"nccl/<GPU>_<function>_fp16[_<nodes>_<gpus>].csv)"
                         + (f"; the {len(skipped_files)} file(s) there are not imported ({left})" if left else ""),
                         field=str(path))
    if len(gpus) > 1:
        raise PrismError(f"{path}: files of several GPUs ({', '.join(sorted(gpus))}); a cluster folder holds one "
                         f"GPU's samples: split it into one folder per GPU", field=str(path))
    [(gpu, example)] = gpus.items()
    hardware = match_hardware(gpu)
    if hardware is None:
        raise PrismError(f"{example}: GPU {gpu!r} matches no profile in conf/hardware/; add it to the "
                         f"device.match list of its profile (or add a profile) and import again", field=str(example))

    df = pd.concat(frames, ignore_index=True)
    df["origin"] = "ett:" + cluster + "/" + df["function"]
    # one summary value per ETT shape; repeat numbers the rows that land on one PRISM shape
    keys = ["origin", "pass", "nodes", "ranks_per_node"] + [c for c in _shape_columns() if c in df.columns]
    df["repeat"] = df.groupby(keys, dropna=False, sort=False).cumcount()
    df["hardware"], df["device_name"] = hardware, gpu
    df["run_id"], df["host"] = run_id, cluster  # timestamp, torch_version: not published (null)

    df, suspect = _screen(df, load_hardware(hardware), skipped_rows)
    rows_per_op = {op: int(n) for op, n in df["op"].value_counts().reindex(list(OPS)).dropna().items()}
    rows_per_function = {f: int(n) for f, n in df.groupby("function", sort=False).size().items()}
    functions = sorted(set(df["function"]))
    metadata = {
        "importer": IMPORTER, "importer_version": IMPORTER_VERSION, "sources_sha256": digest,
        "source": {"name": "estimate-train-time", "paper": ETT_PAPER, "repository": ETT_REPOSITORY,
                   "license": "MIT", "path": str(root.resolve()), "cluster": cluster, "gpu": gpu},
        "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "statistic": ("one value per shape: the mean of the 3rd-7th fastest of 10 profiled runs "
                      "(np.mean(sorted(runs)[2:7]), Kernel_sampling/sampling_controller.py); each run is the GPU "
                      "span from the first to the last kernel of the target op. repeat numbers the rows of one "
                      "function that map to the same PRISM shape (0, 1, 2, ...), not timed repeats"),
        "collective_timing": ("rank 0's kernel span (GPUModeling25 NCCL_sampling/sampling_controller.py), "
                              "not the slowest rank"),
        "passes": {"F_dur(us)": "fwd", "B_dur(us)": "bwd", "dur(us) / dur": "step"},
        "mapping": {f: {"op": (OPERATORS[f].op if f in OPERATORS else COLLECTIVES[f][0]),
                        "source": (OPERATORS[f].source if f in OPERATORS else
                                   "GPUModeling25 NCCL_sampling/nccl_functions.py; docs/advanced/nccl-sampling.md")}
                    for f in functions},
        "rows_per_function": rows_per_function,
        "skipped_files": skipped_files, "skipped_rows": skipped_rows,
        "nccl_overlap": overlap, "suspect": suspect,
    }
    columns = [c for c in store.COLUMNS if c in df.columns]
    report = ImportReport(run_file=str(target), run_id=run_id, cluster=cluster, hardware=hardware,
                          device_name=gpu, rows=len(df), rows_per_op=rows_per_op,
                          rows_per_function=rows_per_function, skipped_files=skipped_files,
                          skipped_rows=skipped_rows, nccl_overlap=overlap, suspect=suspect,
                          elapsed_s=round(time.perf_counter() - started, 3))
    store.write_run(df[columns], out_dir, run_id, {**metadata, "report": asdict(report)})
    return report


def _shape_columns():
    return list(SHAPE_COLUMNS)


# --------------------------------------------------------------------------------------
# The authors' own results: the baseline to beat
# --------------------------------------------------------------------------------------

BASELINE_COLUMNS = ("origin", "hardware", "op", "pass", "nodes", "ranks_per_node", "best_model", "best_error")


def ett_baseline(path) -> pd.DataFrame:
    """The authors' regressor and its error per ETT function, pass and topology.

    Reads ``<cluster>/operator/<GPU>.csv`` (Function, Propagation fwd/bwd/dur, Best_model,
    Best_error%) and ``<cluster>/nccl/<GPU>.csv`` (Function, Nodes, GPUsPerNode, Best_model,
    Best_error%). ``Best_error%`` is a fraction despite its name (0.05 = 5 %).

    Returns
    -------
    pandas.DataFrame
        columns ``origin`` (``ett:<cluster>/<function>``, as in the imported rows),
        ``hardware``, ``op`` (the PRISM op, None for functions PRISM does not import),
        ``pass`` (fwd, bwd or step), ``nodes`` and ``ranks_per_node`` (1/1 for operators;
        0/0 is their pooled all-topology NCCL model), ``best_model``, ``best_error``.
    """
    root = _cluster_dir(path)
    cluster = root.resolve().name
    frames = []
    for kind, file, _sample, summary in _files(root):
        if not summary or not file.is_file():
            continue
        df = _read_csv(file)
        need = (["Function", "Propagation"] if kind == "operator" else ["Function", "Nodes", "GPUsPerNode"])
        need += ["Best_model", "Best_error%"]
        _require(df, file, need, f"{kind} summary")
        error = pd.to_numeric(df["Best_error%"], errors="coerce")
        if error.isna().any():
            raise PrismError(f"{file}: column Best_error%: {int(error.isna().sum())} value(s) not a number",
                             field=str(file))
        hardware = match_hardware(summary["gpu"])
        if hardware is None:
            raise PrismError(f"{file}: GPU {summary['gpu']!r} matches no profile in conf/hardware/", field=str(file))
        functions = df["Function"].astype(str).str.strip()
        ops = functions.map(lambda f, kind=kind: OPERATORS[f].op if kind == "operator" and f in OPERATORS
                            else COLLECTIVES[f][0] if kind == "nccl" and f in COLLECTIVES else None)
        if kind == "operator":
            pass_ = df["Propagation"].astype(str).str.strip().replace({"dur": "step"})
            nodes = ranks = pd.Series(1, index=df.index)
        else:
            pass_ = pd.Series("step", index=df.index)
            nodes = pd.to_numeric(df["Nodes"], errors="coerce")
            ranks = pd.to_numeric(df["GPUsPerNode"], errors="coerce")
            if nodes.isna().any() or ranks.isna().any():
                raise PrismError(f"{file}: columns Nodes/GPUsPerNode: values not integers", field=str(file))
        frames.append(pd.DataFrame({
            "origin": "ett:" + cluster + "/" + functions, "hardware": hardware, "op": ops, "pass": pass_,
            "nodes": nodes.astype("int64"), "ranks_per_node": ranks.astype("int64"),
            "best_model": df["Best_model"].astype(str).str.strip(), "best_error": error.astype(float)}))
    if not frames:
        raise PrismError(f"{path}: no ETT summary file (operator/<GPU>.csv or nccl/<GPU>.csv)", field=str(path))
    return pd.concat(frames, ignore_index=True)[list(BASELINE_COLUMNS)]


def report_dict(report: ImportReport) -> dict:
    """The report as plain JSON-ready data (what ``prism import-ett --json`` prints)."""
    return asdict(report)
