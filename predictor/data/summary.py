"""What a sample store holds: per op, pass and dtype, how many shapes and repeats."""
from __future__ import annotations

import pandas as pd

from predictor.core.ops import OPS
from predictor.data import store


def summarize(path) -> pd.DataFrame:
    """One row per (hardware, op, pass, dtype): shapes, rows, repeats per shape, latency range.

    Examples
    --------
    >>> summarize("samples/cpu")  # doctest: +SKIP
         hardware        op pass    dtype  shapes  rows  min_repeats  p50_us_min  p50_us_max
    0   local-cpu      gemm  bwd  float32      24   240           10       12.3     20451.0
    """
    df = store.read_samples(path)
    out = []
    for (hw, op, pass_, dtype), g in df.groupby(["hardware", "op", "pass", "dtype"], sort=True):
        per_shape = g.groupby(list(OPS[op].shape), dropna=False)["latency_us"]
        medians = per_shape.median()
        out.append({"hardware": hw, "op": op, "pass": pass_, "dtype": dtype,
                    "shapes": len(medians), "rows": len(g), "min_repeats": int(per_shape.size().min()),
                    "p50_us_min": round(float(medians.min()), 1),
                    "p50_us_max": round(float(medians.max()), 1)})
    return pd.DataFrame(out, columns=["hardware", "op", "pass", "dtype", "shapes", "rows",
                                      "min_repeats", "p50_us_min", "p50_us_max"])
