"""How good are a hardware's latency distributions on a sample store?

Per op and pass (per collective and topology, or per any grouping column such as
``origin``): the median's mean absolute percentage error against each shape's
measured median, the pinball loss of all quantiles (on log latency, so it is
scale-free), and how often the measured repeats fall inside the 80% (q0.1–q0.9)
and 90% (q0.05–q0.95) intervals.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.ops import OPS
from predictor.latency.artifacts import ModelSet, check_latencies, data_hash, shape_groups, training_rows

COLUMNS = ["op", "pass", "group", "network", "n", "rows", "mape_median", "pinball", "coverage_80", "coverage_90"]


def pinball(y: np.ndarray, q: np.ndarray, levels) -> float:
    """Mean pinball (quantile) loss of predictions ``q`` (n, k) at ``levels`` for ``y`` (n,)."""
    diff = y[:, None] - q
    levels = np.asarray(levels)[None, :]
    return float(np.mean(np.maximum(levels * diff, (levels - 1) * diff)))


def metrics(rows: pd.DataFrame, quantiles: np.ndarray, levels, groups: np.ndarray) -> dict:
    """Metrics of predicted ``quantiles`` (us, one row per sample row) against ``rows``."""
    levels = list(levels)
    lat = rows["latency_us"].to_numpy()
    mid = levels.index(0.5)
    per_shape = pd.DataFrame({"g": groups, "y": lat, "p": quantiles[:, mid]}).groupby("g")
    measured, predicted = per_shape["y"].median(), per_shape["p"].first()
    def inside(lo, hi):
        return float(np.mean((lat >= quantiles[:, levels.index(lo)]) & (lat <= quantiles[:, levels.index(hi)])))

    return {"n": int(len(measured)), "rows": int(len(lat)),
            "mape_median": float(np.mean(np.abs(predicted - measured) / measured)),
            "pinball": pinball(np.log(lat), np.log(quantiles), levels),
            "coverage_80": inside(0.1, 0.9), "coverage_90": inside(0.05, 0.95)}


def _as_trained(models: ModelSet, samples: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``samples`` the way ``prism train`` reads them for the models' hardware."""
    rows, _ = training_rows(samples[(samples["hardware"] == models.hw.name) & (samples["latency_us"] > 0)],
                            models.hw)
    return rows


def trained_on(models: ModelSet, samples: pd.DataFrame) -> bool:
    """Whether ``samples`` are the very rows ``models`` were trained on (the manifest's hash):
    scores on them are in-sample, not a test."""
    return data_hash(_as_trained(models, samples)[["op", "pass", "latency_us"]]) == \
        models.manifest.get("samples", {}).get("hash")


def evaluate(models: ModelSet, samples: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """One row per (op, pass, group): collectives group by topology (nodes x ranks per node)
    unless ``by`` names another column (e.g. ``origin``). ``network`` names, for
    collectives, the network their models were trained on (the manifest's
    ``collective_network``: a cluster's own samples describe its own network)."""
    if by is not None and by not in samples.columns:
        columns = ", ".join(map(str, samples.columns))
        raise PrismError(f"by={by}: no such column of the samples; choose one of {columns}", field="by")
    # else NaN scores, or rows dropped unsaid
    check_latencies(samples[samples["hardware"] == models.hw.name], models.hw)
    rows = _as_trained(models, samples)
    network = models.manifest.get("collective_network") or ""
    out = []
    for (op, pass_), g in rows.groupby(["op", "pass"], sort=True):
        if not models.has(op, pass_):
            continue
        q = models.query(op, pass_, g).to_numpy()
        if by is not None:
            keys = g[by].astype(str).to_numpy()
        elif OPS[op].collective:
            keys = (g["nodes"].astype(int).astype(str) + "x" + g["ranks_per_node"].astype(int).astype(str)).to_numpy()
        else:
            keys = np.full(len(g), "all")
        groups = shape_groups(op, g)
        for key in sorted(set(keys)):
            sel = keys == key
            out.append({"op": op, "pass": pass_, "group": key, "network": network if OPS[op].collective else "",
                        **metrics(g[sel], q[sel], models.quantiles, groups[sel])})
    return pd.DataFrame(out, columns=COLUMNS)
