"""The workload table of ``prism predict-batch``: its columns, the file checks made
before any work, and the readers of its cells.

The table is the column layout of ``data/e2e/e2e_training_visible.csv``, one training
job a row. :data:`COLUMNS` says, once, which columns are read, their units, what a
blank cell takes and which spellings a cell may use; the checks below and
``prism predict-batch --help`` (:func:`schema_help`) both read it. Every other column is
carried through unread.

Every cell is read as text and parsed on its own, so that a row reads the same in any
table: a column's type is never inferred from the other rows (pandas would read a ``vp``
of 12 as 12.0 where another row of the column is blank). Free text is read
conservatively: a scheme it names counts only where the text does not negate it
("DDP (FSDP=0)" is plain data parallelism), the first scheme named wins, and text that
names none is refused rather than guessed. A blank cell takes its framework's default
(each framework's ``runs_table.blank`` in ``conf/framework/``); the reader says what it assumed.

This module imports nothing heavy: ``prism --help`` builds its text from it.
"""
from __future__ import annotations

import codecs
import csv
import functools
import io
import math
import os
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from predictor.core.errors import PrismError
from predictor.core.files import checked_path, writable
from predictor.core.specs import MAX_LAYERS
from predictor.data import cells


@dataclass(frozen=True)
class Column:
    """One column the reader uses: ``kind`` is ``count`` (a whole number from 1 to
    ``limit``), ``choice`` (one of ``spellings``), ``switch`` (on or off) or ``text``."""

    name: str
    kind: str
    required: bool
    meaning: str
    default: str = ""
    spellings: str = ""
    limit: int = 0


#: Precision spellings: a cell naming fp8 runs the linear layers' GEMMs in float8 and the
#: rest in the other precision it names, else bf16 (torchtitan Float8, Transformer Engine).
PRECISIONS = {"float8": ("fp8", "float8", "e4m3", "mxfp8"), "bfloat16": ("bf16", "bfloat16"),
              "float16": ("fp16", "float16", "half"), "float32": ("fp32", "float32", "tf32")}
#: Optimizer and weight sharding: phrases naming each scheme of ParallelConfig.sharding.
SHARDINGS = {"none": ("ddp", "distributed data parallel"),
             "distributed_optimizer": ("distributed optimizer", "distributed-optimizer", "distopt", "dist-opt",
                                       "dist opt"),
             "zero1": ("zero-1", "zero1", "zero stage 1"), "zero2": ("zero-2", "zero2", "zero stage 2"),
             "zero3": ("zero-3", "zero3", "zero stage 3"), "fsdp": ("fsdp", "fsdp1", "fsdp2", "fully sharded")}
RECOMPUTES = {"selective": ("selective", "sac"), "per_op": ("per-op", "per_op", "op-level", "op sac"),
              "full": ("full",)}
#: Whole-cell spellings of "nothing of the kind" for sharding and recompute (only a whole
#: cell: "no" inside free text often belongs to another word, "FSDP, no offload").
NONE_WORDS = ("none", "no", "off", "false", "0", "-", "none listed")  # "none listed": the source lists none
ON_WORDS, OFF_WORDS = ("on", "yes", "true", "1", "enabled"), ("off", "no", "false", "0", "disabled", "none")
#: Count cells that some tools write for a missing value: read as blank.
MISSING_WORDS = ("nan", "na", "n/a", "null")

#: What a blank model dimension takes.
REGISTRY_DEFAULT = "the registry's (conf/model) where the model cell names a published architecture"

