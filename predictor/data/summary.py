"""What a sample store holds: per op, pass and dtype, how many shapes and repeats."""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.core.ops import OPS
from predictor.data import store
from predictor.latency.artifacts import op_samples


def summarize(path) -> pd.DataFrame:
    """One row per (hardware, op, pass, dtype): shapes, rows, repeats per shape, latency range,
    and the rows whose latency is not a positive number (``prism train`` refuses them; the
    range is of the others): the rows ``prism train`` fits, so not the co-run phase's (each
    task's twins timed alone and beside a neighbour, which give only its slowdown) nor the
    collective gap curve's.

    Examples
    --------
    >>> summarize("samples/cpu")  # doctest: +SKIP
         hardware        op pass    dtype  shapes  rows  min_repeats  p50_us_min  p50_us_max
    0   local-cpu      gemm  bwd  float32      24   240           10       12.3     20451.0
    """
    df = op_samples(store.read_samples(path))  # the rows train fits: no co-run twins nor gap-curve rows
    out = []
    for (hw, op, pass_, dtype), g in df.groupby(["hardware", "op", "pass", "dtype"], sort=True):
        unusable = ~(g["latency_us"] > 0) | ~np.isfinite(g["latency_us"])  # NaN fails the first test
        per_shape = g.groupby(list(OPS[op].shape), dropna=False)["latency_us"]
        medians = g[~unusable].groupby(list(OPS[op].shape), dropna=False)["latency_us"].median()
        if medians.empty:  # every row unusable: no range to show
            medians = pd.Series([np.nan])
        out.append({"hardware": hw, "op": op, "pass": pass_, "dtype": dtype,
                    "shapes": len(medians), "rows": len(g), "min_repeats": int(per_shape.size().min()),
                    "p50_us_min": round(float(medians.min()), 1),
                    "p50_us_max": round(float(medians.max()), 1), "unusable_rows": int(unusable.sum())})
    return pd.DataFrame(out, columns=["hardware", "op", "pass", "dtype", "shapes", "rows",
                                      "min_repeats", "p50_us_min", "p50_us_max", "unusable_rows"])
