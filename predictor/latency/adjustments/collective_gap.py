"""A CPU collective's latency by the compute gap before it: what ``prism sample`` measured
(:mod:`sampling.cpu.collective_gap`), as ``prism train`` stores it and the composer applies it.

Why it exists: the CPU testbed. On a CPU, gloo's collectives cost more the longer their
members computed before them (gloo's threads woken from idle):
``experiments/collective_gap/bench_collective_gap.py`` (two ranks, the slower rank's time) timed
a 12 KB all_reduce at a median of 0.9 ms after 0.5 ms of computing, 2.4 ms after 10 ms and
3.8 ms after 20 ms. NCCL's kernels on a GPU do not sleep between collectives. It would be
retired by a CPU backend whose collectives cost the same after any gap: the curve
``tests/latency/test_collective_gap.py::test_a_cpu_sample_times_each_gap_and_train_keeps_the_curve_apart_from_the_op_models``
trains would then be flat at 1.

The op models are trained on the repeats timed after the reference gap
:data:`~predictor.latency.origins.STEP_GAP_S` (10 ms, origin ``sampled``); the sampler also
times each collective after the shorter gaps of :data:`~predictor.latency.origins.GAPS_S`,
whose rows (origin ``collective_gap:<us>``) train no op model. Their latency over the
reference's, the median over every collective and size timed both ways, is the host's *gap
curve*: the models' manifest holds it (``adjustments.collective_gap``: the gaps in us, the
ratio at each, the reference last at 1, and the sizes behind it).

It changes no single call's quantiles (:meth:`CollectiveGap.applies` is empty): the
composer scales a pass's collectives by the ratio at the compute time the pass puts before
each of them (:func:`ratio_at`, interpolated in log gap, flat beyond the ends;
``predictor/engine/stages.py``, ``_gap_factors``), reading the curve from
:meth:`predictor.latency.artifacts.ModelSet.adjustment`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from predictor.core.ops import OPS
from predictor.latency.adjustments.base import Adjustment, Batch, Params, malformed, mapping
from predictor.latency.origins import GAP_PREFIX, STEP_GAP_S, is_gap_row

if TYPE_CHECKING:  # pandas only where samples are trained on
    import pandas as pd

#: Fewest (op, size) timed both ways that give a gap its ratio.
MIN_SIZES = 3


@dataclass(frozen=True)
class GapCurve(Params):
    """The ratio of a collective's latency after each gap (us, ascending) to the reference's
    (the last, at 1), and the most sizes behind a ratio."""

    gaps_us: tuple[int, ...]
    ratios: tuple[float, ...]
    sizes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"gaps_us": list(self.gaps_us), "ratios": list(self.ratios), "sizes": self.sizes}

    @classmethod
    def from_json(cls, value: Any, field: str) -> GapCurve:
        if not is_curve(value):
            raise malformed(field, f"{value!r:.80} is not ascending gaps_us with a positive ratio each")
        sizes = mapping(value, field).get("sizes", 0)
        return cls(tuple(value["gaps_us"]), tuple(value["ratios"]), sizes if isinstance(sizes, int) else 0)


def gap_curve(rows: pd.DataFrame, reference_s: float) -> dict | None:
    """``{"gaps_us": [...], "ratios": [...], "sizes": n}`` from the rows of ``rows`` timed
    after each gap and after ``reference_s`` (origin ``sampled``), ascending by gap, the
    reference last at 1; None where fewer than :data:`MIN_SIZES` sizes were timed both ways."""
    gap = is_gap_row(rows)
    if not gap.any():
        return None
    coll = rows[rows["op"].map(lambda op: OPS[op].collective) & (gap | (rows["origin"] == "sampled"))]
    coll = coll.assign(gap_us=[int(o[len(GAP_PREFIX):]) if str(o).startswith(GAP_PREFIX) else round(reference_s * 1e6)
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


def ratio_at(curve: GapCurve | dict | None, gap_us) -> np.ndarray:
    """The latency ratio of a collective after ``gap_us`` of computing (an array), by the
    ``curve`` (:class:`GapCurve`, or :func:`gap_curve`'s dict): interpolated in log gap,
    flat beyond its ends; 1 where there is no curve."""
    gap_us = np.asarray(gap_us, dtype=float)
    if not curve:
        return np.ones_like(gap_us)
    gaps, ratios = (curve.gaps_us, curve.ratios) if isinstance(curve, GapCurve) else (curve["gaps_us"], curve["ratios"])
    x = np.log(np.asarray(gaps, dtype=float))
    return np.interp(np.log(np.maximum(gap_us, 1e-3)), x, np.asarray(ratios, dtype=float))


def is_curve(value) -> bool:
    """Whether a manifest's curve is as :func:`gap_curve` gives it."""
    try:
        gaps, ratios = list(value["gaps_us"]), list(value["ratios"])
    except (TypeError, KeyError):
        return False
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < np.inf for v in gaps + ratios)
    return numbers and len(gaps) == len(ratios) >= 2 and gaps == sorted(set(gaps))


def without_gap_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` but those timed after a shorter gap: they train the curve, not the op models."""
    return rows[~is_gap_row(rows)]


class CollectiveGap(Adjustment):
    name = "collective_gap"
    mechanism = ("our measurement: experiments/collective_gap/bench_collective_gap.py and the gap rows "
                 "prism sample takes")
    testbed_only = True
    retire_when = ("tests/latency/test_collective_gap.py::"
                   "test_a_cpu_sample_times_each_gap_and_train_keeps_the_curve_apart_from_the_op_models, "
                   "once the curve it trains comes out flat")
    params_type = GapCurve
    legacy_key = "collective_gap"

    def fit(self, samples, hw) -> GapCurve | None:
        curve = gap_curve(samples, STEP_GAP_S)
        return GapCurve.from_json(curve, self.name) if curve else None

    def prepare(self, samples, params, hw):
        return without_gap_rows(samples)

    def applies(self, batch: Batch, params) -> np.ndarray:
        return np.zeros(len(batch), bool)  # a pass's collectives, by the compute before them: the composer's

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        return q

    def from_legacy(self, value: Any, field: str) -> GapCurve:
        return GapCurve.from_json(value, field)

    def example(self) -> GapCurve:
        return GapCurve((500, 2000, 10000), (0.4, 0.7, 1.0), 5)