COLUMNS = (
    Column("model", "text", True, "model name: a published architecture conf/model knows by name or alias "
           "(Llama 3.1 405B, DeepSeek-V3, Qwen3 30B-A3B, ...), else one that says its family: 'llama' (SwiGLU, "
           "RMSNorm, RoPE, untied embeddings) or 'gpt' (GELU, LayerNorm, learned positions, tied embeddings)"),
    Column("layers", "count", False, "transformer layers", REGISTRY_DEFAULT, limit=MAX_LAYERS),
    Column("hidden", "count", False, "hidden size", REGISTRY_DEFAULT, limit=1 << 18),
    Column("heads", "count", False, "attention heads", REGISTRY_DEFAULT, limit=1 << 14),
    Column("kv_heads", "count", False, "key-value heads (grouped-query attention)", "heads (multi-head)",
           limit=1 << 14),
    Column("ffn", "count", False, "FFN inner width", "4 x hidden", limit=1 << 20),
    Column("vocab", "count", False, "vocabulary size", "GPT 51,200 (GPT-2's, padded); Llama 128,256 (Llama 3)",
           limit=1 << 22),
    Column("seq_len", "count", False, "sequence length, tokens",
           "a recipe name's context ('llama3_8b_16k': 16,384), else the registry's pre-training length "
           "(conf/model) where the model cell names a published architecture", limit=1 << 22),
    Column("gbs", "count", True, "global batch, sequences per step", "batch_per_dp x dp, or tokens_per_step / "
           "seq_len, where the table gives one of them", limit=1 << 22),
    Column("batch_per_dp", "count", False, "sequences per data-parallel rank a step, where the table gives no gbs "
           "('Batch size/DP'): gbs = batch_per_dp x dp", limit=1 << 22),
    Column("tokens_per_step", "text", False, "tokens a step, where the table gives no gbs ('Tokens/Batch', 'Global "
           "batch (tokens)'): gbs = tokens_per_step / seq_len", "",
           "'4194304', '4M', '16M tokens' (M and k binary where that makes whole sequences, else decimal)"),
    Column("mbs", "count", False, "micro-batch, sequences", "1", limit=1 << 16),
    Column("tp", "count", True, "tensor-parallel degree", limit=1024),
    Column("pp", "count", True, "pipeline-parallel degree", limit=512),
    Column("dp", "count", False, "data-parallel degree, an FSDP degree included", "num_gpus / (tp x pp x cp)",
           limit=1 << 22),
    Column("fsdp", "count", False, "FSDP degree where dp holds only the other data-parallel axis (MaxText's "
           "ici/dcn_fsdp_parallelism): data parallelism is dp x fsdp, sharded", "none (dp counts every data-parallel "
           "rank)", limit=1 << 22),
    Column("cp", "count", False, "context-parallel degree", "1", limit=1024),
    Column("ep", "count", False, "expert-parallel degree (Mixture-of-Experts models; expert tensor parallelism "
           "from the notes' 'ETP=n', else 1)", "1", limit=1 << 14),
    Column("etp", "count", False, "expert tensor-parallel degree (--expert-tensor-parallel-size)",
           "the notes' 'ETP=n', else 1", limit=1024),
    Column("vp", "count", False, "virtual pipeline stages per rank (interleaved 1F1B where > 1)",
           "1; 'yes' without a number: torchtitan's 2 stages per rank, refused elsewhere",
           "a whole number, or yes/no", limit=64),
    Column("seq_parallel", "switch", False, "sequence parallelism",
           "torchtitan and Megatron-Bridge (its recipes): on where tp > 1; else off",
           "on/off, yes/no, true/false, 1/0"),
    Column("recompute", "choice", False, "activation recomputation",
           "torchtitan: per_op (its selective mode's per-op policy); else none",
           "none, selective (SAC; torchtitan's reads as per_op), per_op (per-op), full; 'default': the framework's; "
           "also the frameworks' own words (recompute_method uniform/block: full; yes/enabled: full; "
           "Megatron-Core's --recompute-modules, 'mlp' or 'selective: core_attn, mlp': selective of those)"),
    Column("zero_or_distopt", "choice", False, "optimizer and weight sharding", "torchtitan: fsdp; else none",
           "none, DDP, distributed optimizer, ZeRO-1/2/3, FSDP (FSDP2); 'default': the framework's; also the "
           "frameworks' own words (NeMo distributed_fused_adam, DeepSpeed stage 2, FULL_SHARD)"),
    Column("precision", "choice", False, "training precision", "bf16; fp32 under HF Accelerate",
           "bf16, fp16, fp32 (tf32), fp8 (linears in float8, the rest bf16 unless another is named), fp8 "
           "blockwise, MXFP8, NVFP4; also bf16-mixed, 16-mixed, mixed (16-bit), fp8 hybrid, FP8-CS, FP8-DS, "
           "FP8-MX (Megatron-Bridge's fp8_mx: MXFP8), the recipes' names (bf16_with_mxfp8_mixed, ...)"),
    Column("framework", "text", False, "training framework: picks the defaults above; Megatron-LM without 'Core' "
           "runs attention unfused and reduces gradients after the backward; Megatron-Bridge runs as its "
           "performance recipes do (TP overlap with tp > 1, MoE routing forced balanced)",
           "Megatron-Core's behaviour (flash attention, gradient reduction overlapped)"),
    Column("gpu", "choice", True, "GPU, matched to a conf/hardware profile by its device.match names",
           spellings="a name containing A100, H100, H200, GH200, B200, B300, GB200, GB300 (or a longer "
                     "device.match name: 'H100 SXM 96GB HBM2e' is torchtitan's 2.4 TB/s part); the longest "
                     "match wins"),
    Column("num_gpus", "count", True, "GPUs of the job: dp x tp x pp x cp", limit=1 << 22),
    Column("gpus_per_node", "count", False, "GPUs per node", "the hardware profile's", limit=1024),
    Column("inter_node", "text", False, "bandwidth between nodes, per GPU unless it says 'per node'",
           "the hardware profile's network", "'400 Gb/s per GPU', '8x 200 Gb/s HDR InfiniBand per node', '50 GB/s'"),
    Column("num_experts", "count", False, "routed experts of a Mixture-of-Experts model", "none: a dense model",
           limit=1 << 14),
    Column("top_k", "count", False, "experts each token is routed to", limit=1 << 10),
    Column("expert_ffn", "count", False, "one routed expert's FFN width", "ffn", limit=1 << 20),
    Column("shared_experts", "text", False, "shared experts, each of expert_ffn", "0", "a whole number"),
    Column("moe_layer_freq", "text", False, "which layers are MoE", "every layer",
           "1 (every layer), N (every N-th), 'all MoE', 'every 2nd layer MoE', or Megatron's list '[0]*3+[1]*58'"),
    Column("notes", "text", False, "free text: 'async TP' or '--tp-comm-overlap' (not negated) overlaps the TP "
           "collectives with the GEMMs; for MoE rows 'forced load balancing' (or 'real routing'), 'DeepEP' / "
           "'HybridEP', 'A2A overlap', 'capacity factor N', 'ETP=n'; 'attn_impl: triton'; the framework column "
           "is read alike"),
)
BY_NAME = {c.name: c for c in COLUMNS}
REQUIRED = tuple(c.name for c in COLUMNS if c.required)
#: Columns a required one may be worked out from instead (the global batch from a per-rank
#: batch or a token count, as papers' tables give it).
INSTEAD = {"gbs": ("batch_per_dp", "tokens_per_step")}

