"""The generalization protocol's split of the published runs (``data/e2e/split.yaml``):
every source of ``data/e2e`` (a row's ``set_id``) on the fit side, where one may fit or
adjust PRISM, or on the score side, only scored; and every visible row of ``data/e2e``
once, with its source, its table and its measured step.

``e2e_training_visible.csv`` gathers the sets of ``e2e_vtrain_multi.csv``,
``e2e_narayanan2021_t1/t2.csv``, ``e2e_megatronlm_readme_h100.csv``, ``e2e_torchtitan.csv``
and ``e2e_neusight_dist.csv``; :func:`visible_runs` reads it (with
:func:`~predictor.data.published.published_runs`' fills) and every other table for the
sets it does not hold, so that no row counts twice.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from predictor.core.errors import PrismError
from predictor.core.profiles import DATA_DIR
from predictor.data.llmfoundry import TABLE as LLMFOUNDRY_TABLE
from predictor.data.llmfoundry import llmfoundry_runs
from predictor.data.published import (
    RUNS_TABLE,
    SINGLE_NODE_TABLE,
    measured_step_s,
    published_runs,
    single_node_runs,
)

E2E_DIR = DATA_DIR / "e2e"
SPLIT_FILE = E2E_DIR / "split.yaml"
SIDES = ("fit", "score")
#: The sets of the tables without a set_id column.
TABLE_SETS = {LLMFOUNDRY_TABLE: "llmfoundry_mpt", SINGLE_NODE_TABLE: "vtrain_single_node"}


def load_split(path=SPLIT_FILE) -> dict[str, str]:
    """source -> side ("fit" or "score") as ``path`` decides; a source on both sides, or
    a side that is neither, is an error."""
    path = Path(path)
    if not path.is_file():
        raise PrismError(f"{path}: no split file; the protocol's is data/e2e/split.yaml", field=str(path))
    text = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = sorted(set(text) - {*SIDES, "decided"})
    if unknown:
        raise PrismError(f"{path}: {unknown[0]!r} is no side; write fit: and score:", field=str(path))
    side_of: dict[str, str] = {}
    for side in SIDES:
        for source in text.get(side) or {}:
            if source in side_of:
                raise PrismError(f"{path}: source {source!r} is on both sides (or twice on one)", field=str(path))
            side_of[str(source)] = side
    return side_of


def e2e_sources(e2e_dir=E2E_DIR) -> dict[str, list[str]]:
    """Every source (set_id) the CSV tables of ``e2e_dir`` hold -> the tables that hold it."""
    found: dict[str, list[str]] = {}
    for path in sorted(Path(e2e_dir).glob("*.csv")):
        if path.name in TABLE_SETS:
            sets = [TABLE_SETS[path.name]]
        else:
            header = pd.read_csv(path, nrows=0).columns
            if "set_id" not in header:
                raise PrismError(f"{path}: no set_id column, and not a table predictor.data.split knows; add it to "
                                 f"TABLE_SETS", field=str(path))
            sets = sorted(pd.read_csv(path, usecols=["set_id"]).set_id.dropna().astype(str).unique())
        for source in sets:
            found.setdefault(source, []).append(path.name)
    return found


def visible_runs(e2e_dir=E2E_DIR) -> pd.DataFrame:
    """Every row of the tables of ``e2e_dir`` once, in the published-runs layout, with
    ``source`` (its set_id), ``table`` (the file it was read from) and ``measured_s``
    (:func:`~predictor.data.published.measured_step_s`; NaN where the row states none)."""
    e2e_dir = Path(e2e_dir)
    parts = [published_runs(e2e_dir).assign(table=RUNS_TABLE),
             single_node_runs(e2e_dir).assign(table=SINGLE_NODE_TABLE),
             llmfoundry_runs(e2e_dir).assign(table=LLMFOUNDRY_TABLE)]
    held = {str(s) for part in parts for s in part.set_id.unique()}
    for path in sorted(e2e_dir.glob("*.csv")):
        if path.name in (RUNS_TABLE, *TABLE_SETS):
            continue
        table = pd.read_csv(path)
        rows = table[~table.set_id.astype(str).isin(held)].copy()
        if rows.empty:
            continue
        rows["measured_s"] = [measured_step_s(row) for _, row in rows.iterrows()]
        parts.append(rows.assign(table=path.name))
        held |= set(rows.set_id.astype(str))
    runs = pd.concat(parts, ignore_index=True)
    runs["measured_s"] = pd.to_numeric(runs["measured_s"], errors="coerce").astype(float)
    runs.loc[~np.isfinite(runs.measured_s), "measured_s"] = np.nan
    return runs.assign(source=runs.set_id.astype(str))
