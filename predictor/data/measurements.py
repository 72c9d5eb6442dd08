"""Measured end-to-end step times: the file ``prism measure`` writes and ``prism validate`` reads.

One Parquet file holds one or more layouts, one row per (layout, step, rank):

==================  =======  ==================================================
column              type     meaning
==================  =======  ==================================================
layout_id           string   names the layout (model, axes, batch, recompute ...)
hardware            string   the conf/hardware profile of the machine measured
model_json          string   the full :class:`~predictor.core.specs.ModelConfig` as JSON
parallel_json       string   the full :class:`~predictor.core.specs.ParallelConfig` as JSON
step                int64    0-based index of a timed step (warm-up steps not stored)
rank                int64    global rank
step_time_s         double   this rank's wall time from the step's start barrier to
                             the end of its optimizer step
threads_per_rank    int64    torch intra-op threads of each rank
backend             string   gloo | nccl
measured_at         string   ISO-8601 UTC time the layout's run started
steal               double   optional: the share of the busy CPU time the hypervisor
                             took during this rank's step (:mod:`sampling.cpu.steal`);
                             null where not known
==================  =======  ==================================================

A job's step time is the slowest rank's (:func:`step_times`). Writes are atomic (temp
file + rename): an existing file is only ever replaced by a complete one.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from predictor.core.errors import PrismError
from predictor.core.profiles import group_options
from predictor.core.specs import DISTURBING_STEAL, HardwareConfig, ModelConfig, ParallelConfig
from predictor.data.store import atomic_write_table
from predictor.workload.decompose import REFERENCE_FRAMEWORK, Workload, decompose

SCHEMA = pa.schema([
    ("layout_id", pa.string()), ("hardware", pa.string()), ("model_json", pa.string()),
    ("parallel_json", pa.string()), ("step", pa.int64()), ("rank", pa.int64()),
    ("step_time_s", pa.float64()), ("threads_per_rank", pa.int64()), ("backend", pa.string()),
    ("measured_at", pa.string()), ("steal", pa.float64()),
])
#: Columns a measurement file must have; ``steal`` came later and may be absent or empty.
OPTIONAL = ("steal",)
COLUMNS = tuple(c for c in SCHEMA.names if c not in OPTIONAL)


def write_measurements(frame: pd.DataFrame, path, append: bool = True) -> Path:
    """Write ``frame`` (the columns of :data:`SCHEMA`) to ``path`` atomically.

    With ``append`` the layouts already in ``path`` are kept, except those measured again
    (same ``layout_id``), which the new rows replace.
    """
    path = Path(path)
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise PrismError(f"measurements: missing column(s) {', '.join(missing)}", field='measurements')
    frame = frame.reindex(columns=list(SCHEMA.names))  # an optional column absent: null
    if append and path.exists():
        old = read_measurements(path)
        frame = pd.concat([old[~old.layout_id.isin(set(frame.layout_id))], frame], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_table(pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False), path)
    return path


def join_passes(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Measurements of the same layouts in several passes (``prism measure`` runs apart in
    time) as one run per layout: each pass's steps numbered on from the last pass's, and
    ``measured_at`` the first pass's start."""
    joined, offset = [], {}
    for frame in frames:
        frame = frame.copy()
        frame["step"] += frame.layout_id.map(offset).fillna(0).astype("int64")
        offset.update({lid: int(top) + 1 for lid, top in frame.groupby("layout_id").step.max().items()})
        joined.append(frame)
    out = pd.concat(joined, ignore_index=True)
    out["measured_at"] = out.groupby("layout_id").measured_at.transform("min")
    return out


def pass_repeatability(passes: list[pd.DataFrame]) -> pd.DataFrame:
    """How far a machine's own ground truth moves between passes minutes apart: one row per
    layout with its median step in each pass (``pass1_p50_s`` ...), the median of all its steps
    (``pooled_p50_s``) and the largest departure of a pass's median from it, relative
    (``worst_pass_departure``). A prediction that equalled one pass would miss the pooled
    median by that much: the floor under any one layout's error. Where the steps' steal was
    recorded, ``pass<i>_steal`` is each pass's mean share of CPU time the hypervisor took."""
    steps = [step_times(p) for p in passes]
    per_pass = pd.concat({i + 1: s.groupby("layout_id").step_time_s.median() for i, s in enumerate(steps)}, axis=1)
    pooled = step_times(join_passes(passes)).groupby("layout_id").step_time_s.median()
    table = per_pass.rename(columns=lambda i: f"pass{i}_p50_s").reindex(pooled.index)
    table["pooled_p50_s"] = pooled
    table["worst_pass_departure"] = per_pass.sub(pooled, axis=0).abs().max(axis=1).div(pooled)
    for i, s in enumerate(steps):
        if "steal" in s and s.steal.notna().any():
            table[f"pass{i + 1}_steal"] = s.groupby("layout_id").steal.mean()
    return table.reset_index()