#: The column that each framework setting of ``conf/framework``'s ``spellings:`` fills, so that a
#: table whose header spells a column as a framework's configuration does
#: (``tensor_model_parallel_size``, ``--micro-batch-size``, ``ici_fsdp_parallelism``) is read.
SETTING_COLUMNS = {"tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "dp": "dp", "fsdp": "fsdp",
                   "sequence_parallel": "seq_parallel", "micro_batch_size": "mbs", "global_batch_size": "gbs",
                   "recompute": "recompute", "sharding": "zero_or_distopt", "precision": "precision",
                   "seq": "seq_len", "layers": "layers", "hidden": "hidden", "heads": "heads", "kv_heads": "kv_heads",
                   "ffn": "ffn", "vocab": "vocab", "num_experts": "num_experts", "top_k": "top_k",
                   "expert_ffn": "expert_ffn", "moe_layer_freq": "moe_layer_freq"}


#: Column headers in plain words ("Global Batch Size", "SeqLen (T)", "# GPUs"), letters and
#: digits only, a parenthesis dropped, and the column each names.
HEADER_WORDS = {
    "gbs": ("globalbatchsize", "globalbatch", "gbsz", "batchsize"), "mbs": ("microbatchsize", "microbatch", "mbsz"),
    "seq_len": ("seqlen", "seqlength", "sequencelength", "sequencelen", "contextlength", "maxseqlen"),
    "num_gpus": ("gpus", "numgpus", "ngpus", "gpucount", "numberofgpus"),
    "layers": ("numlayers", "nlayers", "numberoflayers", "archnlayers"),
    "hidden": ("hiddensize", "hiddendim", "dmodel", "modeldim", "archdmodel"),
    "heads": ("numheads", "nheads", "attentionheads", "numattentionheads", "archnheads"),
    "kv_heads": ("kvheads", "numkvheads", "querygroups", "numquerygroups"),
    "ffn": ("ffnhiddensize", "ffnsize", "ffndim", "intermediatesize", "archffn"),
    "vocab": ("vocabsize", "vocabulary", "vocabularysize", "archvocab"),
    "tp": ("tensorparallel", "tensorparallelsize", "tensorparallelism", "tpsize", "tpdegree"),
    "pp": ("pipelineparallel", "pipelineparallelsize", "pipelineparallelism", "ppsize", "ppdegree"),
    "dp": ("dataparallel", "dataparallelsize", "dataparallelism", "dpsize", "dpdegree"),
    "cp": ("contextparallel", "contextparallelsize", "cpsize"),
    "ep": ("expertparallel", "expertparallelsize", "epsize"),
    "etp": ("experttensorparallel", "experttensorparallelsize", "etpsize"),
    "vp": ("vpp", "virtualpipeline", "virtualpipelinestages", "virtualstages"),
    "seq_parallel": ("sequenceparallel", "sequenceparallelism", "sp"),
    "recompute": ("activationcheckpointing", "activationrecompute", "activationrecomputation", "recomputation",
                  "gradientcheckpointing", "actckpt", "remat", "rematpolicy"),
    "zero_or_distopt": ("shardingstrategy", "sharding", "zerostage", "zero", "distributedoptimizer"),
    "precision": ("dtype", "mixedprecision", "numerics"),
    "gpu": ("gputype", "gpumodel", "accelerator", "system", "hardware", "gpusystem"),
    "tokens_per_s_per_gpu": ("tokenssecgpu", "tokenspersecgpu", "tokenspersecpergpu", "tokenspersecondpergpu",
                             "tokensspergpu", "throughputtokenssecgpu"),
    "tflops_per_gpu": ("modeltflopsecgpu", "modeltflopssecgpu", "tflopssecgpu", "tflopspergpu", "tflopsgpu"),
    "num_experts": ("experts", "numexperts", "routedexperts"), "top_k": ("topk", "moeroutertopk"),
    "batch_per_dp": ("batchsizedp", "batchsizeperdp", "batchperdp", "batchdp", "batchsizeperdatarank",
                     "batchsizeperreplica", "perreplicabatchsize", "localbatchsize"),
    "tokens_per_step": ("tokensbatch", "tokensperbatch", "tokensperstep", "tokensperiteration", "batchtokens",
                        "batchsizetokens", "globalbatchtokens", "globalbatchsizetokens", "tokensperglobalbatch"),
}
_HEADER_WORDS = {word: column for column, words in HEADER_WORDS.items() for word in words}


