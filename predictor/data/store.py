"""The sample store: Parquet files of timed operator repeats (docs/method.md, "Sample store").

One file per sampling run, never rewritten; every row is one timed repeat. A run in
progress writes its rows as small, complete Parquet *parts* in a hidden folder beside
its final file (each part written to a temporary name and renamed, so a part is either
whole or absent). Closing the run — at its end, on Ctrl-C, or when a later run finds
the parts of a killed one — joins the parts into ``<run_id>.parquet`` the same way.
A killed run therefore loses at most the rows it had not flushed yet.

Several processes may write parts of one run (the compute loop and the rank 0 of a
``torchrun`` collective job; every rank of a cluster job); each uses its own part prefix,
and only the run's *owner* (rank 0) writes its metadata. The ranks of a cluster job also
leave a *rank record* each in the parts folder (:func:`mark_rank`: rank, host, node,
status, rows), which the join copies into the run's metadata under ``"ranks"``: a run
names every rank that wrote into it and how each ended. One sampling run writes into a
store at a time (:func:`writer_lock`).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from predictor.core.errors import PrismError
from predictor.core.files import MANIFEST, checked_path, held_lock, writable, write_atomically
from predictor.core.ops import DTYPE_BYTES, OPS, SHAPE_COLUMNS, unknown_op_message

METADATA_KEY = b"prism"
_PARTS_SUFFIX = ".parts"
_RUN_META = "run.json"
_LOCK = ".writer.lock"
_RANK_RECORD = "rank-{:05d}.json"

_ARROW = {"int64": pa.int64(), "bool": pa.bool_(), "string": pa.string()}

SCHEMA = pa.schema(
    [("op", pa.string()), ("pass", pa.string()), ("dtype", pa.string())]
    + [(c, _ARROW[t]) for c, t in SHAPE_COLUMNS.items()]
    + [
        ("latency_us", pa.float64()),
        ("repeat", pa.int32()),
        ("hardware", pa.string()),
        ("device_name", pa.string()),
        ("world_size", pa.int32()),
        ("ranks_per_node", pa.int32()),
        ("nodes", pa.int32()),
        ("run_id", pa.string()),
        ("host", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("torch_version", pa.string()),
        ("backend", pa.string()),
        ("origin", pa.string()),  # sampled | framework | ett | trace | microbench:...
        ("rank", pa.int32()),  # the rank that timed the row (a collective: its group's lowest); null: one process
        ("steal", pa.float64()),  # share of the busy CPU time the hypervisor took during the call; null: not known
    ]
)
COLUMNS = tuple(SCHEMA.names)
REQUIRED = ("op", "pass", "latency_us", "repeat", "hardware")


def new_run_id(hardware: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{hardware}-{stamp}-{uuid.uuid4().hex[:6]}"


def atomic_write_table(table: pa.Table, path: Path) -> None:
    write_atomically(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def _to_table(rows: list[dict], metadata: dict) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()})


class RunWriter:
    """Writes one run's rows as parts; :meth:`close` joins them into the run's file.

    Parameters
    ----------
    output_dir : path of the store (a folder of runs).
    run_id : the run's id; its file becomes ``<output_dir>/<run_id>.parquet``.
    metadata : JSON-serialisable run metadata (plan, versions, clock, warm-up, ...),
        stored in the Parquet key-value metadata under ``prism``.
    prefix : part-name prefix, distinct for each process writing into the run.
    owner : whether this writer writes the run's metadata (``run.json``): the one process
        that created the run; the other ranks of a cluster job write parts only.

    Examples
    --------
    >>> w = RunWriter(tmp_dir, "cpu-run", {"plan": "quick"})        # doctest: +SKIP
    >>> w.add([{"op": "gemm", "pass": "fwd", "latency_us": 3.1, ...}])  # doctest: +SKIP
    >>> w.flush(); path = w.close()                                  # doctest: +SKIP
    """

    def __init__(self, output_dir, run_id: str, metadata: dict, prefix: str = "part", owner: bool = True):
        self.output_dir = Path(output_dir)
        self.run_id = run_id
        self.metadata = metadata
        self.prefix = prefix
        self.owner = owner
        self.parts_dir = self.output_dir / f".{run_id}{_PARTS_SUFFIX}"
        if owner:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            self._write_run_meta()
        elif not (self.parts_dir / _RUN_META).exists():
            raise PrismError(f"output_dir={output_dir}: run {run_id} has no open parts folder to write into (it was "
                             f"closed, or the store is not shared between the ranks' hosts); sample into a folder "
                             f"every rank sees", field="output_dir")
        self._rows: list[dict] = []
        self._n_parts = len(list(self.parts_dir.glob(f"{prefix}-*.parquet")))
        self.rows_written = 0

    def _write_run_meta(self) -> None:
        tmp = self.parts_dir / f".{_RUN_META}.{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps(self.metadata))
        os.replace(tmp, self.parts_dir / _RUN_META)

    def update_metadata(self, **fields) -> None:
        self.metadata.update(fields)
        if self.owner:
            self._write_run_meta()

    def add(self, rows: list[dict]) -> None:
        self._rows.extend(rows)

    def flush(self) -> None:
        """Write the buffered rows as one whole part (or nothing if none are buffered)."""
        if not self._rows:
            return
        if not self.parts_dir.is_dir():  # joined without this writer: a rank reported lost
            raise PrismError(f"{self.parts_dir}: run {self.run_id} was closed without this writer's last "
                             f"{len(self._rows)} row(s) (reported lost or hung); a resumed run measures them again",
                             field="output_dir")
        part = self.parts_dir / f"{self.prefix}-{self._n_parts:06d}.parquet"
        atomic_write_table(_to_table(self._rows, self.metadata), part)
        self._n_parts += 1
        self.rows_written += len(self._rows)
        self._rows = []

    def close(self) -> Path | None:
        """Flush, then join all parts of the run into its final file."""
        self.flush()
        return finish_run(self.parts_dir)


@contextmanager
def writer_lock(output_dir, key: str = "output_dir", writer: str = "prism sample is writing into this store",
                elsewhere: str = "sample into another output_dir") -> Iterator[str | None]:
    """Hold the writer lock of the store ``output_dir`` for the block
    (:func:`~predictor.core.files.held_lock`): two sampling runs into one store would both
    find the same tasks to do and measure them twice, competing for the cores. ``prism train``
    holds the same lock on its models folder (``key`` models_dir, with its own ``writer`` and
    ``elsewhere`` wording): two trains into one folder would each replace the other's set.

    Raises
    ------
    PrismError
        naming the folder, the holder and the fix while another live writer holds it.
    """
    path = Path(output_dir) / _LOCK

    def busy(holder: dict) -> str:
        return (f"{key}={output_dir}: another {writer} (pid {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')}, since {holder.get('started', '?')}). "
                f"Wait for it to end or {elsewhere}; if that run is gone, delete {path}")
    with held_lock(path, busy, key) as note:
        yield note


def store_around(path) -> Path | None:
    """The sample store that ``path`` is, or is inside: the nearest of it and its parents
    holding a run file PRISM wrote (its metadata); None where there is none."""
    path = Path(path).resolve()
    for folder in (path, *path.parents):
        for run in sorted(p for p in folder.glob("*.parquet") if p.is_file() and not p.name.startswith(".")):
            try:
                if read_run_metadata(run):
                    return folder
            except (PrismError, OSError, ValueError):
                continue
    return None


def store_folder(out, key: str = "out") -> Path:
    """``out`` as the store (a folder) a run is written into, checked before any work; one
    :class:`PrismError` naming ``key`` where it ends in .parquet: that names a run file, and a
    folder of that name inside a store would read as a damaged run."""
    path = checked_path(key, out)
    if path.suffix.lower() == ".parquet":
        raise PrismError(f"{key}={out}: names a run file, but {key} is the store, the folder the run's file is "
                         f"written into; give the folder, e.g. {key}={path.parent}", field=key)
    if (path / MANIFEST).is_file():  # the next prism train into it would replace the folder, runs and all
        raise PrismError(f"{key}={out}: a saved model set's folder ({MANIFEST}), which prism train replaces whole; "
                         f"write samples into a store of their own, e.g. {key}=samples", field=key)
    return path


def write_run(rows: pd.DataFrame, output_dir, run_id: str, metadata: dict) -> Path:
    """Write a whole run at once (importers): ``<output_dir>/<run_id>.parquet``, never overwriting.

    ``rows`` holds any subset of :data:`COLUMNS` (missing ones become null).
    """
    output_dir = writable("out", store_folder(output_dir), folder=True)
    path = output_dir / f"{run_id}.parquet"
    if path.exists():
        raise PrismError(f"{path} already exists; a run id is never reused", field=str(path))
    n = len(rows)
    table = pa.Table.from_arrays(
        [pa.array(rows[f.name], type=f.type, from_pandas=True) if f.name in rows else pa.nulls(n, f.type)
         for f in SCHEMA], schema=SCHEMA)
    atomic_write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()}), path)
    return path


def mark_rank(parts_dir, rank: int, record: dict) -> None:
    """Write (or replace) rank ``rank``'s record in a run's parts folder, whole or not at
    all: ``record`` is JSON (host, node, status, rows, ... and ``updated``, set here)."""
    path = Path(parts_dir) / _RANK_RECORD.format(rank)
    body = json.dumps({**record, "rank": rank, "updated": datetime.now(timezone.utc).isoformat()})
    write_atomically(path, lambda tmp: tmp.write_text(body))


def rank_records(parts_dir) -> dict[int, dict]:
    """The rank records of a run's parts folder, by rank ({} for a one-process run)."""
    records = {}
    for path in sorted(Path(parts_dir).glob(_RANK_RECORD.replace("{:05d}", "*"))):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # written whole or not at all; an unreadable one is a damaged disk's
        records[int(record["rank"])] = record
    return records


