"""The autograd engine's entry, paid once per backward, not once per op.

Why it exists: the CPU testbed, whose device is its host. A backward sample
(:mod:`sampling.kernels`) is one ``torch.autograd.grad`` call over one op's graph. Timed by
the host's clock (a CPU: the host is the device), it holds the engine's entry (argument
parsing, the graph task, its dependencies and ready queue: torch/csrc/autograd/engine.cpp,
``Engine::execute``) once per op; a training step pays it once per micro-batch's
``backward()``. Left in, it made every small op's backward look slow: in a traced step of
``small`` on a 2-core AMD EPYC slice, a residual add's backward took 5.6 us a call, its
samples 265 us; on the Xeon slice the entry was 65 us (tiny's step was over-predicted by
37-52% there, by 39-72% here). CUDA-event samples (a GPU) hold no host time (the device is
put behind its host first: :data:`sampling.timers.HOST_LEAD_S`): untouched. It would be
retired by backward samples timed inside a step rather than one ``autograd.grad`` each:
``tests/latency/test_backward_entry.py::test_a_gpu_s_samples_are_untouched`` shows the asynchronous case.

Its size is the intercept of the ``dispatch`` backward samples against their length
(``launches`` chained autograd nodes in one call: the entry plus ``launches`` nodes), a
Theil-Sen line through each length's median, per sampling run (another machine, another
entry). :func:`without_entry` takes it off the compute ops' backward samples of that run
before their regressors are fitted (and before they are scored: ``prism evaluate``); the
composer then puts it back once per backward, as the pass's host work is one ``dispatch``
call whose ``launches`` are every node it runs (:func:`predictor.workload.host.one_dispatch`),
whose samples hold the entry once. So it changes no call's quantiles at pricing time: its
fit (the entry per run, manifest ``adjustments.backward_entry``) and :meth:`BackwardEntry.prepare`
act on the training rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from predictor.core.ops import COMPUTE_OPS, FORWARD_WORK_IN_BWD
from predictor.latency.adjustments.base import Adjustment, Batch, Params, malformed, mapping
from predictor.latency.origins import FRAMEWORK

if TYPE_CHECKING:  # pandas only where samples are trained on: prism predict needs none
    import pandas as pd

#: A corrected sample keeps at least this part of what was timed (an entry fitted too large
#: must not leave a kernel at no time).
FLOOR = 0.1
#: Origins of ``dispatch`` rows timed inside real training steps: a CPU's framework time
#: as the reference model spends it, or as an imported trace's steps did.
IN_SITU = (FRAMEWORK, "trace")
#: Fewest distinct lengths of the dispatch backward samples that fit a line.
MIN_LENGTHS = 3
#: Backward samples that are one ``autograd.grad`` call: the compute ops whose backward
#: kernel replays the op's graph.
REPLAYED = tuple(op for op in COMPUTE_OPS if op not in FORWARD_WORK_IN_BWD)


def entry_us(rows: pd.DataFrame) -> dict[str, float]:
    """Per sampling run (``run_id``) of our own samples, the autograd entry (us): the
    intercept of its ``dispatch`` backward samples' medians against ``launches``, between 0
    and the shortest chain's median.
    Runs without enough of them are left out."""
    from scipy.stats import theilslopes

    own = rows[(rows["op"] == "dispatch") & (rows["pass"] == "bwd") & (origins(rows) == "sampled")]
    out = {}
    for run, g in own.groupby("run_id", sort=True):
        medians = g.groupby("launches")["latency_us"].median()
        if len(medians) >= MIN_LENGTHS:
            _, intercept, _, _ = theilslopes(medians.to_numpy(), medians.index.to_numpy(float))
            # never above the shortest chain's own time (the line's noise can put it there)
            out[str(run)] = float(np.clip(intercept, 0.0, medians.iloc[0]))
    return out


def without_entry(rows: pd.DataFrame, asynchronous: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """``rows`` with each run's autograd entry (:func:`entry_us`) taken off its replayed
    backward samples (never below :data:`FLOOR` of the timed value), and the entries. A
    device that runs apart from its host (CUDA) timed no host time: unchanged."""
    if asynchronous or "run_id" not in rows or "launches" not in rows:
        return rows, {}
    entries = entry_us(rows)
    if not entries:
        return rows, {}
    return _take_off(rows, entries), entries


def _take_off(rows: pd.DataFrame, entries: dict[str, float]) -> pd.DataFrame:
    """``rows`` with each run's entry of ``entries`` taken off its replayed backward samples."""
    entry = rows["run_id"].astype(str).map(entries)
    replayed = (rows["pass"] == "bwd") & rows["op"].isin(REPLAYED) & (origins(rows) == "sampled") & entry.notna()
    latency = rows["latency_us"].to_numpy(float)
    corrected = np.maximum(latency - entry.fillna(0.0).to_numpy(), FLOOR * latency)
    return rows.assign(latency_us=np.where(replayed.to_numpy(), corrected, latency))