def measured_on(measured: pd.DataFrame, hw) -> None:
    """One error naming ``hardware`` unless every row of ``measured`` was measured on ``hw``:
    steps of one machine say nothing of another's models."""
    other = sorted(set(measured.hardware) - {hw.name})
    if not other:
        return
    profiles = group_options("hardware")
    if other[0] in profiles:
        fix = f"give hardware={other[0]}"
    else:  # naming a profile that does not exist only trades this error for "no such hardware"
        fix = (f"{other[0]} has no profile in conf/hardware (there: {', '.join(profiles)}); add "
               f"conf/hardware/{other[0]}.yaml (a copy of the nearest profile, its numbers changed), then "
               f"prism sample and prism train hardware={other[0]}")
    raise PrismError(f"hardware={hw.name}: the file was measured on {', '.join(other)}; {fix}", field='hardware')


#: A layout's measured median step this many times its predicted one (or as many times shorter)
#: is no model's miss but a unit's: every layout of the shipped suites (measurements/*-suite-*.parquet,
#: 46 files) comes within 0.69x to 4.9x of its prediction, from the shipped models or the priors
#: alone, while milliseconds given as seconds are 1000x.
IMPLAUSIBLE_RATIO = 100.0


def implausible_steps(what: str, hardware: str) -> PrismError:
    """The error for measured steps that no prediction on ``hardware`` explains, ``what`` saying how."""
    return PrismError(f"measured: {what}; check that step_time_s is in seconds and that the steps were measured on "
                      f"{hardware}, the models' machine; nothing stored", field="measured")


def check_step_unit(layout_id: str, measured_s: float, predicted_s: float, hardware: str) -> None:
    """One error naming the layout unless its measured median step is within
    :data:`IMPLAUSIBLE_RATIO` of the predicted one (both in seconds): its scores would be
    errors of 10^6 %, and a calibration fitted to it nonsense."""
    ratio = measured_s / predicted_s
    if 1 / IMPLAUSIBLE_RATIO <= ratio <= IMPLAUSIBLE_RATIO:
        return
    raise implausible_steps(f"layout {layout_id!r}: its median step, {measured_s:.4g} s, is {ratio:.3g} times the "
                            f"predicted {predicted_s:.4g} s: no calibration explains these steps", hardware)


def read_measurements(path) -> pd.DataFrame:
    """Every row of a measurement file, checked (one clear error naming file and column)."""
    path = Path(path)
    if path.is_dir():
        raise PrismError(f"measured={path}: a folder; give the .parquet file prism measure wrote in it",
                         field='measured')
    if not path.is_file():
        raise PrismError(f"measured={path}: no such file; write one with `prism measure ... out={path}`",
                         field='measured')
    if path.suffix.lower() in (".csv", ".tsv", ".txt"):
        raise PrismError(f"measured={path}: a text table; measured= takes the Parquet file of prism measure "
                         f"(a CSV of published runs goes to published=)", field='measured')
    try:
        frame = pq.read_table(path).to_pandas()
    except (pa.ArrowInvalid, OSError) as exc:
        raise PrismError(f"measured={path}: not a readable Parquet file ({exc}); it is truncated or corrupt: "
                         f"measure again", field='measured') from None
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise PrismError(f"measured={path}: missing column(s) {', '.join(missing)}; not a `prism measure` file",
                         field='measured')
    if frame.empty:
        raise PrismError(f"measured={path}: no rows; measure at least one layout", field='measured')
    # a file written by another tool: text where numbers belong failed a comparison deep in pandas, an empty
    # hardware or layout_id a join or the figure, and an infinite step passed as a measurement (NaN scores)
    for column in COLUMNS:
        numeric = pa.types.is_integer(SCHEMA.field(column).type) or pa.types.is_floating(SCHEMA.field(column).type)
        if numeric and not pd.api.types.is_numeric_dtype(frame[column]):
            raise PrismError(f"measured={path}: column {column!r} holds {frame[column].dtype} values, not numbers; "
                             f"not a `prism measure` file: measure again", field='measured')
        if frame[column].isna().any():
            raise PrismError(f"measured={path}: column {column!r} has {int(frame[column].isna().sum())} empty "
                             f"value(s); measure the layouts again", field='measured')
    if "steal" in frame and not (pd.api.types.is_numeric_dtype(frame.steal)
                                 and frame.steal.dropna().between(0, 1).all()):
        raise PrismError(f"measured={path}: column 'steal' holds values that are not shares within [0, 1]; "
                         f"not a `prism measure` file: measure again", field='measured')
    if not (np.isfinite(frame.step_time_s) & (frame.step_time_s > 0)).all():
        raise PrismError(f"measured={path}: column 'step_time_s' has non-positive or infinite values; measure the "
                         f"layouts again", field='measured')
    return frame