def finish_run(parts_dir: Path) -> Path | None:
    """Join a run's parts into ``<run_id>.parquet`` and remove the parts folder; the rank
    records, if any, go into the metadata under ``"ranks"``.

    Returns the run's file, or None when the run wrote no row.
    """
    parts_dir = Path(parts_dir)
    run_id = parts_dir.name[1: -len(_PARTS_SUFFIX)]
    metadata = json.loads((parts_dir / _RUN_META).read_text())
    ranks = rank_records(parts_dir)
    if ranks:
        metadata["ranks"] = [ranks[r] for r in sorted(ranks)]
    parts = sorted(parts_dir.glob("*.parquet"))
    final = parts_dir.parent / f"{run_id}.parquet"
    if parts:
        table = pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()})
        if final.exists():  # never overwrite a finished run
            raise PrismError(f"{final} already exists; a run id is never reused", field=str(final))
        atomic_write_table(table, final)
    shutil.rmtree(parts_dir)
    return final if parts else None


def recover_unfinished(output_dir) -> list[Path]:
    """Finish the runs that were killed before they could close (their parts remain)."""
    recovered = []
    for parts_dir in sorted(Path(output_dir).glob(f".*{_PARTS_SUFFIX}")):
        if (parts_dir / _RUN_META).exists():
            path = finish_run(parts_dir)
            if path is not None:
                recovered.append(path)
    return recovered


