"""``prism predict-batch``: a table of training jobs in, each job's predicted step time
beside it.

The table's columns, units, blanks and spellings are :mod:`predictor.data.runs_table`'s;
:func:`predictor.data.published.row_workload` turns a row into specs. Every row comes out
with its input cells and :data:`OUTPUT_COLUMNS`: the run's median step (s) at the
p5/p10/p50/p90/p95 of its predictive distribution (the composed median, and the doubt
about it: :mod:`predictor.analyses.doubt`; the p50 is the job's median step, ``prism predict``'s
"median step"), the within-run spread p95/p50 (step-time
variability) and memory per GPU (GiB), or blank with ``pred_status`` naming the column to fix (``ok``
otherwise); ``pred_fits``, whether that memory fits the GPU (a job that does not fit is still
predicted, as ``prism predict`` does, and flagged); ``pred_hardware``, the profile the row ran
on; ``pred_assumed``, what was assumed for its blank and free-text cells; ``pred_band_basis``,
what its interval rests on (the runs like it and how far they measured from PRISM's median:
:func:`~predictor.engine.doubt.alike_words`); and ``pred_key``, the row's index in the input
and a hash of its cells and of the settings (draws, seed, models_dir and the fingerprint of
the models in it), by which a rerun recognises the rows already written.

A row's prediction depends on that row alone, drawn with ``seed``: the same row predicts
the same in any table, and in any worker: a table of :data:`POOL_ROWS` rows or more is
predicted by ``workers`` processes (the CPUs this process may use, by default), a chunk each,
while this one writes the chunks as they come. Rows that share a model, layout and hardware share their work:
results are kept by the specs' values (:attr:`~predictor.data.published.RowJob.key`), each
chunk of rows looks its operator calls up in one query per op and hardware
(:class:`~predictor.latency.lookup.QuantileCache`), and each decomposition is made once.

Rows are written to ``out`` a chunk at a time, each chunk one write followed by a flush,
so Ctrl-C keeps every finished chunk; running the same command again skips the rows
``out`` already holds predicted (a torn last line, rows of an edited input and rows that
failed, whose cause may since be fixed, are predicted again) and leaves ``out`` in input
order, one row per input row at every moment: a row predicted again replaces its old row
(the whole file rewritten, temporary file and rename), and one predicted again alike is not
written, so a rerun of a finished table writes nothing new; an ``out`` holding none of the
table's rows is another table's, and one holding its rows predicted with other settings
(draws, seed, models_dir, models retrained in it) another run's: each is refused rather
than replaced. So is, before anything is written, a ``models_dir`` holding models of none
of the table's hardware.
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from predictor.analyses.rows import RowLookups, row_job
from predictor.core.errors import PrismError
from predictor.core.files import MANIFEST, held_lock, write_atomically
from predictor.core.profiles import load_hardware
from predictor.core.specs import check_draws, check_number
from predictor.data.published import RowJob, in_table_terms, row_hardware
from predictor.data.runs_table import (
    BY_NAME,
    REQUIRED,
    Table,
    cell,
    check_output,
    header_columns,
    missing_columns,
    read_table,
)
from predictor.engine.doubt import alike_words
from predictor.engine.predictor import DEFAULT_QUANTILES
from predictor.latency.artifacts import held_sets, holds_models, models_dir, unsigned_text

#: Monte Carlo draws per row: the median's sampling error at 500 draws is ~0.2% of a step
#: (benchmarks/bench_batch.py prints what fewer draws cost on the published runs).
DRAWS = 500
#: The run's median step (s) at the predictive distribution's quantiles (what a measured
#: step is compared with), the within-run spread, and memory per GPU (GiB).
PREDICTED = ("pred_iter_time_s_p50", "pred_iter_time_s_p5", "pred_iter_time_s_p10", "pred_iter_time_s_p90",
             "pred_iter_time_s_p95", "pred_step_jitter_p95_over_p50", "pred_mem_gib")
OUTPUT_COLUMNS = (*PREDICTED, "pred_status", "pred_fits", "pred_hardware", "pred_assumed", "pred_band_basis",
                  "pred_key")
#: Rows per chunk (one model query per op for all of them, one write to ``out``): the
#: first chunks are smaller, so that the progress bar and ``out`` show rows early.
CHUNK_ROWS = 256
FIRST_CHUNK_ROWS = 16
#: Rows between two plain progress lines on stderr where it is no terminal (a log, a
#: scheduler's output file), where the bar cannot draw: a long table is not silent for minutes.
PROGRESS_ROWS = 256
#: Rows to predict from which a pool of worker processes is worth its start (each loads the
#: models and imports the predictor, about a second): below it one process predicts them all.
POOL_ROWS = 128
#: The most worker processes predict-batch starts: more than any host's cores a table needs.
MAX_WORKERS = 256


def default_workers() -> int:
    """The CPUs this process may run on (its affinity, as a scheduler's allocation sets it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


_WORKER: BatchPredictor | None = None


def _start_worker(draws: int, seed: int, models_root, parent: int) -> None:
    """A pool worker: its own predictor (models, caches). Ctrl-C is the parent's to handle; the
    worker writes nothing to the terminal (its results and errors go back to the parent, and a
    caller reading the parent's output to its end must not wait on a worker), and it ends when
    the parent (pid ``parent``) is gone: killed, it cannot stop its pool, and it may be gone
    before this worker starts."""
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()
    _WORKER = BatchPredictor(draws, seed, models_root)


def _predict_in_worker(rows: list[dict]) -> list[RowPrediction]:
    return _WORKER.predict(rows)


@dataclass(frozen=True)
class RowPrediction:
    """One row's outcome: ``values`` in :data:`PREDICTED` order, None where it failed."""

    values: tuple[float, ...] | None
    status: str
    assumed: str
    fits: bool | None = None  # the memory per GPU within the profile's capacity
    hardware: str = ""  # the profile the row was predicted on
    job: str = ""  # a digest of the job's specs (RowJob.key): rows alike share it, in any process
    band_basis: str = ""  # what its predictive interval rests on, in words (engine.doubt.alike_words)


def _failure(exc: Exception) -> str:
    """The status of a row that cannot be predicted: the column and the fix."""
    if not isinstance(exc, PrismError):  # a bug below: say so, and let the batch go on
        return f"not predicted ({type(exc).__name__}: {exc}); please report this row"
    return str(in_table_terms(exc))


class BatchPredictor:
    """Predicts table rows with ``draws`` draws each from ``seed``, keeping for the rows
    still to come what every row shares: hardware profiles, trained models, operator
    quantiles per hardware, and each distinct job's result."""

    def __init__(self, draws: int = DRAWS, seed: int = 0, models_root=None):
        self.draws, self.seed = draws, seed
        self.rows = RowLookups(models_root)
        # RowJob.key -> (values, status, fits, band basis)
        self.results: dict[tuple, tuple[tuple[float, ...] | None, str, bool | None, str]] = {}

    def predict(self, rows: list[Mapping]) -> list[RowPrediction]:
        """One prediction per row (a mapping of column to cell), in order."""
        jobs: list[RowJob | str] = []
        for row in rows:
            try:
                jobs.append(self.rows.job(row))
            except Exception as exc:  # no cell may stop the batch: a bug below fails its row alone
                jobs.append(_failure(exc))
        new = {job.key: job for job in jobs if isinstance(job, RowJob) and job.key not in self.results}
        self._predict_new(new)
        out = []
        for job in jobs:
            if isinstance(job, str):
                out.append(RowPrediction(None, job, ""))
            else:
                values, status, fits, basis = self.results[job.key]
                digest = hashlib.sha1(repr(job.key).encode()).hexdigest()[:16]
                out.append(RowPrediction(values, status, "; ".join(job.assumed), fits, job.hardware.name, digest,
                                         basis))
        return out

    def _predict_new(self, jobs: dict[tuple, RowJob]) -> None:
        predictor = self.rows.predictor
        todo = {}
        for key, row in jobs.items():
            job = row_job(row)
            try:
                predictor.workload(job)
                todo[key] = job
            except Exception as exc:
                self.results[key] = (None, _failure(exc), None, "")
        predictor.prefetch(todo.values())  # every call of the chunk on one hardware in one query per op
        composed = {}
        for key, job in todo.items():
            try:
                composed[key] = predictor.composed(job, self.draws, self.seed, persistent=False, doubt=False)
            except Exception as exc:
                self.results[key] = (None, _failure(exc), None, "")
        # the doubt about every job's median in one query of its model
        for key, error in zip(composed, predictor.add_doubts(list(composed.values()))):
            if error is not None:
                self.results[key] = (None, _failure(error), None, "")
        for key, c in composed.items():
            if c.doubt is None:
                continue
            job = c.job
            try:
                q = dict(zip(DEFAULT_QUANTILES, c.doubt.quantiles_s))
                v50, v95 = c.dist.quantile([0.5, 0.95])
                # the job's median step as prism predict reports it: the predictive distribution's
                values = (float(q[0.5]), *(float(q[a]) for a in (0.05, 0.1, 0.9, 0.95)), float(v95 / v50),
                          float(c.memory.total_gib))
                if all(math.isfinite(v) and v > 0 for v in values):
                    basis = alike_words(c.doubt.alike) if c.doubt.alike else ""
                    self.results[key] = (values, "ok", c.memory.fits(job.hardware), basis)
                else:
                    self.results[key] = (None, "not predicted: the sizes lie beyond what the models and priors "
                                               "cover (a step time that is not a positive number); check them", None,
                                         "")
            except Exception as exc:
                self.results[key] = (None, _failure(exc), None, "")


def predict_table(table: pd.DataFrame, draws: int = DRAWS, models_root=None, seed: int = 0) -> pd.DataFrame:
    """``table`` with :data:`PREDICTED`, ``pred_status``, ``pred_assumed`` and
    ``pred_band_basis`` added (one prediction per row; NaN where ``pred_status`` is not
    ``ok``). A row (a Series) or a list of row mappings is read as a one-row or many-row
    table; what every row shares (draws, seed, the models' folder, the required columns) is
    checked once, up front."""
    if isinstance(table, pd.Series):
        table = table.to_frame().T
    elif isinstance(table, list | tuple):
        table = pd.DataFrame(list(table))
    if not isinstance(table, pd.DataFrame):
        raise PrismError(f"table: a pandas DataFrame of runs, one row per job (got {type(table).__name__})",
                         field="table")
    check_draws("draws", draws)
    check_number("seed", seed, integer=True, zero=True)
    models_dir(models_root)  # a folder named must exist
    names = {str(c).strip().lower() for c in table.columns}
    missing = missing_columns(names)
    if missing and len(table):
        raise PrismError(f"table: no column {', '.join(missing)} (required: {', '.join(REQUIRED)})", field="table")
    rows = [{str(name).strip().lower(): value for name, value in r.items()} for r in table.to_dict("records")]
    predictions = BatchPredictor(draws, seed, models_root).predict(rows)
    out = table.copy()
    for i, column in enumerate(PREDICTED):
        out[column] = [p.values[i] if p.values else math.nan for p in predictions]
    out["pred_status"] = [p.status for p in predictions]
    out["pred_fits"] = [p.fits for p in predictions]
    out["pred_hardware"] = [p.hardware for p in predictions]
    out["pred_assumed"] = [p.assumed for p in predictions]
    out["pred_band_basis"] = [p.band_basis for p in predictions]
    return out


@dataclass
class BatchReport:
    """What ``prism predict-batch`` did: rows predicted and failed (this run and resumed
    from ``out`` together), rows resumed, and input columns it did not read."""

    table: str
    out: str
    status: str  # done | interrupted
    rows: int
    predicted: int
    failed: int
    resumed: int
    written: int
    distinct_jobs: int  # distinct (model, layout, hardware, GPUs) this run predicted: rows alike share one
    draws: int
    seconds: float
    unread_columns: list[str]

    def format(self) -> str:
        lines = [f"{self.out}: {self.rows} rows, {self.predicted} predicted, {self.failed} with an error in "
                 f"pred_status ({self.resumed} resumed from an earlier run; {self.seconds:.1f} s, "
                 f"{self.draws} draws a row)"]
        if self.unread_columns:
            lines.append(f"carried through unread: {', '.join(self.unread_columns)}")
        if self.status == "interrupted":
            lines.append(f"interrupted: {self.written} of {self.rows} rows are in {self.out}; run the same command "
                         f"again to predict the rest")
        return "\n".join(lines)


def _key(index: int, cells: list[str], settings: dict) -> str:
    text = " ".join(f"{name}={value}" for name, value in settings.items())
    digest = hashlib.blake2b("\x1f".join([*cells, text]).encode(), digest_size=6).hexdigest()
    return f"{index}:{digest}"


#: The settings a run has where they are not given, by their names in a key; a key holds the
#: settings only hashed, so an earlier run's are found among this run's with some of these.
DEFAULT_SETTINGS = {"draws": DRAWS, "seed": 0, "models": ""}
#: How the command line names each setting ("trained": which models were there, retrained or not).
SETTING_NAMES = {"draws": "draws", "seed": "seed", "models": "models_dir", "trained": "models' fingerprint"}


def models_fingerprint(models_root) -> str:
    """What identifies the models a run reads: a hash of every set's manifest under
    ``models_root`` (the shipped ``models/`` where unset), so that rows predicted before a
    set was retrained in the same folder are not resumed as this run's."""
    digest = hashlib.sha256()
    for manifest in sorted(models_dir(models_root).glob(f"*/{MANIFEST}")):
        # the text as before its checksum (unsigned_text): a set's fingerprint is what it was before manifests had one
        digest.update(manifest.parent.name.encode() + unsigned_text(manifest.read_text(encoding="utf-8")).encode())
    return digest.hexdigest()[:12]


def _setting(name: str, value) -> str:
    return f"{SETTING_NAMES[name]}={value}" if value != "" else f"no {SETTING_NAMES[name]}"


def _earlier_settings(key: str, cells: list[str], settings: dict) -> dict | None:
    """The settings an earlier run predicted the row of ``cells`` and ``key`` with, where they
    are ``settings`` with some left at their default (:data:`DEFAULT_SETTINGS`); None otherwise."""
    index = int(key.partition(":")[0])
    changed = [name for name, default in DEFAULT_SETTINGS.items() if settings[name] != default]
    for size in range(1, len(changed) + 1):
        for names in itertools.combinations(changed, size):
            earlier = {**settings, **{name: DEFAULT_SETTINGS[name] for name in names}}
            if "models" in names:  # the models of that folder, as they are now
                earlier["trained"] = models_fingerprint(earlier["models"])
            if _key(index, cells, earlier) == key:
                return earlier
    return None


def _other_settings(out: Path, rows: list[list[str]], cells: list[list[str]], settings: dict) -> PrismError:
    """The refusal of an ``out`` whose ``rows`` of this table were predicted with other settings."""
    key = rows[0][-1]
    earlier = _earlier_settings(key, cells[int(key.partition(":")[0])], settings)
    if earlier is None:
        how = ("other settings than this run's " + ", ".join(_setting(n, v) for n, v in settings.items())
               + " (a row's pred_key holds them, hashed; retraining a set of models changes their fingerprint)")
    else:
        moved = earlier["models"] != settings["models"]  # another folder: its own fingerprint goes without saying
        how = "; ".join(f"{_setting(n, earlier[n])}, where this run has {_setting(n, v)}"
                        for n, v in settings.items() if earlier[n] != v and not (n == "trained" and moved))
    return PrismError(f"out={out}: holds {len(rows)} row(s) of this table predicted with {how}, which this run would "
                      f"replace; write to another out=, or delete {out} to predict them again with these settings",
                      field="out")


def _csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _replace(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """Write ``path`` whole, atomically (a temporary file renamed over it)."""
    write_atomically(path, lambda tmp: tmp.write_text(_csv_text([header, *rows]), encoding="utf-8"))


def _written(out: Path, header: list[str], keys: set[str], cells: list[list[str]],
             settings: dict) -> dict[str, list[str]]:
    """The rows of an earlier run that ``out`` holds for this table (its rows' ``cells``) and
    ``settings``, by key; ``out`` rewritten without the rest (a torn last line, rows of an
    edited input), or started with the header where it does not exist. A file with other
    columns, or whose rows are none of this table's, is refused: it is another table's output,
    which a rewrite would lose; and so is one holding rows of this table predicted with other
    settings, which a rewrite would replace."""
    if not out.exists() or out.stat().st_size == 0:
        _replace(out, header, [])
        return {}
    try:
        text = out.read_text(encoding="utf-8")
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except (UnicodeDecodeError, csv.Error):
        lines = []
    if not lines or lines[0] != header:
        raise PrismError(f"out={out}: exists and is not this table's predict-batch output (other columns); "
                         f"remove it or write elsewhere", field="out")
    complete = lines[1:] if text.endswith("\n") else lines[1:-1]  # an interrupted write leaves a torn line
    ours, width = {tuple(c) for c in cells}, len(header) - len(OUTPUT_COLUMNS)
    if complete and not any(tuple(r[:width]) in ours for r in complete):
        raise PrismError(f"out={out}: exists and is not this table's predict-batch output (none of its "
                         f"{len(complete)} rows is a row of this table); remove it or write elsewhere", field="out")
    whole = [r for r in complete if len(r) == len(header)]
    other = [r for r in whole if r[-1] not in keys and _of_this_table(r, cells, width)]
    if other:
        raise _other_settings(out, other, cells, settings)
    kept = {r[-1]: r for r in whole if r[-1] in keys}
    if len(kept) != len(lines) - 1:
        _replace(out, header, list(kept.values()))
    return kept


def _of_this_table(row: list[str], cells: list[list[str]], width: int) -> bool:
    """Whether an output ``row`` holds the cells of the input row its key names."""
    index = row[-1].partition(":")[0]
    return index.isdigit() and int(index) < len(cells) and row[:width] == cells[int(index)]


def _check_models(table: Table, models_root) -> None:
    """One error naming ``models_dir`` where it holds models of none of the hardware the
    table's rows name: every row would be an error, written over what ``out`` held."""
    if not models_root:
        return
    gpu = [name.strip().lower() for name in table.header].index("gpu")
    names = set()
    for text in {row[gpu] for row in table.rows}:
        try:
            names.add(row_hardware(cell({"gpu": text}, "gpu")))
        except PrismError:  # that row's own error, in its pred_status
            continue
    folder = models_dir(models_root)
    if names and not any(holds_models(folder, load_hardware(name)) for name in names):
        raise PrismError(f"models_dir={models_root}: holds models of {', '.join(held_sets(folder)) or 'no hardware'}, "
                         f"and none of the table's hardware ({', '.join(sorted(names))}): every row would fail; "
                         f"train them there (prism train samples=DIR hardware={min(names)} models_dir={models_root}), "
                         f"name the folder that holds them, or leave models_dir out for the shipped models; nothing "
                         f"written", field="models_dir")


def predict_batch(path, out, *, draws: int = DRAWS, seed: int = 0, models_root=None, chunk_rows: int = CHUNK_ROWS,
                  progress: bool = False, progress_every: int = 0, workers: int = 1) -> BatchReport:
    """Predict every row of the CSV table at ``path`` into ``out`` (see the module
    docstring); ``progress`` draws a bar on stderr, and ``progress_every`` (rows; 0: never)
    prints a plain line there each time that many more rows are done, for a stderr that is
    no terminal; ``workers`` processes predict (one below :data:`POOL_ROWS` rows; ``prism
    predict-batch`` gives :func:`default_workers`, a script calling this asks for more than one
    only under ``if __name__ == "__main__":``, as every spawned pool needs). The table and ``out`` are checked
    before any work (:func:`~predictor.data.runs_table.read_table`,
    :func:`~predictor.data.runs_table.check_output`), and so are the settings."""
    t0 = time.perf_counter()
    check_draws("draws", draws)
    check_number("seed", seed, integer=True, zero=True)
    check_number("chunk_rows", chunk_rows, integer=True)  # 0 would write no chunk, ever
    check_number("workers", workers, integer=True)
    table = read_table(path)
    out = check_output(out, table.path)
    models_dir(models_root)  # a mistyped models folder fails now, not row by row
    _check_models(table, models_root)
    keep = [i for i, name in enumerate(table.header) if name.strip().lower() not in OUTPUT_COLUMNS]
    header = [table.header[i] for i in keep] + list(OUTPUT_COLUMNS)
    settings = {"draws": draws, "seed": seed, "models": models_root or "", "trained": models_fingerprint(models_root)}
    cells = [[row[i] for i in keep] for row in table.rows]
    keys = [_key(i, c, settings) for i, c in enumerate(cells)]
    lock = out.with_name(f".{out.name}.lock")

    def busy(holder: dict) -> str:
        return (f"out={out}: another prism predict-batch is writing it (pid {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')}, since {holder.get('started', '?')}). Wait for it to end (a rerun "
                f"then resumes) or write elsewhere; if that run is gone, delete {lock}")
    with held_lock(lock, busy, "out"):  # two writers would both append every row
        written = _written(out, header, set(keys), cells, settings)
        status_at = len(keep) + len(PREDICTED)
        # a row that failed is predicted again: its cause (a damaged model file, a missing profile) may be fixed
        todo = [i for i, k in enumerate(keys) if k not in written or written[k][status_at] != "ok"]
        names = [name.strip().lower() for name in table.header]
        workers = min(workers, max(1, len(todo) // FIRST_CHUNK_ROWS))
        pooled = workers > 1 and len(todo) >= POOL_ROWS
        predictor = None if pooled else BatchPredictor(draws, seed, models_root)
        status, done, said, jobs = "done", 0, 0, set()
        with tqdm(total=len(todo), desc="rows", unit="row", disable=not progress, file=sys.stderr) as bar:
            def store(chunk: list[int], predictions: list[RowPrediction]) -> None:
                nonlocal done, said
                lines = [cells[i] + _output_cells(table, i, p, keys[i]) for i, p in zip(chunk, predictions)]
                _store_chunk(out, header, keys, written, lines)
                jobs.update(p.job for p in predictions if p.job)
                bar.update(len(chunk))
                done += len(chunk)  # a disabled bar counts nothing
                if progress_every and done - said >= progress_every:
                    said = done
                    print(f"prism predict-batch: {done} of {len(todo)} rows predicted into {out} "
                          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

            pairs = ((chunk, [dict(zip(names, table.rows[i])) for i in chunk]) for chunk in _chunks(todo, chunk_rows))
            try:
                if pooled:
                    _pooled(workers, (draws, seed, models_root), pairs, store)
                else:
                    for chunk, rows in pairs:
                        store(chunk, predictor.predict(rows))
            except KeyboardInterrupt:
                status = "interrupted"
        if status == "done" and todo and written and list(written) != keys:
            _replace(out, header, [written[k] for k in keys])  # resumed rows first: restore the input's order
        statuses = [row[status_at] for row in written.values()]
        spelled = header_columns(names)
        return BatchReport(
            table=str(table.path), out=str(out), status=status, rows=len(keys), predicted=statuses.count("ok"),
            failed=len(statuses) - statuses.count("ok"), resumed=len(keys) - len(todo), written=len(written),
            distinct_jobs=len(jobs), draws=draws, seconds=time.perf_counter() - t0,
            unread_columns=[table.header[i] for i in keep
                            if names[i] not in BY_NAME and spelled.get(names[i]) not in BY_NAME])


def _pooled(workers: int, settings: tuple, chunks, store) -> None:
    """Each of ``chunks`` ((row indices, row mappings) pairs) predicted in a pool of
    ``workers`` processes (spawned: XGBoost's OpenMP threads do not survive a fork), at most
    two chunks a worker in flight, each passed to ``store`` as it comes back. On Ctrl-C the
    chunks not yet begun are dropped and the workers stopped; the chunks stored stay."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(*settings, os.getpid()))
    pending = {}
    finished_all = False
    try:
        for chunk, rows in chunks:
            pending[pool.submit(_predict_in_worker, rows)] = chunk
            while len(pending) >= 2 * workers:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    store(pending.pop(future), future.result())
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                store(pending.pop(future), future.result())
        finished_all = True
    finally:
        if not finished_all:  # Ctrl-C or an error: the chunks under way are dropped, not waited for
            # (the executor has no public way to stop a running call; its workers are its _processes)
            for process in (getattr(pool, "_processes", None) or {}).values():
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _store_chunk(out: Path, header: list[str], keys: list[str], written: dict[str, list[str]],
                 lines: list[list[str]]) -> None:
    """Add a chunk's ``lines`` to ``out`` and to ``written`` so that ``out`` holds one row per
    key at every moment: new keys are appended (one write and a flush: Ctrl-C or a kill keeps
    whole chunks, a torn last line is dropped by the next run); a row predicted again (it had
    failed) replaces its old row in a rewrite of the whole file (temporary file and rename),
    never appended beside it; a row predicted again alike is not written at all."""
    new = [line for line in lines if line[-1] not in written]
    changed = [line for line in lines if line[-1] in written and written[line[-1]] != line]
    for line in lines:
        written[line[-1]] = line
    if changed:
        _replace(out, header, [written[k] for k in keys if k in written])
    elif new:
        with open(out, "a", encoding="utf-8", newline="") as f:
            f.write(_csv_text(new))
            f.flush()


def _chunks(todo: list[int], largest: int):
    """``todo`` in chunks of :data:`FIRST_CHUNK_ROWS` rows, doubling up to ``largest``."""
    start, size = 0, min(FIRST_CHUNK_ROWS, largest)
    while start < len(todo):
        yield todo[start:start + size]
        start, size = start + size, min(2 * size, largest)


def _output_cells(table: Table, index: int, p: RowPrediction, key: str) -> list[str]:
    status = p.status
    if index in table.overlong:  # the row's extra cells were cut: say so rather than guess them away
        status = (f"row has {table.overlong[index]} cells, the header {len(table.header)}: a cell holds an "
                  f"unquoted comma; quote it")
    values = [f"{v:.6g}" for v in p.values] if p.values and status == p.status else [""] * len(PREDICTED)
    fits = "" if p.fits is None or status != p.status else str(p.fits).lower()
    return [*values, status, fits, p.hardware, p.assumed, p.band_basis if status == p.status else "", key]
