"""Import published microbenchmarks (``data/microbench``) into the sample store.

Where a GPU has no operator samples of its own, its published microbenchmarks are the
next best evidence (``predictor.latency.artifacts.TIERS``): trained on them, the
floor-relative models learn how far that GPU's GEMMs, attention kernels and NCCL
collectives stay from its roofline, and follow the floor outside the benchmarked box.

What each source gives, and how it maps onto PRISM's vocabulary:

- ``op_gemm_xla_perf_table.csv`` (OpenXLA's measured GEMM table, ``device_key`` sm_90 =
  H100, sm_100_B200 = B200): batch 1/2/4 x m, n, k in 256...4096. Batch 1 is ``gemm``,
  batch 2 and 4 ``bmm``; one median time per shape (``repeat`` 0). ``bf16xbf16->bf16`` is
  bfloat16; ``f8e4m3fnxf8e4m3fn->bf16`` is float8 (the mixed e4m3/e5m2 rows, used for
  gradients, are left out: the vocabulary has one float8); ``f32xf32->f32`` is tfloat32,
  XLA's default precision for f32 dots on these GPUs (the H100 rows reach 403 TFLOP/s,
  six times the 67 TFLOP/s fp32 peak). A row faster than the profile's peak is a failed
  measurement, and so is every row of its precision on that device: a timing that beats
  the datasheet on some shapes is wrong on the rest too (the data README flags H100 fp8,
  whose GEMMs of 2048 and more a side run a median 2,056 TFLOP/s against the 1,979 peak);
  they are left out, counted, and the precision is priced as one the samples lack
  (:func:`predictor.latency.artifacts.compute_ceiling`).
  The backward pass of a GEMM is two GEMMs (dX = dY·Wᵀ, dW = Xᵀ·dY), so
  ``bwd(m, n, k) = fwd(m, k, n) + fwd(k, n, m)``, both of which the full grid holds;
  a shape whose forward row, or either gradient GEMM's, is left out has no backward row,
  counted too.
- ``op_flashattention_tflops.csv``: FlashAttention-2 on H100 (what PyTorch's SDPA flash
  backend runs), forward and forward+backward TFLOP/s by sequence length, head dim and
  causal mask. Latency = FLOPs / rate with the benchmark's own FLOP count, which is the
  vocabulary's (4·b·h·s²·d forward, half under a causal mask, backward 2.5x); the
  backward is the forward+backward time less the forward time of the same shape.
- ``comm_xla_collective_perf_table.csv`` (OpenXLA, one 8-GPU node: groups of 2, 4, 8; on
  GB200 and GB300 (sm_103) one NVL72 rack: groups of 4 to 72 GPUs across its 4-GPU trays,
  all inside one NVLink domain, which is what a "node" of the collectives' topology means,
  :mod:`predictor.core.mesh`) and ``comm_nccl_tests_allreduce.csv`` (the DGX H100 node only): intra-node collectives,
  ``message_bytes`` = the benchmark's tensor bytes (the full vector for all-reduce, the
  gathered output for all-gather, the input for reduce-scatter and all-to-all). The
  2-node nccl-tests rows ran on Google Cloud A3 Mega VMs, another network than any
  profile's, and are left out; the models' collectives therefore cover one node only
  (manifest ``collective_scope``) and the composer keeps the network prior between nodes.

Each row's ``origin`` is ``microbench:<source>``. Every row the hardware's table rows
would give but the import leaves out (a failed measurement, a size or latency that is not
a positive number, text in a number column, a repeated shape, a backward without its
forward or gradient GEMMs) is counted by reason in the report, so that the rows written and
those counted add up. A hardware whose tables give no row gets no run (a store of empty
runs reads as holding none) but one error saying why; so does one whose tables include one
cut to its header line (its ops would be missing from the run without a word).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.ops import OPS, SHAPE_COLUMNS
from predictor.core.profiles import load_hardware
from predictor.core.specs import HardwareConfig
from predictor.data import store
from predictor.data.importers import earlier_import, read_csv, sources_digest

#: Hardware profile -> the keys its rows carry in each source (``xla``: the GEMM table;
#: ``xla_collectives``: the collective table where its key differs).
SOURCES = {
    "h100-sxm": {"xla": "sm_90", "flash": "H100-SXM5-80GB", "nccl": "DGX H100"},
    "b200": {"xla": "sm_100_B200"},
    # NVL72 racks: the collectives of their own 72-GPU NVLink domain (groups of 4 to 72);
    # no GEMM table of their own, so B200's (GB200: the same die; GB300's Blackwell Ultra
    # keeps B200's bf16/fp8 tensor-core rates per SM): an assumption the manifest names.
    "gb200-nvl72": {"xla": "sm_100_B200", "xla_collectives": "sm_100_GB200"},
    "gb300-nvl72": {"xla": "sm_100_B200", "xla_collectives": "sm_103"},
}
_XLA_DTYPE = {"bf16xbf16->bf16": "bfloat16", "f8e4m3fnxf8e4m3fn->bf16": "float8", "f32xf32->f32": "tfloat32"}
_XLA_COLLECTIVE = {"all-reduce": "all_reduce", "all-gather": "all_gather",
                   "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all"}
_FLASH_IMPLEMENTATION = "FlashAttention-2"
#: The tables the importer reads: file -> (its columns of words, its columns of numbers).
TABLES = {
    "op_gemm_xla_perf_table.csv": (("device_key", "dtype"),
                                   ("b", "m", "n", "k", "achieved_flops_per_s", "time_us_derived")),
    "op_flashattention_tflops.csv": (("gpu", "implementation", "pass_type", "causal"),
                                     ("head_dim", "n_heads", "seqlen", "batch", "tflops")),
    "comm_nccl_tests_allreduce.csv": (("system",), ("ranks", "nodes", "size_bytes", "oop_time_us", "ip_time_us")),
    "comm_xla_collective_perf_table.csv": (("device_key", "opcode", "replica_groups"),
                                           ("tensor_bytes", "time_us_derived")),
}
#: The column :func:`_read` adds: why a row with text in a number column is left out (else null).
_TEXT = "_text_in"
_NOT_POSITIVE = "latency missing or not a positive number"
_BAD_SHAPE = "shape not positive (a size missing, 0 or below)"
GEMM_PAST_PEAK = ("gemm of a precision with shapes faster than the profile's peak (a failed measurement of the "
                  "precision: every row of it)")
IMPORTER_VERSION = 1


@dataclass
class MicrobenchReport:
    """What :func:`import_microbench` wrote and what it left out."""

    hardware: str
    run_file: str
    rows: dict = field(default_factory=dict)  # "op/pass" -> rows
    left_out: dict = field(default_factory=dict)  # reason -> rows

    def table(self) -> str:
        lines = [f"{self.hardware}: {sum(self.rows.values())} rows -> {self.run_file}"]
        lines += [f"  {k:24s} {v:6d}" for k, v in sorted(self.rows.items())]
        lines += [f"  left out: {v} rows, {k}" for k, v in self.left_out.items()]
        return "\n".join(lines)


def _read(path: Path, sizes: dict) -> pd.DataFrame:
    """The table at ``path`` (one of :data:`TABLES`), its rows counted in ``sizes`` (by file
    name), its number columns read as numbers: a row with text in one is marked in column
    :data:`_TEXT`, left out with the hardware's rows (:func:`_leave_out_text`), counted."""
    if not path.exists():
        raise PrismError(f"{path}: missing; point the import at the microbench folder "
                         f"(data/microbench)", field=str(path))
    frame = read_csv(path, "restore it from data/microbench (git checkout data/microbench)")
    words, numbers = TABLES[path.name]
    missing = [c for c in words + numbers if c not in frame]
    if missing:
        raise PrismError(f"{path}: columns {missing} are missing; is this the published layout?", field=str(path))
    sizes[path.name] = len(frame)
    why = pd.Series(None, index=frame.index, dtype=object)
    for column in numbers:
        values = pd.to_numeric(frame[column], errors="coerce")
        text = values.isna() & frame[column].notna()
        # a row is counted once, under its first such column
        why = why.where(why.notna() | ~text, f"{path.name}: text in number column {column!r}")
        frame[column] = values
    return frame.assign(**{_TEXT: why})


