"""The rounds a CPU collective is timed in: after the reference compute gap, and after the
shorter gaps whose rows train the gap curve (:mod:`predictor.latency.adjustments.collective_gap`).

Why: on a CPU, gloo's collectives cost more the longer their members computed before them
(``experiments/collective_gap/bench_collective_gap.py``); a GPU's collectives are timed straight after the
barrier. The gaps and the rows' origins are the sampler's and the trainer's shared names
(:mod:`predictor.latency.origins`).
"""
from __future__ import annotations

import time

from predictor.latency.origins import GAPS_S, STEP_GAP_S, gap_origin


def rounds(repeats: int, gaps: bool) -> list[tuple[float, str | None]]:
    """The timed rounds of a collective: (gap in s, the rows' origin, None for the run's
    own) each. ``repeats`` rounds after :data:`~predictor.latency.origins.STEP_GAP_S` where
    ``gaps`` (a CPU's collective), else straight after the barrier; with ``gaps``, also a
    third as many after each of :data:`~predictor.latency.origins.GAPS_S`, interleaved with
    them so that a slow spell of the host falls on every gap alike."""
    own = [(STEP_GAP_S if gaps else 0.0, None)] * repeats
    if not gaps:
        return own
    extra = [[(g, gap_origin(g))] * max(repeats // 3, 1) for g in GAPS_S]
    return [r for k in range(repeats) for r in [own[k]] + [e[k] for e in extra if k < len(e)]]


def compute_for(seconds: float) -> None:
    """Keep this rank's core busy for ``seconds`` (0: not at all), as a step's compute does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
