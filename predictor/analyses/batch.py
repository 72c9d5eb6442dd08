"""``prism predict-batch``: workloads in the published-runs table layout in, predictions beside them.

Reads the 36-column layout of ``e2e_training_visible.csv`` (:mod:`predictor.data.published`,
which also says what blank fields default to) and adds ``pred_iter_time_s_p50/_p5/_p95``,
``pred_mem_gib`` and ``pred_status`` (``ok`` or the error).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.specs import HardwareConfig
from predictor.data.published import row_workload
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet, trained_models
from predictor.workload.decompose import decompose
from predictor.workload.memory import memory_per_gpu


def predict_table(table: pd.DataFrame, draws: int = 1000, models_root=None) -> pd.DataFrame:
    """``table`` with the predicted columns added (one prediction per row)."""
    profiles: dict[str, HardwareConfig] = {}
    cache: dict[str, ModelSet | None] = {}
    out = table.copy()
    cols = {c: [] for c in ("pred_iter_time_s_p50", "pred_iter_time_s_p5", "pred_iter_time_s_p95",
                            "pred_mem_gib", "pred_status")}
    for _, row in table.iterrows():
        try:
            model, par, hw = row_workload(row, profiles)
            if hw.name not in cache:
                cache[hw.name] = trained_models(profiles[hw.name], models_root)
            models = cache[hw.name] and cache[hw.name].with_hardware(hw)
            dist = compose(decompose(model, par, hw, int(row["num_gpus"])), models, draws=draws)
            p5, p50, p95 = dist.quantile([0.05, 0.5, 0.95])
            mem = memory_per_gpu(model, par, flash_attention=par.attention == "flash").total_gib
            values = [p50, p5, p95, mem, "ok"]
        except PrismError as exc:
            values = [np.nan] * 4 + [str(exc)]
        for c, v in zip(cols, values):
            cols[c].append(v)
    for c, v in cols.items():
        out[c] = v
    return out


def predict_batch(path, out_path, draws: int = 1000) -> pd.DataFrame:
    table = pd.read_csv(path)
    result = predict_table(table, draws=draws)
    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    result.to_csv(tmp, index=False)
    tmp.replace(out_path)
    return result