def _leave_out(frame: pd.DataFrame, bad, reason: str, left_out: dict) -> pd.DataFrame:
    """``frame`` without the rows ``bad`` marks, counted under ``reason`` in ``left_out``."""
    if bad.any():
        left_out[reason] = left_out.get(reason, 0) + int(bad.sum())
    return frame[~np.asarray(bad)]


def _leave_out_text(frame: pd.DataFrame, left_out: dict) -> pd.DataFrame:
    """``frame`` without its rows of text in a number column (:func:`_read`), counted by file and column."""
    for reason in frame[_TEXT].dropna().unique():
        frame = _leave_out(frame, (frame[_TEXT] == reason).to_numpy(), reason, left_out)
    return frame


def _positive(values) -> np.ndarray:
    """Where ``values`` (a column, or a frame's rows) are finite numbers above 0; NaN is not."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v) & (v > 0)
    return ok.all(axis=1) if ok.ndim == 2 else ok


def gemm_rows(table: pd.DataFrame, key: str, hw: HardwareConfig, left_out: dict) -> pd.DataFrame:
    """Forward rows of one device from the XLA GEMM table, and the backward rows they imply;
    each row (forward or backward) left out is counted by reason in ``left_out``."""
    device = table[table.device_key == key]
    if device.empty and len(table):  # every GEMM of the hardware would go without a word
        devices = ", ".join(map(str, table.device_key.dropna().unique()[:8]))
        left_out[f"gemm: none, the table has no row of device_key={key} (only {devices})"] = 0
    t = _leave_out(device, ~device.dtype.isin(list(_XLA_DTYPE)).to_numpy(),
                   f"gemm dtype outside {', '.join(_XLA_DTYPE)} (the vocabulary's)", left_out)
    shapes = len(t)
    t = _leave_out_text(t, left_out).copy()  # after the count: its backward row goes too
    t["dtype"] = t.dtype.map(_XLA_DTYPE)
    # before the backward sums: a bad forward row would hide in a plausible backward latency
    t = _leave_out(t, ~_positive(t[["b", "m", "n", "k"]]), _BAD_SHAPE, left_out)
    t = _leave_out(t, ~_positive(t.time_us_derived), _NOT_POSITIVE, left_out)
    repeated = t.duplicated(["b", "m", "n", "k", "dtype"]).to_numpy()
    shapes -= int(repeated.sum())  # a repeat's backward is its first row's
    t = _leave_out(t, repeated, "gemm shape repeated in the table (its first row kept)", left_out)
    # from the time stored, not the table's FLOP/s column: the two could disagree
    flops = 2.0 * t.b * t.m * t.n * t.k / (t.time_us_derived * 1e-6)
    too_fast = pd.Series(flops > np.array([hw.peak(d) for d in t.dtype]), index=t.index)
    # a precision with shapes timed past the peak has a timing error that spares none of its rows
    suspect = t.dtype.isin(t.dtype[too_fast].unique()).to_numpy()
    t = _leave_out(t, suspect, GEMM_PAST_PEAK, left_out)
    fwd = t.rename(columns={"b": "batch"})[["batch", "m", "n", "k", "dtype", "time_us_derived"]]
    times = fwd.set_index(["batch", "m", "n", "k", "dtype"]).time_us_derived
    # bwd(m, n, k) = dX (m, k, n) + dW (k, n, m); both must have survived the filters.
    dx = times.reindex(pd.MultiIndex.from_arrays([fwd.batch, fwd.m, fwd.k, fwd.n, fwd.dtype])).to_numpy()
    dw = times.reindex(pd.MultiIndex.from_arrays([fwd.batch, fwd.k, fwd.n, fwd.m, fwd.dtype])).to_numpy()
    bwd = fwd.assign(time_us_derived=dx + dw).dropna(subset=["time_us_derived"])
    if len(bwd) < shapes:  # every shape of the table would give a backward row, those left out above too
        left_out["gemm backward: its forward or a gradient GEMM (m, k, n / k, n, m) left out"] = shapes - len(bwd)
    out = pd.concat([fwd.assign(**{"pass": "fwd"}), bwd.assign(**{"pass": "bwd"})], ignore_index=True)
    out["op"] = np.where(out.batch == 1, "gemm", "bmm")
    out.loc[out.op == "gemm", "batch"] = np.nan
    return out.rename(columns={"time_us_derived": "latency_us"}).assign(origin="microbench:xla-gemm")


def attention_rows(table: pd.DataFrame, gpu: str, left_out: dict) -> pd.DataFrame:
    """FlashAttention-2 forward and backward latencies of one GPU from the TFLOP/s figures;
    a fwd+bwd row left without a backward is counted in ``left_out``."""
    t = _leave_out_text(table[(table.gpu == gpu) & (table.implementation == _FLASH_IMPLEMENTATION)], left_out).copy()
    t["causal"] = t.causal.astype(str).str.lower().isin(["yes", "true", "1"])
    shape = ["batch", "n_heads", "seqlen", "head_dim", "causal"]
    # a repeated shape would pair each of its forward rows with each of its fwd+bwd rows
    t = _leave_out(t, t.duplicated(shape + ["pass_type"]).to_numpy(),
                   "attention shape repeated in the table (its first row kept)", left_out)
    fwd_flops = 4.0 * t.batch * t.n_heads * t.seqlen ** 2 * t.head_dim * np.where(t.causal, 0.5, 1.0)
    t["latency_us"] = fwd_flops * np.where(t.pass_type == "fwd", 1.0, 3.5) / (t.tflops * 1e12) * 1e6
    both = t[t.pass_type == "fwd"].merge(t[t.pass_type == "fwd+bwd"], on=shape, suffixes=("_f", "_fb"))
    unpaired = int((t.pass_type == "fwd+bwd").sum()) - len(both)
    if unpaired:
        left_out["attention fwd+bwd without the forward of its shape (no backward to derive)"] = unpaired
    fwd = t[t.pass_type == "fwd"][shape + ["latency_us"]].assign(**{"pass": "fwd"})
    bwd = both[shape].assign(latency_us=(both.latency_us_fb - both.latency_us_f).to_numpy(), **{"pass": "bwd"})
    out = pd.concat([fwd, bwd], ignore_index=True)
    out = out.rename(columns={"n_heads": "heads", "seqlen": "seq_q"})
    return out.assign(op="attention", kv_heads=out.heads, seq_kv=out.seq_q, dtype="bfloat16",
                      origin="microbench:flashattention-2")


def collective_rows(xla: pd.DataFrame, nccl: pd.DataFrame | None, keys: dict, left_out: dict) -> pd.DataFrame:
    """Intra-node collectives of one system: the XLA table, and nccl-tests where it has the node;
    a row with text in a number column is counted in ``left_out``."""
    key = keys.get("xla_collectives", keys["xla"])
    t = _leave_out_text(xla[(xla.device_key == key) & xla.opcode.isin(list(_XLA_COLLECTIVE))], left_out)
    # an unreadable group size is NaN, left out with the shapes that are not positive
    size = pd.to_numeric(t.replica_groups.astype(str).str.extract(r"x\s*(\d+)\s*devices", expand=False))
    frames = [pd.DataFrame({"op": t.opcode.map(_XLA_COLLECTIVE), "message_bytes": t.tensor_bytes,
                            "group_size": size, "latency_us": t.time_us_derived,
                            "origin": "microbench:xla-collectives"})]
    if nccl is not None and "nccl" in keys:
        n = nccl[nccl.system.astype(str).str.contains(keys["nccl"], regex=False)
                 & (nccl.nodes.isna() | (nccl.nodes == 1))]
        n = _leave_out_text(n, left_out)  # nodes of text among them: whether the row is one node's is unknown
        n = n[n.nodes == 1]
        # nccl-tests prints an out-of-place and an in-place average per size; the larger is
        # at times a first-call glitch (68 vs 13.5 us at 32 B), so the smaller is kept. A row
        # missing one has no smaller to keep: the other alone may be the glitch, so it is left out.
        for column in ("oop_time_us", "ip_time_us"):
            n = _leave_out(n, ~_positive(n[column]), f"comm_nccl_tests_allreduce.csv: {column!r} missing or not a "
                           f"positive number (the smaller of oop_time_us and ip_time_us is the sample)", left_out)
        frames.append(pd.DataFrame({"op": "all_reduce", "message_bytes": n.size_bytes, "group_size": n.ranks,
                                    "latency_us": n[["oop_time_us", "ip_time_us"]].min(axis=1),
                                    "origin": "microbench:nccl-tests"}))
    out = pd.concat(frames, ignore_index=True)
    return out.assign(**{"pass": "step"}, ranks_per_node=out.group_size, nodes=1, dtype="float32")


IMPORTER = "predictor.data.importers.microbench"


def check_target(hardware: str, out_dir, source_dir) -> MicrobenchReport | None:
    """Refuse, before any work, a ``hardware`` without published microbenchmarks or one
    whose run in ``out_dir`` came from other tables (``prism import-microbench`` checks
    every name it is given first, so that a bad one does not end the command with some runs
    written); the report of a run already imported from these tables (a stopped import's
    rerun goes on with the rest), else None."""
    if hardware not in SOURCES:
        raise PrismError(f"hardware={hardware}: no published microbenchmarks for it; those with some: "
                         f"{', '.join(SOURCES)}", field='hardware')
    target = store.store_folder(out_dir) / f"microbench-{hardware}.parquet"
    report = earlier_import(target, IMPORTER, IMPORTER_VERSION, _digest(source_dir))
    return MicrobenchReport(**report) if report else None


def _digest(source_dir) -> str:
    """The digest of the published tables an import reads (:data:`TABLES`)."""
    return sources_digest(Path(source_dir) / name for name in TABLES)


def import_microbench(source_dir, hardware: str, out_dir) -> MicrobenchReport:
    """Write ``<out_dir>/microbench-<hardware>.parquet`` from the published microbenchmarks.

    Examples
    --------
    >>> report = import_microbench("data/microbench", "h100-sxm", "samples/microbench")  # doctest: +SKIP
    >>> report.rows["gemm/fwd"]                                                                   # doctest: +SKIP
    375
    """
    earlier = check_target(hardware, out_dir, source_dir)
    if earlier:
        return earlier
    source_dir, keys, hw = Path(source_dir), SOURCES[hardware], load_hardware(hardware)
    if not source_dir.is_dir():
        raise PrismError(f"{source_dir}: {'a file' if source_dir.exists() else 'no such folder'}; give the folder of "
                         f"the published microbenchmark tables (data/microbench)", field=str(source_dir))
    left_out: dict = {}
    sizes: dict = {}  # table -> its rows, for the errors of an empty table and of an import that yields none
    frames = [gemm_rows(_read(source_dir / "op_gemm_xla_perf_table.csv", sizes), keys["xla"], hw, left_out)]
    if "xla_collectives" in keys:  # another device's GEMMs (SOURCES): the origin names it
        frames[0]["origin"] = f"microbench:xla-gemm:{keys['xla']}"
    if "flash" in keys:
        frames.append(attention_rows(_read(source_dir / "op_flashattention_tflops.csv", sizes), keys["flash"],
                                     left_out))
    nccl = _read(source_dir / "comm_nccl_tests_allreduce.csv", sizes) if "nccl" in keys else None
    frames.append(collective_rows(_read(source_dir / "comm_xla_collective_perf_table.csv", sizes), nccl, keys,
                                  left_out))
    empty = [name for name, n in sizes.items() if not n]
    if empty:  # every table read gives this hardware an op; one cut to its header would drop it unsaid
        held, fix = (("they hold only their headers", source_dir) if len(empty) > 1 else
                     ("it holds only its header line", source_dir / empty[0]))
        raise PrismError(f"{source_dir}: no rows for hardware={hardware} in {', '.join(empty)}: {held}; nothing "
                         f"written. The import needs every table it reads: restore data/microbench "
                         f"(git checkout data/microbench)", field=str(fix))
    rows = pd.concat(frames, ignore_index=True)
    shaped = np.ones(len(rows), bool)
    for op, at in rows.groupby("op").indices.items():
        shaped[at] = _positive(rows.iloc[at][[c for c in OPS[op].shape if SHAPE_COLUMNS[c] == "int64"]])
    rows = _leave_out(rows, ~shaped, _BAD_SHAPE, left_out)
    rows = _leave_out(rows, ~_positive(rows.latency_us), _NOT_POSITIVE, left_out).copy()
    if rows.empty:  # a run of no rows would be a store that reads as holding none
        why = (f"none of their {sum(sizes.values())} rows is a usable one of {hardware}'s (keys "
               f"{', '.join(sorted(set(keys.values())))})"
               + "".join(f"; left out: {v} rows, {k}" for k, v in left_out.items()))
        raise PrismError(f"{source_dir}: no rows for hardware={hardware} in {', '.join(sizes)}: {why}; nothing "
                         f"written. Give the folder of the published tables (data/microbench; git checkout "
                         f"data/microbench restores it), or leave hardware={hardware} out", field=str(source_dir))
    if "repeat" not in rows:
        rows["repeat"] = 0
    rows["repeat"] = rows["repeat"].fillna(0).astype(int)
    run_id = f"microbench-{hardware}"
    rows = rows.assign(hardware=hardware, device_name=hw.device.name, world_size=rows.get("group_size", 1),
                       run_id=run_id, host="published", timestamp=datetime.now(timezone.utc).isoformat(),
                       backend="published")
    rows["world_size"] = rows["world_size"].fillna(1).astype(int)
    for col in ("ranks_per_node", "nodes"):
        rows[col] = rows[col].fillna(1).astype(int)
    counts = rows.groupby(["op", "pass"]).size()
    target = store.store_folder(out_dir) / f"{run_id}.parquet"
    report = MicrobenchReport(hardware, str(target), {f"{o}/{p}": int(v) for (o, p), v in counts.items()}, left_out)
    store.write_run(rows, out_dir, run_id, {
        "importer": IMPORTER, "version": IMPORTER_VERSION, "hardware": hardware,
        "sources": sorted(set(rows.origin)), "left_out": left_out, "collective_scope": "intra-node",
        "sources_sha256": _digest(source_dir), "report": asdict(report)})
    return report
