"""Per-(hardware, op, pass) latency distributions: train, save, load, query.

A :class:`ModelSet` holds one hardware's models. Each predicts quantiles of
``log(latency / floor)`` (see :mod:`predictor.latency.features`) and answers in microseconds.
Artifacts: ``models/<hardware>/<op>__<pass>.ubj`` (the center booster, XGBoost's own
format), ``<op>__<pass>.quantiles.ubj`` (the residual quantiles) and
``manifest.json`` (features, quantiles, offsets, training-data hash, sample counts,
held-out metrics, library versions, the hardware floor they were trained against).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import sklearn
import xgboost as xgb

from predictor.core.errors import PrismError
from predictor.core.ops import COLLECTIVE_OPS, OPS
from predictor.core.profiles import REPO_ROOT, load_hardware
from predictor.core.specs import HardwareConfig, RegressorConfig
from predictor.latency.calibration import Calibration
from predictor.latency.features import TOPOLOGY, feature_names, features
from predictor.latency.regressor import QuantileXGBRegressor

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def models_dir(configured=None) -> Path:
    """Where a hardware's artifacts live: ``configured``, or the repository's ``models/``."""
    return Path(configured) if configured else REPO_ROOT / "models"


def trained_models(hw: HardwareConfig, root=None) -> ModelSet | None:
    """``hw``'s trained models, or None where none were trained (predictions then rest on
    priors)."""
    path = models_dir(root) / hw.name
    if (path / MANIFEST).exists():
        return ModelSet.load(path, hw)
    if hw.models_from and (models_dir(root) / hw.models_from / MANIFEST).exists():
        return ModelSet.load(models_dir(root) / hw.models_from, load_hardware(hw.models_from)).with_hardware(hw)
    return None


#: What a hardware's predictions rest on, best first: operator samples measured on it,
#: models fitted to its published microbenchmarks, or its datasheet alone (wider bands).
TIERS = ("measured samples", "microbenchmarks", "spec-only prior")
#: ``origin`` prefix of rows imported from published microbenchmarks
#: (:mod:`predictor.data.importers.microbench`).
MICROBENCH = "microbench:"


def evidence_tier(models: ModelSet | None) -> str:
    """The tier (:data:`TIERS`) of ``models``; None means no trained models: the spec prior."""
    if models is None:
        return TIERS[2]
    tier = models.manifest.get("tier", TIERS[0])
    source = models.manifest.get("hardware", models.hw.name)
    return tier if source == models.hw.name else f"{tier} of {source} (same compute die)"


def shape_groups(op: str, rows: pd.DataFrame) -> np.ndarray:
    """One id per distinct (shape, topology, dtype): a shape's repeats form one group."""
    cols = list(OPS[op].shape) + (list(TOPOLOGY) if OPS[op].collective else []) + ["dtype"]
    cols = [c for c in cols if c in rows]
    return rows.groupby(cols, dropna=False, sort=False).ngroup().to_numpy()