def layout_configs(frame: pd.DataFrame, layout_id: str) -> tuple[ModelConfig, ParallelConfig]:
    """The model and layout a measured ``layout_id`` ran."""
    row = frame[frame.layout_id == layout_id].iloc[0]
    specs = []
    for column, spec in (("model_json", ModelConfig), ("parallel_json", ParallelConfig)):
        try:
            specs.append(spec(**json.loads(row[column])))
        except (TypeError, ValueError) as exc:  # not JSON, not an object, or fields the spec lacks
            raise PrismError(f"measured: column {column} of layout {layout_id!r} is not a {spec.__name__} as JSON "
                             f"({exc}); measure that layout again with prism measure", field="measured") from None
        except PrismError as exc:  # a value the spec refuses, named with the layout it came from
            raise PrismError(f"measured: layout {layout_id!r}: {exc}", field=exc.field) from None
    return specs[0], specs[1]


#: The settings a ``prism measure`` layout_id spells (``sampling.measure.layout_id``), as its words start.
_ID_WORDS = {"dp": "dp", "tp": "tp", "pp": "pp", "mbs": "micro_batch_size", "gbs": "global_batch_size"}


def _check_layout(frame: pd.DataFrame, layout_id: str, par: ParallelConfig) -> None:
    """One error naming the layout unless its id and its rows are of the job ``par`` describes:
    a file edited by hand (parallel_json tp=2 over the steps of one rank) would otherwise be
    predicted as the job it names, and scored against the steps of another."""
    for word in str(layout_id).split():
        key = re.fullmatch(r"([a-z]+)(\d+)", word)
        setting = _ID_WORDS.get(key[1]) if key else None
        if setting and int(key[2]) != getattr(par, setting):
            raise PrismError(f"measured: layout {layout_id!r}: its parallel_json says {setting}="
                             f"{getattr(par, setting)} but its layout_id says {word}; the two describe different "
                             f"jobs: measure the layout again with prism measure", field="measured")
    ranks = sorted(set(frame.loc[frame.layout_id == layout_id, "rank"]))
    if ranks != list(range(par.world_size)):
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        raise PrismError(f"measured: layout {layout_id!r}: its rows hold rank(s) {shown} but its parallel_json "
                         f"(dp={par.dp} tp={par.tp} pp={par.pp} cp={par.cp}) needs ranks 0 to {par.world_size - 1}; "
                         f"measure the layout again with prism measure", field="measured")
    _check_steps(frame[frame.layout_id == layout_id], layout_id)


def _check_steps(rows: pd.DataFrame, layout_id: str) -> None:
    """One error naming the layout unless each of its ranks has one row for each of its steps:
    a job's step is its slowest rank's (:func:`step_times`), so a step stored twice (a file
    appended to a copy of itself) is scored as two steps, and a rank's missing step leaves the
    step to the ranks that were faster."""
    twice = rows[rows.duplicated(["step", "rank"])]
    if not twice.empty:
        first = twice.iloc[0]
        raise PrismError(f"measured: layout {layout_id!r}: step {first.step} of rank {first['rank']} has more than one "
                         f"row ({len(twice)} rows repeat a (step, rank) of the layout); each rank's step is one row: "
                         f"drop the repeated rows (a file appended to itself), or measure the layout again with "
                         f"prism measure", field="measured")
    steps = set(rows.step)
    for rank, held in rows.groupby("rank").step:
        missing = sorted(steps - set(held))
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            raise PrismError(f"measured: layout {layout_id!r}: rank {rank} has no row for {len(missing)} of the "
                             f"layout's {len(steps)} steps (step(s) {shown}), and a step lasts as long as its slowest "
                             f"rank; measure the layout again with prism measure, or drop those steps' rows of every "
                             f"rank", field="measured")


def undisturbed(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps of :func:`step_times` that the hypervisor left alone (steal at most
    :data:`~predictor.core.specs.DISTURBING_STEAL`, or not recorded); a layout it disturbed
    throughout keeps every step, so that it is still scored (its steal says why it is slow)."""
    if "steal" not in steps:
        return steps
    clean = ~(steps.steal > DISTURBING_STEAL)
    return steps[clean | ~clean.groupby(steps.layout_id).transform("any")]


def measured_workloads(frame: pd.DataFrame, hw: HardwareConfig) -> list[tuple[str, Workload, np.ndarray]]:
    """Per measured layout, in file order: its id, its workload on ``hw`` and the times (s) of
    its :func:`undisturbed` steps."""
    out = []
    for layout_id, group in undisturbed(step_times(frame)).groupby("layout_id", sort=False):
        model, par = layout_configs(frame, layout_id)
        try:
            work = decompose(model, par, hw, par.world_size, framework=REFERENCE_FRAMEWORK)
        except PrismError as exc:  # "parallel.tp=0" alone would read as a setting of the command line
            raise PrismError(f"measured: layout {layout_id!r}: {exc}", field=exc.field) from None
        _check_layout(frame, layout_id, work.parallel)  # its global batch resolved, as it is predicted
        out.append((layout_id, work, group.step_time_s.to_numpy()))
    return out


def step_times(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (layout, step): the slowest rank's time (a step ends when all ranks do)."""
    steal = {"steal": ("steal", "max")} if "steal" in frame else {}  # one host's figure, or the worst host's
    return (frame.groupby(["layout_id", "step"], as_index=False, sort=False)
            .agg(step_time_s=("step_time_s", "max"), hardware=("hardware", "first"), **steal))
