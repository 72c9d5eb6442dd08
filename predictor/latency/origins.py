"""What the sampler and the trainer agree on about a sample row's ``origin``: the public names
both sides read (``sampling`` writes the rows, :mod:`predictor.latency.artifacts` trains on them).

Most rows are an op's own timed repeats (origin ``sampled``) or imported ones
(``ett:<cluster>``, ``microbench:<source>``, ``trace``). The rows below are timed for a
correction instead, and train no op model of their own:

- :data:`FRAMEWORK`: the framework time ``prism sample`` measures inside the reference
  model's steps (:mod:`sampling.framework`); they take the place of the chained ``dispatch``
  samples (:mod:`predictor.latency.adjustments.backward_entry`).
- :data:`CO_RUN_ALONE`, :data:`CO_RUN_BESIDE`: an op timed alone and beside a neighbouring
  rank on the same host (:mod:`sampling.cpu.co_run`;
  :mod:`predictor.latency.adjustments.co_run`).
- ``collective_gap:<us>`` (:func:`gap_origin`): a CPU collective timed after one of the
  shorter compute gaps :data:`GAPS_S` rather than after :data:`STEP_GAP_S`
  (:mod:`sampling.cpu.collective_gap`; :mod:`predictor.latency.adjustments.collective_gap`).

Nothing here needs pandas or torch: the sampler imports it as it is.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas only where samples are read
    import pandas as pd

#: ``origin`` of the framework time ``prism sample`` measures in situ (:mod:`sampling.framework`).
FRAMEWORK = "framework"

#: ``origin`` of the rows timed alone in the co-run phase, and of their twins timed beside
#: the neighbour: neither is an op model's sample.
CO_RUN_ALONE, CO_RUN_BESIDE = "co_run_alone", "co_run_beside"
CO_RUN_ORIGINS = (CO_RUN_ALONE, CO_RUN_BESIDE)

#: The reference gap (s): a CPU collective's own repeats, which its op model is trained on,
#: are timed after this much computing on every member (since suite run Y). A 393 KB
#: gloo all_reduce (``small``'s tensor-parallel one) on a 2-core EPYC slice took 0.7-1.2 ms
#: straight after a barrier and 3.5-3.8 ms after 8 or 16 ms of computing on both ranks,
#: 2.7-3.1 ms of it after the later rank had arrived: the collective itself (gloo's threads
#: woken from idle), not the wait for the peer; a traced ``small`` tp=2 step's 64
#: all-reduces took 2.6-4.1 ms. The gaps a step leaves are shorter for small models
#: (0.4-0.6 ms for ``tiny`` at tp=2: bench_collective_gap.py), hence :data:`GAPS_S`.
STEP_GAP_S = 0.010
#: Shorter gaps (s) before a third as many repeats each, which train the gap curve.
GAPS_S = (0.0005, 0.002)
#: ``origin`` prefix of the rows timed after one of :data:`GAPS_S` (the gap in us follows).
GAP_PREFIX = "collective_gap:"


def gap_origin(gap_s: float) -> str:
    """The origin of rows timed after ``gap_s`` seconds of computing."""
    return f"{GAP_PREFIX}{round(gap_s * 1e6)}"


def is_gap_row(rows: pd.DataFrame) -> pd.Series:
    """Which rows were timed after one of :data:`GAPS_S` (they train no op model)."""
    if "origin" not in rows:
        return rows["op"].map(lambda _: False).astype(bool)
    return rows["origin"].fillna("").astype(str).str.startswith(GAP_PREFIX)


def is_co_run_row(rows: pd.DataFrame) -> pd.Series:
    """Which rows the co-run phase timed (they train no op model)."""
    if "origin" not in rows:
        return rows["op"].map(lambda _: False).astype(bool)
    return rows["origin"].isin(CO_RUN_ORIGINS)