def _header_words(name: str) -> str:
    """A header's letters and digits, a parenthesis dropped unless it gives the unit tokens
    ("Global batch size (tokens)" is a token count, not sequences)."""
    low = name.lower()
    return re.sub(r"[^a-z0-9]", "", re.sub(r"\((?!\s*tokens?\s*\)).*?\)", "", low))


def missing_columns(names) -> list[str]:
    """The required columns that neither ``names`` (lower case) nor the columns its spellings
    fill (:func:`header_columns`) give, directly or by a column that works one out (:data:`INSTEAD`)."""
    have = set(names) | set(header_columns(names).values())
    return [c for c in REQUIRED if c not in have and not have & set(INSTEAD.get(c, ()))]


def _spelling_key(text: str) -> str:
    return re.sub(r"[-\s]+", "_", str(text).strip().lower().lstrip("-"))


def header_columns(names) -> dict[str, str]:
    """The header names (lower case, stripped) that spell a column as a framework's
    configuration does, or in plain words (:data:`HEADER_WORDS`), each with the column it
    fills; a column the header already has, or that two names would fill, is filled by none."""
    return dict(_header_columns(tuple(str(n).strip().lower() for n in names)))


@functools.lru_cache(maxsize=256)
def _header_columns(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    from predictor.core.framework import setting_spellings  # the frameworks' files: not for --help
    spelled = {}
    for setting, column in SETTING_COLUMNS.items():
        for word in setting_spellings(setting):
            key = _spelling_key(word)
            spelled.setdefault(key, column)
            spelled.setdefault(key.rsplit(".", 1)[-1], column)  # "parallelism.tensor_parallel_degree" or its leaf
    found = [(n, spelled.get(_spelling_key(n)) or _HEADER_WORDS[_header_words(n)]) for n in names
             if n not in BY_NAME and (_spelling_key(n) in spelled or _header_words(n) in _HEADER_WORDS)]
    filled = [column for _, column in found]
    return tuple((n, c) for n, c in found if c not in names and filled.count(c) == 1)


def with_columns(row: Mapping) -> Mapping:
    """``row`` with the columns its framework-spelled names fill (:func:`header_columns`) added."""
    spelled = header_columns(row.keys())
    if not spelled:
        return row
    return {**dict(row), **{column: row[name] for name, column in spelled.items()}}


def schema_help(width: int = 100) -> str:
    """The schema as ``prism predict-batch --help`` prints it, wrapped to ``width``."""
    def entry(name: str, text: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=f"  {name:<16}", subsequent_indent=" " * 20)

    lines = ["columns read (* = required; any other column is carried through unread):"]
    for c in COLUMNS:
        lines += entry(c.name + ("*" if c.required else ""), c.meaning)
        if c.spellings:
            lines += entry("", f"spellings: {c.spellings}")
        if c.default:
            lines += entry("", f"blank: {c.default}")
    lines += textwrap.wrap("Counts are whole numbers ('12' or '12.0', not '12.5'; '1,024'; '4K' is 4,096, not for "
                           "vocab); a count cell of nan, NA or null is blank. A column may be headed as a framework "
                           "spells the setting (tensor_model_parallel_size, ici_fsdp_parallelism). Free text counts a "
                           "scheme it names unless it negates it ('DDP (FSDP=0)' is not FSDP); the first named wins; "
                           "text naming none is refused, not guessed.", width)
    return "\n".join(lines)


# ---- the file ---------------------------------------------------------------------


@dataclass
class Table:
    """A checked table: its header as written and every data row's cells as text (each
    as long as the header), with the rows that had more cells than the header."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    overlong: dict[int, int]  # row index -> its cell count, where it exceeds the header's


def read_table(path) -> Table:
    """The table at ``path``, or one :class:`PrismError` naming the file and the fix if it
    is missing, empty, not UTF-8 text, not CSV, or lacks a required column."""
    p = Path(path)
    where = str(p)
    if not os.path.exists(p):  # False for a name too long to exist, where Path.exists raises
        raise PrismError(f"{p}: no such file; give the path of a CSV table, e.g. "
                         f"data/e2e/e2e_training_visible.csv", field=where)
    if p.is_dir():
        raise PrismError(f"{p}: is a folder; give the CSV file itself", field=where)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise PrismError(f"{p}: cannot be read ({exc.strerror}); check its permissions", field=where) from None
    if not data.strip():
        raise PrismError(f"{p}: is empty; it needs a header line naming the columns and one job a row "
                         f"(prism predict-batch --help lists them)", field=where)
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise PrismError(f"{p}: is UTF-16 text; save it as UTF-8 (Excel: 'CSV UTF-8'; iconv -f utf-16 -t utf-8)",
                         field=where)
    if b"\x00" in data:
        raise PrismError(f"{p}: is not text (it holds NUL bytes: a spreadsheet, Parquet or other binary file?); "
                         f"export it as CSV, UTF-8", field=where)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PrismError(f"{p}: is not UTF-8 (byte 0x{data[exc.start]:02x} on line {line}); save it as UTF-8 "
                         f"(Excel: 'CSV UTF-8'; iconv -f latin1 -t utf-8)", field=where) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        lines = [cells for cells in reader if cells]  # a blank line is no row
    except csv.Error as exc:
        raise PrismError(f"{p}: is not CSV ({exc}, line {reader.line_num}); an unclosed quote? Check that line",
                         field=where) from None
    header = lines[0]
    names = [h.strip().lower() for h in header]
    if len(header) == 1 and not set(names) & set(REQUIRED):
        sep = next((s for s in ("\t", ";", "|") if s in header[0]), None)
        hint = f"it is separated by {sep!r}, not commas" if sep else "its first line has no commas"
        raise PrismError(f"{p}: is not a CSV table ({hint}); save it as comma-separated values", field=where)
    twice = sorted({n for n in names if n and names.count(n) > 1})
    if twice:
        raise PrismError(f"{p}: column {twice[0]!r} appears twice in the header; keep one", field=twice[0])
    missing = missing_columns(names)
    if missing:
        raise PrismError(f"{p}: no column {', '.join(missing)} (required: {', '.join(REQUIRED)}); add "
                         f"{'it' if len(missing) == 1 else 'them'} to the header (prism predict-batch --help)",
                         field=missing[0])
    if len(lines) == 1:
        raise PrismError(f"{p}: has a header but no rows; add one job a row", field=where)
    width = len(header)
    overlong = {i: len(cells) for i, cells in enumerate(lines[1:]) if len(cells) > width}
    # a row with fewer cells than the header has its trailing cells blank (some writers drop them)
    rows = [cells[:width] + [""] * (width - len(cells)) for cells in lines[1:]]
    return Table(p, header, rows, overlong)


def check_output(out, table: Path) -> Path:
    """``out`` as the file predictions go to, after checking that its folder exists and
    takes files and that it is not the input ``table``; one :class:`PrismError` naming
    ``out`` and the fix otherwise."""
    if not str(out).strip():
        raise PrismError("out=: give the CSV file to write, e.g. out=predicted.csv", field="out")
    p = checked_path("out", out)
    if p.resolve() == Path(table).resolve() or (p.exists() and os.path.samefile(p, table)):
        raise PrismError(f"out={out}: is the input table; write the predictions to another file, e.g. "
                         f"out={p.with_name(p.stem + '.predicted.csv')}", field="out")
    if p.is_dir():
        raise PrismError(f"out={out}: is a folder; give a file in it, e.g. out={p / 'predicted.csv'}", field="out")
    if p.suffix.lower() != ".csv":  # what is written is a CSV table, whatever the name says
        raise PrismError(f"out={out}: the predictions are written as a CSV table; name the file .csv, e.g. "
                         f"out={p.with_suffix('.csv')}", field="out")
    writable("out", p, create=False)
    if p.exists() and not os.access(p, os.W_OK):
        raise PrismError(f"out={out}: exists and is read-only; make it writable or write elsewhere", field="out")
    return p


# ---- the cells --------------------------------------------------------------------


#: Whole cells that only say the source does not state the value ("none stated", "not
#: given", "n/a (tp=1)"): read as blank, so the column's default applies and is noted.
_UNSTATED = re.compile(r"(none|not|un)[\s-]*stated|not (given|reported|specified)|n/a(\s*\(.*\))?", re.IGNORECASE)


def cell(row: Mapping, column: str) -> str:
    """A cell as stripped text; "" for a blank, absent or NaN cell, or one that only says
    the source does not state it (:data:`_UNSTATED`)."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value).strip()
    return "" if _UNSTATED.fullmatch(text) else text


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def blank_cell(text: str) -> bool:
    """Whether a cell (stripped, :func:`cell`) says nothing: empty, a word some tools write for a
    missing value (:data:`MISSING_WORDS`) or a dash, "not applicable" (``cells.DASHES``)."""
    return not text or text.lower() in MISSING_WORDS or text in cells.DASHES


def count(row: Mapping, column: str) -> int | None:
    """A count cell as an int, None where blank; a :class:`PrismError` naming the column
    where it is not a whole number from 1 to the column's limit."""
    spec = BY_NAME[column]
    text = cell(row, column)
    if blank_cell(text):
        if spec.required:
            raise PrismError(f"{column}: blank; fill it in ({spec.meaning})", field=column)
        return None
    labelled = cells.labelled_number(text)  # "TP=8", "4096 tokens", "5 (interleaved)"
    number = cells.plain_number(labelled or text, suffix=column not in NO_SUFFIX)
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not value.is_integer():
        raise PrismError(f"{column}={_shown(text)}: not a whole number; write one such as 8 ({spec.meaning})",
                         field=column)
    if value < 1:
        raise PrismError(f"{column}={_shown(text)}: must be at least 1 ({spec.meaning})", field=column)
    if value > spec.limit:
        raise PrismError(f"{column}={_shown(text)}: more than {spec.limit:,}; check the value ({spec.meaning})",
                         field=column)
    return int(value)


#: Count columns whose "256K" is not a binary multiple (a vocabulary: 256,000 or 262,144).
NO_SUFFIX = ("vocab",)

#: The framework setting behind each switch column, whose configuration keys a cell may name
#: ("--sequence-parallel", "sequence_parallel: true": each framework's ``spellings``).
SWITCH_SETTINGS = {"seq_parallel": "sequence_parallel"}


def switch(row: Mapping, column: str) -> bool | None:
    """An on/off cell; None where blank. The cell's first word decides ("on (TP > 1)",
    "enabled", "True"), after a configuration key of the setting that any framework spells
    (a bare "--sequence-parallel" is on; :func:`predictor.data.cells.switch_word`)."""
    text = cell(row, column).lower()
    if not text:
        return None
    from predictor.core.framework import setting_spellings  # the frameworks' files: not for --help
    value = cells.switch_word(text, setting_spellings(SWITCH_SETTINGS.get(column, column)))
    if value is not None:
        return value
    raise PrismError(f"{column}={_shown(text)}: not on or off; write {BY_NAME[column].spellings}", field=column)


_NEGATED_BEFORE = re.compile(r"(?:\b(?:no|not|without|non|disabled?)|w/o)[\s\-]*$")
_NEGATED_AFTER = re.compile(r"^(?:\s*[=:]\s*(?:0|off|false|no|none|disabled?)\b|\s+(?:off|disabled)\b)")


def mentions(text: str, phrases: Mapping[str, tuple[str, ...]]) -> list[tuple[str, bool]]:
    """The values whose phrases ``text`` names, in the order named, each with whether the
    text negates it ("no FSDP", "non-FSDP", "FSDP=0", "FSDP off")."""
    text = text.lower()
    found = []
    for value, spellings in phrases.items():
        for phrase in spellings:
            for m in re.finditer(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text):
                negated = bool(_NEGATED_BEFORE.search(text[:m.start()]) or _NEGATED_AFTER.match(text[m.end():]))
                found.append((m.start(), value, negated))
    return [(value, negated) for _, value, negated in sorted(found)]


def choice(row: Mapping, column: str, phrases: Mapping[str, tuple[str, ...]], off: str | None,
           extra: Mapping[str, tuple[str, ...]] | None = None) -> tuple[str | None, str | None]:
    """The value a choice cell names and a note where it was read from free text; (None,
    None) where blank or where the cell asks for the framework's default.

    The first value named and not negated wins. A cell that negates every value it names
    ("FSDP=0") or is a whole-cell "none" reads as ``off``, where the column has one. A
    cell that names nothing it knows is refused. ``extra`` adds the frameworks' own spellings
    of the values (NeMo's ``distributed_fused_adam``); a cell read by one is noted."""
    text = cell(row, column)
    low = text.lower()
    if not low or asks_default(low):
        return None, None
    if off is not None and low in NONE_WORDS:
        return off, None
    named = mentions(low, _joined(phrases, extra or {}))
    kept = [value for value, negated in named if not negated]
    if kept:
        exact = low in (p for spellings in phrases.values() for p in spellings)
        return kept[0], None if exact else f"{column} {_shown(text)} read as {kept[0]}"
    if named and off is not None:
        return off, f"{column} {_shown(text)} read as {off} (it negates what it names)"
    if off is not None and cells.none_cell(low):  # "none (no ACT_CKPT set)": none, and why
        return off, f"{column} {_shown(text)} read as {off}"
    raise PrismError(f"{column}={_shown(text)}: not a {column} this reads; write {BY_NAME[column].spellings}",
                     field=column)


def _joined(phrases: Mapping[str, tuple[str, ...]], extra: Mapping[str, tuple[str, ...]]
            ) -> dict[str, tuple[str, ...]]:
    """``phrases`` with ``extra``'s spellings added to each value (values of ``extra`` alone too)."""
    joined = {value: tuple(spellings) for value, spellings in phrases.items()}
    for value, spellings in extra.items():
        joined[value] = joined.get(value, ()) + tuple(spellings)
    return joined


def asks_default(text: str) -> bool:
    """Whether a cell asks for its framework's default ("default", "toml default")."""
    return bool(re.fullmatch(r"(\w+\s+)?defaults?", text.strip().lower()))


def framework_family(text: str) -> str:
    """The framework family a framework cell names, as the frameworks' files read a table's
    cells (:func:`predictor.core.framework.table_framework`: torchtitan, accelerate
    (Megatron-LM under HF Accelerate), megatron-lm (before Megatron-Core; also Microsoft's
    Megatron-DeepSpeed, a fork of it with its kernels), megatron-core (NeMo and
    Megatron-Bridge too)), or "" (not recognised). A blank cell is the default framework's
    family (:func:`predictor.core.framework.default_framework`), as ``prism predict`` reads none."""
    from predictor.core.framework import default_framework, load_framework, table_framework  # not for --help
    if not str(text or "").strip():
        return default_framework().family
    spec = table_framework(text)
    if spec and spec.family != spec.name and load_framework(spec.family).role == "unrecognised":
        return spec.name  # priced as an unrecognised framework, read with its own file's blank defaults (MaxText)
    return spec.family if spec else ""


def framework_default(column: str, family: str) -> tuple[str, str]:
    """(value, why) a blank ``column`` takes under framework ``family`` ("": none recognised),
    as its file's ``runs_table.blank`` says, else the fallback file's."""
    from predictor.core.framework import blank_default, load_framework
    entry = blank_default(column, load_framework(family) if family else None)
    return entry.value, entry.why


def default_whose(column: str, family: str) -> str:
    """Whose default a blank ``column`` takes under framework ``family``, as a note names it."""
    from predictor.core.framework import blank_default, load_framework
    return blank_default(column, load_framework(family) if family else None).whose


def says(text: str, *phrases: str) -> bool:
    """Whether free ``text`` names one of ``phrases`` without negating it."""
    return any(not negated for _, negated in mentions(text, {"": phrases}))


#: A bandwidth in text: an optional count of links ("8x", also before up to four words naming the
#: NIC: "4x ConnectX-7 IB NDR 400 Gb/s", "8x NVIDIA Quantum-2 CX7 InfiniBand (400Gb/s)"), a number and
#: a unit in bits (Gb/s, Gbps, Gb/Sec, Tb/s) or bytes (GB/s, GBps); the case of the b tells them apart.
_BANDWIDTH = re.compile(r"(?<![\w.\-])(?:(\d+)\s*x\s*(?:[A-Za-z][\w-]*[\s(]+){0,4})?(\d+(?:\.\d+)?)\s*([GT])(b|B)"
                        r"(?:it|yte)?(?:/[sS](?:ec)?|ps)")


#: A figure before a bandwidth unit in any form, signs and exponents too.
_NUMBER_AND_UNIT = re.compile(r"\d\s*[GT](?:b|B)(?:it|yte)?(?:/[sS]|ps)")

#: A cell lists a node's networks in parts ("Storage: 2x ..., Compute: 8x ..., Management: ...", as
#: MLPerf's system descriptions do): split on commas, semicolons and a spaced plus.
_PARTS = re.compile(r"[,;]|\s\+\s")

#: Parts that are not the network collectives run on: the storage and management NICs of a node
#: (MLPerf system JSON's "Storage", "Management"), and the host's PCIe links.
_NOT_COLLECTIVES = ("storage", "management", "mgmt", "pcie")


def _link_parts(text: str) -> list[tuple[float, bool, str]]:
    """(bytes/s, whether a count of links was written, the part's text) of each part of a
    bandwidth cell that states a figure and may carry the collectives: a part labelled
    "Compute" wins; parts naming storage, management or PCIe are left out."""
    parts = []
    for part in _PARTS.split(text):
        found = _BANDWIDTH.search(part)
        if found:
            times, value, prefix, unit = found.groups()
            bw = float(value) * int(times or 1) * (1e12 if prefix == "T" else 1e9) / (8 if unit == "b" else 1)
            parts.append((bw, times is not None, part))
    compute = [p for p in parts if says(p[2].split(":")[0], "compute")]
    carrying = compute or [p for p in parts if not says(p[2], *_NOT_COLLECTIVES)]
    return carrying


def bandwidth(row: Mapping, column: str, gpus_per_node: int) -> tuple[float | None, str | None]:
    """Bytes/s per GPU that a bandwidth cell states ('8x 200 Gb/s ... per node', '400
    Gb/s per GPU', '50 GB/s', 'Storage: 2x ..., Compute: 8x 400Gb/s') and a note where the
    text leaves something to assume; (None, note) where it states none.

    Where a cell names several networks, the collectives run on the compute fabric: the part
    labelled Compute, else the widest part that is not storage, management or PCIe. A count of
    links ("8x 400Gb/s", "4x ConnectX-8 800 Gb/s") is the node's NICs, so the figure is the
    node's, shared by its GPUs, as is one said to be per node, node-to-node or aggregate."""
    text = cell(row, column)
    if not text:
        return None, None
    parts = _link_parts(text)
    if not parts and _BANDWIDTH.search(text):
        return None, (f"{column} {_shown(text)} states the bandwidth of storage, management or PCIe links only, "
                      f"not of the network between nodes: the profile's network")
    if not parts and _NUMBER_AND_UNIT.search(text):  # "-400 Gb/s", "1e30 Gb/s": a figure, not readable as one
        raise PrismError(f"{column}={_shown(text)}: a bandwidth that is not a plain positive number; write e.g. "
                         f"'400 Gb/s per GPU' or '8x 200 Gb/s per node'", field=column)
    if not parts:
        return None, f"{column} {_shown(text)} states no bandwidth (e.g. 400 Gb/s): the profile's network"
    bw, counted, part = max(parts, key=lambda p: p[0] if p[1] else p[0] * gpus_per_node)
    if not 0 < bw < math.inf:
        raise PrismError(f"{column}={_shown(text)}: a bandwidth of 0; write e.g. '400 Gb/s per GPU'", field=column)
    per_gpu = says(text, "per gpu")
    per_node = not per_gpu and (counted or says(text, "per node", "node-node", "node-to-node", "aggregate"))
    if per_node or per_gpu:
        note = None if says(text, "per node", "per gpu") else (
            f"{column} {_shown(text)} read as {bw * 8 / 1e9:g} Gb/s a node ({part.strip()[:40]!r}), "
            f"{bw * 8 / 1e9 / gpus_per_node:g} Gb/s a GPU")
    else:
        note = f"{column} {_shown(text)} read per GPU"
    return (bw / gpus_per_node if per_node else bw), note
