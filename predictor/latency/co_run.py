"""A rank's ops beside another rank on the same host: the slowdowns ``prism sample``
measured (:mod:`sampling.co_run`), as ``prism train`` stores them and the lookup applies them.

Each op's slowdown is the median, over the shapes timed both ways, of the shape's median
latency beside a neighbouring rank over its median alone (the two timed back to back in
one run). It is a property of the host, like the ops' latencies: the models' manifest
holds it (``co_run``: per ``op/pass``, the slowdown and the shapes behind it), and the
lookup multiplies a call's quantiles by it where decompose marks the call as run beside
other ranks (:func:`predictor.workload.decompose.neighbours`). Ops without such samples,
and models without any, are left as timed alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from predictor.core.ops import OPS

if TYPE_CHECKING:  # pandas only where samples are trained on
    import pandas as pd

#: ``origin`` of the rows timed alone in the co-run phase, and of their twins timed beside
#: the neighbour: neither is an op model's sample.
ALONE, BESIDE = "co_run_alone", "co_run_beside"
ORIGINS = (ALONE, BESIDE)
#: Fewest shapes timed both ways that give an op its slowdown.
MIN_SHAPES = 2


def slowdowns(rows: pd.DataFrame) -> dict[str, dict]:
    """``{"op/pass": {"slowdown": x, "shapes": n}}`` from the co-run rows of ``rows``
    (module doc); ops with fewer than :data:`MIN_SHAPES` shapes are left out."""
    if "origin" not in rows:
        return {}
    co = rows[rows["origin"].isin(ORIGINS)]
    out = {}
    for (op, pass_), g in co.groupby(["op", "pass"], sort=True):
        cols = [c for c in OPS[op].shape if c in g] + ["dtype", "run_id"]
        medians = g.groupby(cols + ["origin"], dropna=False)["latency_us"].median().unstack("origin")
        medians = medians.dropna()
        if len(medians) < MIN_SHAPES or not set(ORIGINS) <= set(medians.columns):
            continue
        ratio = (medians[BESIDE] / medians[ALONE]).median()
        out[f"{op}/{pass_}"] = {"slowdown": round(float(ratio), 4), "shapes": int(len(medians))}
    return out


def without_co_run(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` but the co-run phase's: they describe a neighbour's cost, not the op's."""
    return rows[~rows["origin"].isin(ORIGINS)] if "origin" in rows else rows


def slowdown(manifest: dict, op: str, pass_: str) -> float:
    """The stored slowdown of ``op``'s ``pass_`` beside a neighbour; 1 where none was sampled."""
    return float(manifest.get("co_run", {}).get(f"{op}/{pass_}", {}).get("slowdown", 1.0))
