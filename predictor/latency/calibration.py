"""In-situ calibration: what isolated operator samples miss inside a real training step.

An operator timed alone runs with warm caches and no framework around it; inside a
training step the same kernel shares caches with its neighbours, and autograd, the
parallel wrappers (DDP hooks, DTensor dispatch, pipeline stages) and the ops outside
the vocabulary (views, copies, concatenations) add time around every call. Three
numbers per hardware absorb this, fitted to measured reference steps
(:mod:`predictor.data.measurements`):

``compute_scale``    multiplies every compute op's latency (in-step efficiency),
``op_overhead_us``   is added to every compute op instance (framework time per call:
                     autograd, views and copies outside the vocabulary),
``tp_overhead_us``   is added to every compute op instance of a tensor-parallel job on
                     top (DTensor's sharding propagation and redistribution per call).

Collectives are left as sampled: they were timed end to end between processes already.

The framework's own time is composed as host ops (:mod:`predictor.workload.host`), sampled
or from cited priors, so a prediction needs no calibration; this is the option for what a
machine's measured steps still show beyond them (``prism calibrate``).

They are fitted by least squares on ``log(predicted median / measured median)`` over
the measured layouts and stored in the hardware's model manifest (``calibration``), so
every prediction on that hardware uses them; one that no measured layout bears on (``tp_overhead_us``
without a tp>1 layout) keeps its neutral value, named in ``unfitted``. Fitting them is an analysis
(:mod:`predictor.analyses.calibrate`); :func:`~predictor.analyses.calibrate.cross_validate` scores the idea
honestly: each layout is predicted with factors fitted on the other layouts only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Calibration:
    compute_scale: float = 1.0
    op_overhead_us: float = 0.0
    tp_overhead_us: float = 0.0
    layouts: int = 0  # how many measured layouts it was fitted on
    rms_log_error: float = 0.0  # of the fit on those layouts
    unfitted: str = ""  # the numbers left at their neutral value, and why
    source: str = "measured steps"

    def to_dict(self) -> dict:
        return asdict(self)

    def apply(self, q_us: np.ndarray, collective: bool, tp: int) -> np.ndarray:
        """Quantiles (us) of op instances as they run inside a training step of tp degree ``tp``."""
        if collective:
            return q_us
        return q_us * self.compute_scale + self.op_overhead_us + (self.tp_overhead_us if tp > 1 else 0.0)
