"""A rank's ops beside another rank on the same host: the slowdowns ``prism sample``
measured (:mod:`sampling.cpu.co_run`), as ``prism train`` stores them and the pricer applies them.

Why it exists: the CPU testbed. Two ranks of a CPU job share one host's cores, caches and
memory bandwidth; a GPU rank has its own device. ``experiments/co_runner/bench_co_runner.py`` measured
``small``'s step ops beside a copy looping the same step on this project's 2-core VM (the
measurement is the co-run phase's own rows, origins :data:`~predictor.latency.origins.CO_RUN_ORIGINS`).
It would be retired by a testbed of one rank per host, where
``tests/sampling/test_co_run.py::test_one_rank_on_a_cpu_and_gpu_ranks_are_alone`` leaves every call unmarked.

Each op's slowdown is the median, over the shapes timed both ways, of the shape's median
latency beside a neighbouring rank over its median alone (the two timed back to back in
one run). It is a property of the host, like the ops' latencies: the models' manifest
holds it (``adjustments.co_run``: per ``op/pass``, the slowdown and the shapes behind it),
and the pricer multiplies a call's quantiles by it where decompose marks the call as run
beside other ranks (mark ``co_runners``: :func:`predictor.workload.decompose.neighbours`).
Ops without such samples, and models without any, are left as timed alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from predictor.core.ops import OPS, Call
from predictor.latency.adjustments.base import Adjustment, Batch, Params, malformed, mapping, positive
from predictor.latency.origins import CO_RUN_ALONE, CO_RUN_BESIDE, CO_RUN_ORIGINS, is_co_run_row

if TYPE_CHECKING:  # pandas only where samples are trained on
    import pandas as pd

#: Fewest shapes timed both ways that give an op its slowdown.
MIN_SHAPES = 2


@dataclass(frozen=True)
class Slowdown:
    slowdown: float
    shapes: int


@dataclass(frozen=True)
class CoRunParams(Params):
    """Per ``op/pass``, its slowdown beside a neighbour and the shapes behind it."""

    by_op: dict[str, Slowdown] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"slowdowns": {k: {"slowdown": v.slowdown, "shapes": v.shapes} for k, v in self.by_op.items()}}

    @classmethod
    def from_json(cls, value: Any, field: str) -> CoRunParams:
        return cls.of_slowdowns(mapping(value, field).get("slowdowns"), f"{field}.slowdowns")

    @classmethod
    def of_slowdowns(cls, value: Any, field: str) -> CoRunParams:
        out = {}
        for key, entry in mapping(value, field).items():
            entry = mapping(entry, f"{field}.{key}")
            shapes = entry.get("shapes", 0)
            if not isinstance(shapes, int) or isinstance(shapes, bool) or shapes < 0:
                raise malformed(f"{field}.{key}.shapes", f"{shapes!r:.40} is not a count")
            out[str(key)] = Slowdown(positive(entry.get("slowdown"), f"{field}.{key}.slowdown"), shapes)
        return cls(out)

    def slowdown(self, op: str, pass_: str) -> float:
        entry = self.by_op.get(f"{op}/{pass_}")
        return entry.slowdown if entry is not None else 1.0


def slowdowns(rows: pd.DataFrame) -> dict[str, dict]:
    """``{"op/pass": {"slowdown": x, "shapes": n}}`` from the co-run rows of ``rows``
    (module doc); ops with fewer than :data:`MIN_SHAPES` shapes are left out."""
    if "origin" not in rows:
        return {}
    co = rows[rows["origin"].isin(CO_RUN_ORIGINS)]
    out = {}
    for (op, pass_), g in co.groupby(["op", "pass"], sort=True):
        cols = [c for c in OPS[op].shape if c in g] + ["dtype", "run_id"]
        medians = g.groupby(cols + ["origin"], dropna=False)["latency_us"].median().unstack("origin")
        medians = medians.dropna()
        if len(medians) < MIN_SHAPES or not set(CO_RUN_ORIGINS) <= set(medians.columns):
            continue
        ratio = (medians[CO_RUN_BESIDE] / medians[CO_RUN_ALONE]).median()
        out[f"{op}/{pass_}"] = {"slowdown": round(float(ratio), 4), "shapes": int(len(medians))}
    return out


def without_co_run(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` but the co-run phase's: they describe a neighbour's cost, not the op's."""
    return rows[~is_co_run_row(rows)] if "origin" in rows else rows


class CoRun(Adjustment):
    name = "co_run"
    mechanism = ("our measurement: experiments/co_runner/bench_co_runner.py and the co-run phase's rows "
                 "(sampling/cpu/co_run.py)")
    testbed_only = True
    retire_when = ("tests/sampling/test_co_run.py::test_one_rank_on_a_cpu_and_gpu_ranks_are_alone, on a "
                   "one-rank-per-host testbed")
    marks = {"co_runners": 0}
    params_type = CoRunParams
    legacy_key = "co_run"

    def fit(self, samples, hw) -> CoRunParams | None:
        found = slowdowns(samples)
        return CoRunParams.of_slowdowns(found, self.name) if found else None

    def prepare(self, samples, params, hw):
        return without_co_run(samples)

    def applies(self, batch: Batch, params: CoRunParams | None) -> np.ndarray:
        if batch.models is None:  # no models: a prior, which was never timed alone
            return np.zeros(len(batch), bool)
        return batch.marks["co_runners"] > 0

    def apply(self, batch: Batch, q: np.ndarray, params: CoRunParams | None, which: np.ndarray) -> np.ndarray:
        return q * (params.slowdown(batch.op, batch.pass_) if params is not None else 1.0)

    def from_legacy(self, value: Any, field: str) -> CoRunParams:
        return CoRunParams.of_slowdowns(value, field)

    def example(self) -> CoRunParams:
        return CoRunParams({"gemm/fwd": Slowdown(1.25, 4), "swiglu/bwd": Slowdown(1.1, 2)})

    def example_calls(self) -> tuple[str, list[Call]]:
        return "local-cpu", [Call.of(op, "fwd", dict(shape, **mark)) for op, shape in
                             (("gemm", {"m": 128, "n": 384, "k": 128}), ("swiglu", {"tokens": 128, "hidden": 384}))
                             for mark in ({}, {"co_runners": 1})]