def floor_fingerprint(hw: HardwareConfig) -> str:
    """Hash of the hardware figures the floor uses: models trained on other figures are stale."""
    text = json.dumps({"peak": hw.peak_flops, "bw": hw.memory.bandwidth,
                       "intra": [hw.network.intra_node.bandwidth, hw.network.intra_node.latency_us],
                       "inter": [hw.network.inter_node.bandwidth, hw.network.inter_node.latency_us]},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def data_hash(rows: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(rows.reset_index(drop=True)).to_numpy().tobytes()
                          ).hexdigest()[:16]


@dataclass
class OperatorModel:
    """The latency distribution of one op in one pass on one hardware."""

    op: str
    pass_: str
    regressor: QuantileXGBRegressor
    info: dict

    def predict(self, shapes: pd.DataFrame, hw: HardwareConfig) -> np.ndarray:
        """Latency quantiles in microseconds, shape (len(shapes), n_quantiles)."""
        X, floor = features(self.op, self.pass_, shapes, hw)
        return floor[:, None] * np.exp(self.regressor.predict(X))


def fit_operator_model(op: str, pass_: str, rows: pd.DataFrame, hw: HardwareConfig,
                       rc: RegressorConfig) -> OperatorModel:
    rows = rows[rows["latency_us"] > 0]
    X, floor = features(op, pass_, rows, hw)
    y = np.log(rows["latency_us"].to_numpy() / floor)
    groups = shape_groups(op, rows)
    params = dict(rc.params)
    reg = QuantileXGBRegressor(quantiles=tuple(rc.quantiles), **params).fit(X, y, groups)
    info = {"rows": int(len(rows)), "shapes": int(len(np.unique(groups))),
            "calibration_shapes": int(reg.n_calibration_), "offsets": reg.offsets_.tolist(),
            "data_hash": data_hash(rows[list(OPS[op].shape) + ["latency_us"]]),
            "origins": sorted(map(str, rows["origin"].dropna().unique())) if "origin" in rows else []}
    return OperatorModel(op, pass_, reg, info)


class ModelSet:
    """All operator models of one hardware; query them by op, pass and shapes.

    Examples
    --------
    >>> models = ModelSet.load("models/a100-sxm4-80gb", hw)           # doctest: +SKIP
    >>> models.query("gemm", "fwd", pd.DataFrame({"m": [8192], "n": [8192], "k": [8192],
    ...                                          "dtype": ["float16"]}))   # doctest: +SKIP
         q0.05    q0.1  ...   q0.95
    0   3702.1  3741.8  ...  4010.6
    """

    def __init__(self, hw: HardwareConfig, quantiles, models: dict, manifest: dict | None = None):
        self.hw = hw
        self.quantiles = tuple(quantiles)
        self.models = models
        self.manifest = manifest or {}

    def with_hardware(self, hw: HardwareConfig) -> ModelSet:
        """The same models queried for ``hw``: a copy of their profile with another network
        (a job on its own cluster), or a profile that borrows them (``models_from``); the
        floors, and so the predictions, follow ``hw``."""
        return ModelSet(hw, self.quantiles, self.models, self.manifest)

    @property
    def calibration(self) -> Calibration | None:
        """The in-situ calibration fitted to measured steps on this hardware, if any."""
        cal = self.manifest.get("calibration")
        return Calibration(**cal) if cal else None

    def save_calibration(self, directory, calibration: Calibration) -> Path:
        """Store ``calibration`` in the manifest of the models saved in ``directory`` (atomically)."""
        path = Path(directory) / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["calibration"] = calibration.to_dict()
        tmp = path.with_name(f".{MANIFEST}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, path)
        self.manifest = manifest
        return path

    def has(self, op: str, pass_: str) -> bool:
        return (op, pass_) in self.models

    def query(self, op: str, pass_: str, shapes: pd.DataFrame) -> pd.DataFrame:
        """Latency quantiles (us) for each row of ``shapes``, one column per quantile."""
        if (op, pass_) not in self.models:
            have = ", ".join(f"{o}/{p}" for o, p in sorted(self.models))
            raise PrismError(f"no model for {op}/{pass_} on {self.hw.name}; this model set has: {have}. "
                             f"Sample the op and run prism train", field=f"{op}/{pass_}")
        q = self.models[(op, pass_)].predict(shapes, self.hw)
        return pd.DataFrame(q, columns=[f"q{a:g}" for a in self.quantiles], index=shapes.index)

    # -- artifacts --------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write every model as ``<op>__<pass>.ubj`` and the manifest (each file atomically)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        entries = {}
        for (op, pass_), m in sorted(self.models.items()):
            files = {}
            for part, booster in (("center", m.regressor.center_), ("quantiles", m.regressor.booster_)):
                name = f"{op}__{pass_}.ubj" if part == "center" else f"{op}__{pass_}.quantiles.ubj"
                tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.ubj"
                booster.save_model(tmp)
                os.replace(tmp, directory / name)
                files[part] = {"file": name, "sha256": hashlib.sha256((directory / name).read_bytes()).hexdigest()}
            entries[f"{op}/{pass_}"] = {"files": files, "op": op, "pass": pass_,
                                        "features": feature_names(op), **m.info}
        manifest = {
            "format": FORMAT_VERSION, "hardware": self.hw.name, "quantiles": list(self.quantiles),
            "target": "log(latency_us / floor_us)", "floor_fingerprint": floor_fingerprint(self.hw),
            "created": datetime.now(timezone.utc).isoformat(),
            "versions": {"xgboost": xgb.__version__, "scikit-learn": sklearn.__version__,
                         "numpy": np.__version__, "python": platform.python_version()},
            **{k: v for k, v in self.manifest.items()
               if k in ("samples", "collective_network", "tier", "collective_scope")},
            "models": entries,
        }
        tmp = directory / f".{MANIFEST}.{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, directory / MANIFEST)
        self.manifest = manifest
        return directory

    @classmethod
    def load(cls, directory, hw: HardwareConfig) -> ModelSet:
        """Load a hardware's models, checking them against the manifest and the profile."""
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.exists():
            raise PrismError(f"{directory}: no trained models ({MANIFEST} missing); train them with "
                             f"prism train samples=DIR hardware={hw.name}", field=str(directory))
        try:
            manifest = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise PrismError(f"{path}: not valid JSON ({exc}); retrain with prism train", field=str(path)) from None
        if manifest.get("format") != FORMAT_VERSION or manifest.get("hardware") != hw.name:
            raise PrismError(f"{path}: made for hardware {manifest.get('hardware')!r} (format "
                             f"{manifest.get('format')}), not {hw.name!r}; retrain with prism train", field=str(path))
        if manifest["floor_fingerprint"] != floor_fingerprint(hw):
            raise PrismError(f"{path}: conf/hardware/{hw.name}.yaml changed (peak, bandwidth or network) "
                             f"since these models were trained; retrain with prism train", field=str(path))
        models = {}
        for key, entry in manifest["models"].items():
            boosters = {}
            for part, f in entry["files"].items():
                file = directory / f["file"]
                if not file.exists():
                    raise PrismError(f"{file}: listed in {MANIFEST} but missing; retrain with prism train",
                                     field=str(file))
                if hashlib.sha256(file.read_bytes()).hexdigest() != f["sha256"]:
                    raise PrismError(f"{file}: does not match its checksum in {MANIFEST} (changed or "
                                     f"truncated); retrain with prism train", field=str(file))
                # Queries come in small batches: one thread beats a thread per core, which
                # spends more time synchronising than predicting (2.7 s vs 5-6 s for a
                # four-profile prism compare on 2 busy cores).
                boosters[part] = xgb.Booster(params={"nthread": 1}, model_file=str(file))
            if entry["features"] != feature_names(entry["op"]):
                raise PrismError(f"{key}: trained on features {entry['features']}, this PRISM "
                                 f"computes {feature_names(entry['op'])}; retrain with prism train", field=key)
            reg = QuantileXGBRegressor(quantiles=tuple(manifest["quantiles"]))
            reg.center_, reg.booster_ = boosters["center"], boosters["quantiles"]
            reg.offsets_ = np.asarray(entry["offsets"])
            models[(entry["op"], entry["pass"])] = OperatorModel(entry["op"], entry["pass"], reg, entry)
        return cls(hw, manifest["quantiles"], models, manifest)


def train(samples: pd.DataFrame, hw: HardwareConfig, rc: RegressorConfig, n_jobs: int = 2,
          progress: bool = False) -> ModelSet:
    """Fit one model per (op, pass) present in ``samples`` for ``hw`` (in parallel)."""
    rows = samples[samples["hardware"] == hw.name]
    if rows.empty:
        held = ", ".join(sorted(map(str, samples["hardware"].dropna().unique()))) or "nothing"
        raise PrismError(f"hardware={hw.name}: the samples hold no rows for it (they hold: {held})", field='hardware')
    groups = [(op, pass_, g) for (op, pass_), g in rows.groupby(["op", "pass"], sort=True)]
    jobs = (joblib.delayed(fit_operator_model)(op, pass_, g, hw, rc) for op, pass_, g in groups)
    fitted = joblib.Parallel(n_jobs=n_jobs, verbose=0)(jobs)
    models = {(m.op, m.pass_): m for m in fitted}
    origins = rows["origin"].fillna("sampled") if "origin" in rows else pd.Series("sampled", index=rows.index)
    coll = rows[rows["op"].isin(COLLECTIVE_OPS)]
    manifest = {"samples": {"rows": int(len(rows)), "hash": data_hash(rows[["op", "pass", "latency_us"]])},
                "collective_network": collective_network(rows, hw),
                "tier": TIERS[1] if origins.str.startswith(MICROBENCH).all() else TIERS[0],
                # Collectives measured inside one node say nothing of the network between nodes.
                "collective_scope": "intra-node" if not coll.empty and (coll["nodes"] <= 1).all() else "all"}
    return ModelSet(hw, rc.quantiles, models, manifest)


def collective_network(rows: pd.DataFrame, hw: HardwareConfig) -> str | None:
    """The network the collective samples describe: this profile's own when we measured
    them (origin ``sampled``), else where they came from (e.g. ``ett:Perlmutter``): one
    cluster's network is not another's, so the composer uses them only on their own."""
    coll = rows[rows["op"].isin(COLLECTIVE_OPS)]
    if coll.empty:
        return None
    origins = set(coll["origin"].fillna("sampled")) if "origin" in coll else {"sampled"}
    # Published microbenchmarks of the GPU system's own node (NVLink/NVSwitch come with
    # it) describe every cluster of that system inside a node.
    if origins == {"sampled"} or all(o.startswith(MICROBENCH) for o in origins):
        return hw.network.name
    return ",".join(sorted({o.split("/")[0] for o in origins}))