def run_files(path) -> list[Path]:
    """The run files of a store: ``path`` itself if it is a file, else its ``*.parquet``."""
    path = checked_path("samples", path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        what = "is no file or folder (a device, a socket, a pipe)" if path.exists() else "does not exist"
        raise PrismError(f"samples: {path} {what}; pass a folder of runs or one .parquet file", field='samples')
    runs = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
    folder = next((p for p in runs if p.is_dir()), None)  # an import given out=STORE/x.parquet made a store in it
    if folder is not None:
        raise PrismError(f"{folder}: a folder named like a run file, not a run; a store holds its runs directly: move "
                         f"the runs in it up into {path} (then remove it), or read it as a store of its own "
                         f"(samples={folder})", field=str(folder))
    return runs


def no_runs(path) -> str:
    """What a store without a run file holds instead, and the command that gives it runs:
    an unfinished run is recovered, published tables and traces are imported, a model set
    is no store at all (its models are read through ``models_dir``)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} holds no sample rows; sample again, or give the store (folder) its runs are in"
    runs = run_files(path)
    if runs:
        rows = sum(_open(f).metadata.num_rows for f in runs)
        what = ("no rows" if not rows else f"{rows} rows, none an op's own timing (a co-run phase's or a collective "
                                           f"gap curve's rows only)")
        return (f"{path} holds {len(runs)} sample run(s) with {what} ({', '.join(p.name for p in runs[:3])}"
                f"{', ...' if len(runs) > 3 else ''}); sample again: prism sample output_dir={path}")
    for kind in (_unfinished, _model_set, _model_sets, _stores, _traces, _ett, _tables):
        advice = kind(path)
        if advice:
            return advice
    return f"{path} holds no sample runs (.parquet); fill it with prism sample output_dir={path}"


def _unfinished(path: Path) -> str | None:
    runs = sorted(p.name[1: -len(_PARTS_SUFFIX)] for p in path.glob(f".*{_PARTS_SUFFIX}") if p.is_dir())
    if not runs:
        return None
    one = len(runs) == 1
    return (f"{path} holds {'an unfinished run' if one else f'{len(runs)} unfinished runs'} ({', '.join(runs)}: "
            f"its parts, left by a prism sample stopped before it could join them into a run file): run the same "
            f"prism sample command again (output_dir={path}) to recover {'it' if one else 'them'}; a prism sample "
            f"still writing into this store is named then")


def _model_set(path: Path) -> str | None:
    manifest = path / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        hardware = json.loads(manifest.read_text()).get("hardware") or path.name
    except (OSError, ValueError, AttributeError):
        hardware = path.name  # prism train names the set's folder after its hardware
    models = len(list(path.glob("*.ubj.gz")))
    return (f"{path} is a trained model set of {hardware} (manifest.json, {models} model files), not a sample "
            f"store (a folder of runs written by prism sample or prism import-*): give the store instead; these "
            f"models are read as models_dir={path.parent}, e.g. prism evaluate samples=STORE hardware={hardware} "
            f"models_dir={path.parent}")


def _model_sets(path: Path) -> str | None:
    sets = sorted(p.name for p in path.iterdir() if (p / "manifest.json").is_file())
    if not sets:
        return None
    return (f"{path} holds trained model sets ({', '.join(sets)}), not sample runs: give a sample store instead "
            f"(a folder of runs written by prism sample or prism import-*); these models are read as "
            f"models_dir={path}, e.g. prism predict model=small hardware={sets[0]} models_dir={path}")


def _stores(path: Path) -> str | None:
    stores = sorted(p.name for p in path.iterdir() if p.is_dir() and any(p.glob("*.parquet")))
    if not stores:
        return None
    return (f"{path} holds no runs itself but sample stores in its folders ({', '.join(stores)}); a store holds "
            f"its runs directly: give one of them, e.g. {path / stores[0]}")


def _traces(path: Path) -> str | None:
    traces = [p for p in sorted(path.iterdir()) if p.name.endswith((".json", ".json.gz")) and _is_trace(p)]
    if not traces:
        return None
    files = " ".join(sorted({f"{path}/*.json.gz" if p.suffix == ".gz" else f"{path}/*.json" for p in traces}))
    return (f"{path} holds {len(traces)} profiler trace(s), not sample runs; import them into a store first: "
            f"prism import-trace {files} out=samples/trace hardware=NAME (the profile of the machine traced; a "
            f"GPU trace names its own, leave it out)")


def _is_trace(path: Path) -> bool:
    """Whether ``path`` starts like a Chrome trace (PyTorch's profiler writes its schema first)."""
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt", errors="replace") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError, zlib.error):
        return False
    return '"traceEvents"' in head or '"schemaVersion"' in head


def _ett(path: Path) -> str | None:
    """An ETT cluster folder (its operator/ and nccl/ tables), or a folder of them."""
    def cluster(p: Path) -> bool:
        return (p / "operator").is_dir() or (p / "nccl").is_dir()
    if cluster(path):
        return (f"{path} is an ETT cluster folder (published tables), not a sample store; import it into one "
                f"first: prism import-ett {path} out=samples/ett")
    clusters = sorted(p for p in path.iterdir() if p.is_dir() and cluster(p))
    if not clusters:
        return None
    return (f"{path} holds ETT cluster folders ({', '.join(p.name for p in clusters)}), not sample runs; import "
            f"each into a store first, e.g. prism import-ett {clusters[0]} out=samples/ett")


def _tables(path: Path) -> str | None:
    from predictor.data.importers.microbench import TABLES  # here: that importer imports this module
    tables = [p.suffix for p in path.iterdir() if p.suffix in (".csv", ".json", ".gz")]
    if not tables:
        return None
    held = f"{path} holds no sample runs (.parquet) but {len(tables)} table(s) ({', '.join(sorted(set(tables)))})"
    if any((path / name).is_file() for name in TABLES):
        return (f"{held}, the published microbenchmarks; import them into a store first: prism import-microbench "
                f"{path} out=samples/microbench")
    return (f"{held}; a store is written by prism sample or prism import-microbench (published microbenchmarks, "
            f"as data/microbench), import-ett (an ETT cluster folder) or import-trace (profiler traces)")


def read_run_metadata(path) -> dict:
    """The run metadata of one file (``{}`` for files written by other tools)."""
    meta = _open(path).schema_arrow.metadata or {}
    return json.loads(meta.get(METADATA_KEY, b"{}"))


def without_metadata(path) -> list[Path]:
    """The run files of ``path`` that carry no PRISM run metadata: tables written by another
    tool, or PRISM's with their Parquet key-value metadata stripped (``prism train`` says so)."""
    return [f for f in run_files(path) if not read_run_metadata(f)]


def thread_counts(path, hardware: str) -> dict[int, Path]:
    """The ``sampling.threads`` of the store's runs of ``hardware`` that record one (imported
    runs do not): thread count -> the first run file sampled at it. An op's time at one
    count is not its time at another, so a store holds one (:func:`refuse_mixed_threads`)."""
    counts: dict[int, Path] = {}
    for f in run_files(path):
        meta = read_run_metadata(f)
        if meta.get("hardware") == hardware and meta.get("threads") is not None:
            counts.setdefault(int(meta["threads"]), f)
    return counts


def refuse_mixed_threads(path, hardware: str, key: str = "samples", threads: int | None = None) -> None:
    """One error naming a run of each count where ``path`` holds runs of ``hardware`` sampled
    at different ``sampling.threads``: trained together, the gap between the counts (tens of
    times for a GEMM) would be read as the op's variability. With ``threads`` (a run about to
    resume into ``path``), a run at any other count is refused: its tasks would read as done."""
    counts = thread_counts(path, hardware)
    if threads is not None:
        other = {n: f for n, f in counts.items() if n != threads}
        if other:
            n, f = min(other.items())
            raise PrismError(f"{key}={path}: holds runs of {hardware} sampled at sampling.threads={n} ({f.name}); an "
                             f"op's time at sampling.threads={threads} is another measurement. Sample into another "
                             f"{key}, or set sampling.threads={n} to resume this one", field=key)
    elif len(counts) > 1:
        runs = ", ".join(f"sampling.threads={n} ({f.name})" for n, f in sorted(counts.items()))
        raise PrismError(f"{key}={path}: holds runs of {hardware} sampled at different thread counts: {runs}; an op's "
                         f"time at one count is not its time at another. Keep one count's runs in this folder (move "
                         f"the others to a folder of their own) and train each apart", field=key)


def _open(path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        if Path(path).suffix.lower() != ".parquet":  # a table given where a store goes, not a torn file of one
            raise PrismError(f"{path}: a {Path(path).suffix or 'file without a suffix'}, not a sample store; a store "
                             f"is a folder (or a .parquet file) written by prism sample or prism import-*",
                             field=str(path)) from None
        raise PrismError(
            f"{path}: not a readable Parquet file ({exc}). It is truncated or corrupt: "
            f"move it out of the store (nothing was changed) and run again"
        ) from None


def _check_rows(f: Path, df: pd.DataFrame) -> None:
    """One error naming file and column where a row cannot be a sample: a pass its op is not
    timed in, or text in a numeric column (a file written by other tools than PRISM's);
    numbers written as text are converted in place."""
    passes = df.groupby("op")["pass"].unique()
    for op, seen in passes.items():
        wrong = sorted(set(map(str, seen)) - set(OPS[op].passes))
        if wrong:
            raise PrismError(f"{f}: column 'pass': {op} is timed in {', '.join(OPS[op].passes)}, not "
                             f"{', '.join(map(repr, wrong))}", field=str(f))
    numeric = ["latency_us", *(c for c, kind in SHAPE_COLUMNS.items() if kind in ("int64", "double"))]
    for column in (c for c in numeric if c in df and not pd.api.types.is_numeric_dtype(df[c])):
        values = pd.to_numeric(df[column], errors="coerce")
        text = df[column][values.isna() & df[column].notna()]
        if len(text):
            raise PrismError(f"{f}: column {column!r} holds text ({text.iloc[0]!r} in {len(text)} row(s)); it must "
                             f"be numeric", field=str(f))
        df[column] = values  # numbers written as text ('12.5'): read as the numbers they are
    if "dtype" in df:
        unknown = sorted(set(df["dtype"].dropna().astype(str)) - set(DTYPE_BYTES))
        if unknown:
            raise PrismError(f"{f}: column 'dtype': {unknown[0]!r} is no precision PRISM knows; choose one of "
                             f"{', '.join(DTYPE_BYTES)}", field=str(f))
    for op, rows in df.groupby("op"):
        empty = [c for c in OPS[op].shape if c not in rows or rows[c].isna().any()]
        if empty:
            state = "missing" if empty[0] not in rows else "empty in some rows"
            raise PrismError(f"{f}: column {empty[0]!r}: {state}, and every {op} row needs its shape "
                             f"({', '.join(OPS[op].shape)}); sample again or drop those rows", field=str(f))
        for column in (c for c in OPS[op].shape if c in rows and SHAPE_COLUMNS[c] == "int64"):
            bad = rows[column][rows[column] <= 0]
            if len(bad):
                raise PrismError(f"{f}: column {column!r}: {len(bad)} {op} row(s) with {column}={bad.iloc[0]:g}; a "
                                 f"shape is a positive size: drop those rows or sample again", field=str(f))


def refuse_copied_run(f: Path, df: pd.DataFrame, runs: dict) -> None:
    """One error where ``f`` holds a run that another file of the store holds (``runs``: run
    id -> the file read first): a run file copied under another name, whose rows would be
    counted twice and trained on as twice the evidence."""
    if "run_id" not in df:
        return
    for run_id in df["run_id"].dropna().unique():
        first = runs.setdefault(run_id, f)
        if first != f:
            raise PrismError(f"{first} and {f} both hold run {run_id} (one is a copy of the other): its rows would "
                             f"be read twice. Remove one copy from {f.parent} and run again", field=str(f))


def read_samples(path, ops=None) -> pd.DataFrame:
    """Read every row of a store (a folder of runs, or one file), validated.

    Parameters
    ----------
    path : folder or file.
    ops : optional iterable of op names to keep.

    Raises
    ------
    PrismError
        naming the file and the problem (unreadable, missing column, unknown op, a run two
        files hold).
    """
    if isinstance(ops, str):  # one op, not its letters
        ops = [ops]
    unknown = sorted(set(ops or ()) - set(OPS))
    if unknown:
        raise PrismError(f"ops: {unknown_op_message(unknown[0])}", field="ops")
    frames, runs = [], {}
    for f in run_files(path):
        pf = _open(f)
        missing = [c for c in REQUIRED if c not in pf.schema_arrow.names]
        if missing:
            raise PrismError(f"{f}: missing column(s) {', '.join(missing)}; "
                             f"a sample file needs at least {', '.join(REQUIRED)}", field=str(f))
        try:
            df = pf.read().to_pandas()
        except (pa.ArrowInvalid, OSError) as exc:
            raise PrismError(f"{f}: cannot read its rows ({exc}); the file is truncated "
                             f"or corrupt: move it out of the store and run again", field=str(f)) from None
        unknown = sorted(set(df["op"]) - set(OPS))
        if unknown:
            raise PrismError(f"{f}: column 'op': {unknown_op_message(unknown[0])}", field=str(f))
        _check_rows(f, df)
        refuse_copied_run(f, df, runs)
        if ops is not None:
            df = df[df["op"].isin(list(ops))]
        frames.append(df)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    return pd.concat(frames, ignore_index=True)
