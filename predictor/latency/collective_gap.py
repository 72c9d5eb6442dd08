"""A CPU collective's latency by the compute gap before it: what ``prism sample`` measured
(:mod:`sampling.collectives`), as ``prism train`` stores it and the composer applies it.

On a CPU, gloo's collectives cost more the longer their members computed before them:
``experiments/collective_gap/bench_collective_gap.py`` (two ranks, the slower rank's time) timed
a 12 KB all_reduce at a median of 0.9 ms after 0.5 ms of computing, 2.4 ms after 10 ms and
3.8 ms after 20 ms. The op models are trained on the repeats timed after the reference gap
:data:`STEP_GAP_S` (10 ms, origin ``sampled``); the sampler also times each collective after
the shorter gaps of :data:`GAPS_S` (:func:`rounds`), whose rows (origin ``collective_gap:<us>``) train no op
model. Their latency over the reference's, the median over every collective and size timed
both ways, is the host's *gap curve*: the models' manifest holds it (``collective_gap``:
the gaps in us, the ratio at each, the reference last at 1, and the sizes behind it), and
the composer scales a pass's collectives by the ratio at the compute time the pass puts
before each of them (:func:`ratio_at`, interpolated in log gap, flat beyond the ends).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from predictor.core.ops import OPS

if TYPE_CHECKING:  # pandas only where samples are trained on
    import pandas as pd

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
PREFIX = "collective_gap:"
#: Fewest (op, size) timed both ways that give a gap its ratio.
MIN_SIZES = 3


def origin_of(gap_s: float) -> str:
    """The origin of rows timed after ``gap_s`` seconds of computing."""
    return f"{PREFIX}{round(gap_s * 1e6)}"


def rounds(repeats: int, gaps: bool) -> list[tuple[float, str | None]]:
    """The timed rounds of a collective: (gap in s, the rows' origin, None for the run's
    own) each. ``repeats`` rounds after :data:`STEP_GAP_S` where ``gaps`` (a CPU's
    collective), else straight after the barrier; with ``gaps``, also a third as many after
    each of :data:`GAPS_S`, interleaved with them so that a slow spell of the host falls on
    every gap alike."""
    own = [(STEP_GAP_S if gaps else 0.0, None)] * repeats
    if not gaps:
        return own
    extra = [[(g, origin_of(g))] * max(repeats // 3, 1) for g in GAPS_S]
    return [r for k in range(repeats) for r in [own[k]] + [e[k] for e in extra if k < len(e)]]


def is_gap_row(rows: pd.DataFrame) -> pd.Series:
    """Which rows were timed after one of :data:`GAPS_S` (they train no op model)."""
    if "origin" not in rows:
        return rows["op"].map(lambda _: False).astype(bool)
    return rows["origin"].fillna("").astype(str).str.startswith(PREFIX)


def gap_curve(rows: pd.DataFrame, reference_s: float) -> dict | None:
    """``{"gaps_us": [...], "ratios": [...], "sizes": n}`` from the rows of ``rows`` timed
    after each gap and after ``reference_s`` (origin ``sampled``), ascending by gap, the
    reference last at 1; None where fewer than :data:`MIN_SIZES` sizes were timed both ways."""
    gap = is_gap_row(rows)
    if not gap.any():
        return None
    coll = rows[rows["op"].map(lambda op: OPS[op].collective) & (gap | (rows["origin"] == "sampled"))]
    coll = coll.assign(gap_us=[int(o[len(PREFIX):]) if str(o).startswith(PREFIX) else round(reference_s * 1e6)
                               for o in coll["origin"]])
    keys = ["op", "message_bytes", "group_size", "nodes", "ranks_per_node", "run_id"]
    medians = coll.groupby(keys + ["gap_us"], dropna=False)["latency_us"].median().unstack("gap_us")
    reference = round(reference_s * 1e6)
    if reference not in medians:
        return None
    gaps, ratios, sizes = [], [], 0
    for g in sorted(c for c in medians.columns if c != reference):
        both = medians[[g, reference]].dropna()
        if len(both) < MIN_SIZES:
            continue
        gaps.append(int(g))
        ratios.append(round(float((both[g] / both[reference]).median()), 4))
        sizes = max(sizes, len(both))
    if not gaps:
        return None
    return {"gaps_us": gaps + [reference], "ratios": ratios + [1.0], "sizes": sizes}


def ratio_at(curve: dict | None, gap_us) -> np.ndarray:
    """The latency ratio of a collective after ``gap_us`` of computing (an array), by the
    ``curve`` of :func:`gap_curve`: interpolated in log gap, flat beyond its ends; 1 where
    there is no curve."""
    gap_us = np.asarray(gap_us, dtype=float)
    if not curve:
        return np.ones_like(gap_us)
    x = np.log(np.asarray(curve["gaps_us"], dtype=float))
    return np.interp(np.log(np.maximum(gap_us, 1e-3)), x, np.asarray(curve["ratios"], dtype=float))


def is_curve(value) -> bool:
    """Whether a manifest's ``collective_gap`` is as :func:`gap_curve` gives it."""
    try:
        gaps, ratios = list(value["gaps_us"]), list(value["ratios"])
    except (TypeError, KeyError):
        return False
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < np.inf for v in gaps + ratios)
    return numbers and len(gaps) == len(ratios) >= 2 and gaps == sorted(set(gaps))