def in_situ_host(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` without the chained ``dispatch`` samples where dispatch rows timed inside
    training steps (:data:`IN_SITU`) describe the host: those are its framework time, and a
    chain of one kind of call prices the calls of a real model at a quarter of their cost
    (:mod:`sampling.framework`). The chain's backward samples have given the autograd
    entry before this (:func:`without_entry`)."""
    origin = origins(rows)
    dispatch = rows["op"] == "dispatch"
    if not (dispatch & origin.isin(IN_SITU)).any():
        return rows
    return rows[~(dispatch & (origin == "sampled"))]


def as_trained(rows: pd.DataFrame, asynchronous: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """``rows`` as their models are fitted and scored: each run's autograd entry taken off
    (:func:`without_entry`), then the chain's dispatch samples left out where in-situ rows
    describe the host (:func:`in_situ_host`); and the entries."""
    rows, entries = without_entry(rows, asynchronous)
    return in_situ_host(rows), entries


def origins(rows: pd.DataFrame) -> pd.Series:
    """Each row's ``origin``: "sampled" (``prism sample``'s own, and rows of stores older than
    the column) or where it was imported from."""
    return rows["origin"].fillna("sampled") if "origin" in rows else rows["op"].map(lambda _: "sampled")


@dataclass(frozen=True)
class EntryParams(Params):
    """Per sampling run (``run_id``), the autograd entry (us) taken off its backward samples."""

    entry_us: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"entry_us": dict(self.entry_us)}

    @classmethod
    def from_json(cls, value: Any, field: str) -> EntryParams:
        return cls.of_entries(mapping(value, field).get("entry_us"), f"{field}.entry_us")

    @classmethod
    def of_entries(cls, value: Any, field: str) -> EntryParams:
        out = {}
        for run, us in mapping(value, field).items():
            if not (isinstance(us, (int, float)) and not isinstance(us, bool) and 0 <= us < np.inf):
                raise malformed(f"{field}.{run}", f"{us!r:.40} is not a time in us")
            out[str(run)] = float(us)
        return cls(out)


class BackwardEntry(Adjustment):
    name = "backward_entry"
    mechanism = ("torch/csrc/autograd/engine.cpp Engine::execute (once per backward call); our traced steps of "
                 "small on the 2-core VM")
    testbed_only = True
    retire_when = "tests/latency/test_backward_entry.py::test_a_gpu_s_samples_are_untouched, for every testbed"
    params_type = EntryParams
    legacy_key = "backward_entry_us"

    def fit(self, samples, hw) -> EntryParams | None:
        if hw.host.asynchronous or "run_id" not in samples or "launches" not in samples:
            return None
        entries = entry_us(samples)
        return EntryParams(entries) if entries else None

    def prepare(self, samples, params, hw):
        if params is not None:  # the entry the fit found, taken off (as without_entry does)
            samples = _take_off(samples, params.entry_us)
        return in_situ_host(samples)

    def applies(self, batch: Batch, params) -> np.ndarray:
        return np.zeros(len(batch), bool)  # put back once per backward by the host ops (module doc)

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        return q

    def from_legacy(self, value: Any, field: str) -> EntryParams:
        return EntryParams.of_entries(value, field)

    def example(self) -> EntryParams:
        return EntryParams({"run-a": 61.5, "run-b": 0.0})
