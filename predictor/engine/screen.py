"""The screen: step-time draws of thousands of layouts at once, for the search to rank.

The stage arithmetic is the composer's own (:mod:`predictor.engine.stages`), run over
every stage of every layout at once with common random numbers: the same draw of an
operator call in every layout that makes it, and the same slowest-GPU uniforms per stage
position, so that layouts are compared on equal luck; each call and position draws from
a stream of its own (:class:`~predictor.engine.draws.KeyedStreams`), so a layout's figures
do not depend on which layouts are screened with it. Only the pipeline walk is
shortened. It is walked exactly (:func:`predictor.engine.schedule.steady_pipeline`) at
the median stage times (every call, the slowest GPU and the regime at their medians),
once per layout; each draw then scales a rank's end by the ratio of the closed-form
makespan at its own stage times to the one at the median times,
``(m - 1/vpp)·max(f+b) + sum(f+b)/vpp`` (exact for equal stages: Narayanan et al. 2021,
arXiv 2104.04473, §2.2), which spares a walk per draw. tests/analyses/test_search.py holds the
screen to :func:`~predictor.engine.compose.compose` on median and p95.
"""
from __future__ import annotations

import numpy as np

from predictor.core.specs import check_number
from predictor.engine.draws import KeyedStreams, Spread, max_of_lognormals
from predictor.engine.schedule import steady_pipeline
from predictor.engine.stages import StagePlan, draw_stage_sums, stage_times
from predictor.latency.lookup import QuantileCache
from predictor.latency.variability_profile import variability_of
from predictor.workload.decompose import Workload

#: Stage rows drawn at once (rows x draws floats per array): bounds the screen's memory.
STAGE_ROWS = 2048


def _closed_form(f, b, starts, layout_of_stage, m, vpp):
    """Each rank's end by the closed form of equal stages, (rows, S): the slowest rank's
    ``(m - 1/vpp)`` micro-batches plus one pass through all stages, less the backward that
    later ranks finish before rank 0."""
    total = f + b
    slowest = np.maximum.reduceat(total, starts, axis=0)
    passes = np.add.reduceat(total, starts, axis=0)
    before = np.cumsum(b, axis=0) - b
    before -= before[starts][layout_of_stage]
    v = vpp[:, None]
    return ((m[:, None] - 1 / v) * slowest + passes / v)[layout_of_stage] - before / v[layout_of_stage]


def _median_ends(plan: StagePlan, f0: np.ndarray, b0: np.ndarray, in_flight: np.ndarray,
                 vpp: np.ndarray) -> np.ndarray:
    """(rows,) each rank's end by the exact schedule walk at the median stage times
    ``f0``, ``b0`` and transfers ``in_flight`` (rows,), layouts of one pipeline shape
    stacked along the draws."""
    schedules = np.array([w.parallel.schedule for w in plan.works])
    ends = np.empty(len(plan.kind))
    for pp, v, schedule in set(zip(plan.pp.tolist(), vpp.tolist(), schedules.tolist())):
        cols = np.flatnonzero((plan.pp == pp) & (vpp == v) & (schedules == schedule))
        rows = plan.starts[cols][None, :] + np.arange(pp)[:, None]  # (pp, layouts)
        ends[rows] = steady_pipeline(f0[rows], b0[rows], plan.micro_batches[cols].astype(int), schedule, v,
                                     in_flight[rows]).rank_end
    return ends


def screen(works: list[Workload], models, cache: QuantileCache, draws: int, seed: int = 0) -> np.ndarray:
    """(layouts, draws) step times in seconds of ``works`` (all on one hardware), by the
    module docstring's shortcut."""
    check_number("seed", seed, integer=True, zero=True)
    check_number("draws", draws, integer=True)
    streams = KeyedStreams(seed)  # a layout's draws do not depend on the others screened with it
    plan = StagePlan.of(works)
    sums = draw_stage_sums(plan, models, cache, draws, streams)
    spread = Spread.of(variability_of(works[0].hardware, models).spec)
    groups, group_of_layout = np.unique([w.mesh.gpus_per_stage for w in works], return_inverse=True)
    # the slowest of a stage's GPUs: common random numbers per stage position
    u = streams.generator("stage positions").uniform(size=(plan.pp.max(), draws))
    speeds = np.stack([max_of_lognormals(spread.gpu, int(n), u) for n in groups])
    regime = spread.regime_factor(streams.generator("communication regime"), draws)
    vpp = np.array([w.parallel.vpp for w in works])
    group_of_row = group_of_layout[plan.layout]

    # every call, the slowest GPU and the regime at their medians: the exact schedule walk
    speed0 = np.array([max_of_lognormals(spread.gpu, int(n), np.array([0.5]))[0] for n in groups])
    median = stage_times(plan, sums.nominal[..., None], sums.buckets, slice(None), speed0[group_of_row, None], 1.0)
    f0, b0 = median.forward, median.backward
    ends0 = _median_ends(plan, f0[:, 0], b0[:, 0], median.in_flight[:, 0], vpp)
    shape0 = _closed_form(f0, b0, plan.starts, plan.layout, plan.micro_batches, vpp)[:, 0]

    steps = np.empty((len(works), draws))
    lo = 0
    while lo < len(works):  # whole layouts, about STAGE_ROWS stage rows at a time
        hi = max(lo + 1, int(np.searchsorted(plan.starts, plan.starts[lo] + STAGE_ROWS, side="right")) - 1)
        hi = min(hi, len(works))
        rows = slice(plan.starts[lo], plan.starts[hi] if hi < len(works) else len(plan.kind))
        local = plan.starts[lo:hi] - plan.starts[lo]
        owner = plan.layout[rows] - lo
        t = stage_times(plan, sums.drawn, sums.buckets, rows, speeds[group_of_row[rows], plan.position[rows]],
                        regime)
        shape = _closed_form(t.forward, t.backward, local, owner, plan.micro_batches[lo:hi], vpp[lo:hi])
        finish = (ends0[rows] / shape0[rows])[:, None] * shape + t.after
        steps[lo:hi] = np.maximum.reduceat(finish, local, axis=0)
        lo = hi
    return steps / 1e6
