"""Predictive uncertainty: how far a measured run's median step lies from PRISM's
prediction, learned from measured runs (docs/method.md, Composer step 5: doubt is not
variability).

The target is ``log(measured median step / predicted median step)`` of published and
measured runs; the features are what a user knows before the run (:data:`FEATURES`: the
evidence tier, how much of the step rests on priors, the communication and bubble shares
of the prediction, the predicted time per operator call (small kernels leave the host's
launch and framework time exposed, which operator samples do not see), scale, the layout,
model size, precision, framework family). A :class:`DoubtModel` learns quantiles of the
target with gradient-boosted trees (:class:`~predictor.latency.regressor.QuantileXGBRegressor`,
the operator models' learner) and calibrates them with conformalized quantile regression
(Romano, Patterson & Candès 2019, arXiv 1905.03222) whose calibration sets are whole
sources: each source is predicted by a model fitted on the others, so a new cluster,
framework or lab is treated as new, as a user's own job is. Every source weighs the same
in the calibration (a table of 1,440 single-node runs must not decide alone what a 90%
interval is), and a machine's validation-suite runs, each its own source, weigh together
as one (:func:`source_family`): 32 suite runs of this CPU among 40 sources, each weighing
the same, would set the 90% interval by the CPU's errors and leave the published sources
short of it.

The learned quantiles are not centred on the prediction: runs like a query's may have
landed above PRISM's composed median (an eager framework's step is longer than its
operators), and the interval says so. The composed median stays the reported median (a
learned shift of it corrected the sources it saw and moved others away: left out,
vTrain's multi-node runs went from 6.8% to 10% median error), and every interval holds it.
Left out one at a time, six of the eight sources had a framework no other source used and
most of vTrain's single-node rows lay outside the others' feature ranges: the calibration
is itself on extrapolations, so a query outside the features' training ranges
(:meth:`DoubtModel.extrapolating`, reported with the prediction) is already as uncertain
as a source the model never saw (widening those further put vTrain's single-node runs at
98% inside the 80% interval). A query of a kind no source was, a framework none used or a
device that is not a GPU (:data:`KIND`), gets no lean it could trust: its interval reaches
at least as far as runs of every source landed from the composed median, each source
weighing the same (:func:`source_reach`).

Artifacts: ``<dir>/doubt.ubj.gz`` and ``doubt.quantiles.ubj.gz`` (XGBoost's own UBJ,
gzip-compressed, as the operator models) and
``manifest.json`` (features, levels, conformal offsets, training ranges, sources, rows,
coverage of the leave-one-source-out check, library versions).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor.core.errors import PrismError
from predictor.latency.artifacts import (
    DOUBT_RUNS_FILE,
    booster,
    read_booster,
    recover_folder,
    whole_folder,
    write_booster,
)
from predictor.latency.regressor import DEFAULT_QUANTILES, QuantileXGBRegressor, xgb

#: Features of one prediction, in the order the model reads them.
FEATURES = ("tier", "prior_share", "comm_share", "bubble_share", "log2_us_per_call", "log2_gpus", "log2_tp",
            "log2_pp", "log2_dp", "log2_cp", "log2_micro_batches", "log10_params", "log2_seq", "gemm_precision", "gpu",
            "framework")
#: Extrapolating on these is a kind of run no source was (a framework, a device of a
#: generation none ran on: the ``gpu`` feature is the GPU generation, 0 a CPU; or a GEMM
#: precision none trained in, :data:`GEMM_PRECISIONS`): the learned lean says nothing of it
#: (:func:`widen`).
KIND = ("framework", "gpu", "gemm_precision")
#: The ``gemm_precision`` feature's codes: the linear layers' GEMMs in the training dtype, or in
#: one of the low precisions of :mod:`predictor.core.precision`, each its own recipe (scales,
#: casts, tensor-core path), so that one no source ran is extrapolation, not an fp8 run.
GEMM_PRECISIONS = ("train_dtype", "float8", "float8_blockwise", "mxfp8", "nvfp4")
#: How a matched ``gemm_precision`` reads in words (:meth:`DoubtModel.alike`).
GEMM_PRECISION_WORDS = ("16/32-bit GEMMs", "FP8 GEMMs (per-tensor scales)", "FP8 GEMMs (128-element block scales)",
                        "MXFP8 GEMMs", "NVFP4 GEMMs")
#: Evidence tiers (``predictor.latency.artifacts.TIERS``' order), the ``tier`` feature's codes.
TIER_CODES = ("measured samples", "microbenchmarks", "spec-only prior")
#: What "runs like this" match a query on (:meth:`DoubtModel.alike`), most alike first: the
#: device kind, the evidence tier, the framework family, the low precision; the first that
#: holds runs of :data:`ALIKE_SOURCES` sources or more is stated with the prediction.
ALIKE = (("gpu", "tier", "framework", "gemm_precision"), ("gpu", "tier", "framework"), ("gpu", "tier"), ("gpu",), ())
ALIKE_SOURCES = 3
#: The columns of the runs the model learned from, one line each (:meth:`DoubtModel.save`,
#: ``DOUBT_RUNS_FILE`` beside the model).
RUN_COLUMNS = ("source", "gpu", "tier", "framework", "gemm_precision", "log_error")
#: Shallow trees and few rounds: a few hundred runs from a handful of sources.
LEARNER = dict(n_estimators=60, max_depth=2, learning_rate=0.1, median_rounds=20, spread_estimators=30,
               spread_max_depth=2, min_child_weight=5.0, calibration_fraction=0.0)


def __getattr__(name: str):
    """``FRAMEWORKS``: the framework families, the ``framework`` feature's codes in order, as
    a runs table's framework column is read (:func:`predictor.analyses.doubt.family`) and each
    framework's file names its ``uncertainty`` feature
    (:func:`predictor.core.framework.uncertainty_features`); anything else is "other"."""
    if name == "FRAMEWORKS":
        return _frameworks()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _frameworks() -> tuple[str, ...]:
    from predictor.core.framework import uncertainty_features  # the frameworks' files, read when first asked
    return uncertainty_features()


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` under ``weights`` (the smallest value whose
    cumulative weight reaches ``q`` of the total: conservative, as split conformal's)."""
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cum, q * cum[-1]), len(values) - 1)])


def source_family(source: str) -> str:
    """What ``source`` weighs as: a validation-suite run of a machine
    (``<hardware>-suite-<run>``, :func:`predictor.analyses.doubt.machine_errors`) that
    machine's runs together (``<hardware>-suite``); any other source itself."""
    head, sep, _ = str(source).rpartition("-suite-")
    return f"{head}-suite" if sep and head else str(source)


def source_weights(sources: np.ndarray) -> np.ndarray:
    """Per row, a weight under which every source family (:func:`source_family`) weighs
    the same, and within one every source, and within one every row."""
    sources = np.asarray(sources).astype(str)
    names, index = np.unique(sources, return_inverse=True)
    families = np.array([source_family(n) for n in names])
    _, family = np.unique(families, return_inverse=True)
    sources_per_family = np.bincount(family)[family]  # per source name
    return 1.0 / (np.bincount(index)[index] * sources_per_family[index])


def conformal_offsets_by_source(pred: np.ndarray, y: np.ndarray, sources: np.ndarray,
                                levels: np.ndarray) -> np.ndarray:
    """CQR shifts per quantile from out-of-source predictions ``pred`` (n, k), each source
    weighing the same: for each symmetric pair with nominal coverage c, the weighted
    c-quantile of the conformity scores ``max(lo - y, y - hi)``. (With a handful of
    sources, the source-level finite-sample correction ``c(K+1)/K`` would exceed 1 for a
    90% interval and take the single largest score: an interval as wide as the worst
    source ever was, for every query.)"""
    weights = source_weights(sources)
    offsets = np.zeros(len(levels))
    for lo in range(len(levels) // 2):
        hi = len(levels) - 1 - lo
        scores = np.maximum(pred[:, lo] - y, y - pred[:, hi])
        q = _weighted_quantile(scores, weights, levels[hi] - levels[lo])
        offsets[lo], offsets[hi] = -q, q
    return offsets


def outside(X: np.ndarray, low: np.ndarray, high: np.ndarray, frameworks) -> list[list[str]]:
    """Per row of ``X``, the features outside [``low``, ``high``], and "framework" where
    its framework family is not among ``frameworks``."""
    out = []
    for row in X:
        names = [f for f, v, lo, hi in zip(FEATURES, row, low, high) if f != "framework" and not lo <= v <= hi]
        if _frameworks()[int(row[FEATURES.index("framework")])] not in frameworks:
            names.append("framework")
        out.append(names)
    return out


def source_reach(y: np.ndarray, sources: np.ndarray, levels) -> np.ndarray:
    """The quantiles at ``levels`` of ``y`` (log measured over the composed median), each
    source weighing the same: how far from PRISM's prediction runs of the sources landed."""
    weights = source_weights(sources)
    return np.array([_weighted_quantile(y, weights, a) for a in levels])


def widen(q: np.ndarray, names: list[list[str]], reach: np.ndarray) -> np.ndarray:
    """Quantiles ``q`` (n, k) of the rows extrapolating on a :data:`KIND` feature (``names``,
    from :func:`outside`) stretched to at least ``reach`` (k,) (:func:`source_reach`)."""
    q = q.copy()
    rows = np.array([any(n in KIND for n in row) for row in names], bool)
    mid = q.shape[1] // 2
    q[rows, :mid] = np.minimum(q[rows, :mid], reach[:mid])
    q[rows, mid + 1:] = np.maximum(q[rows, mid + 1:], reach[mid + 1:])
    return q


def calibrated(q: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Learned quantiles ``q`` (n, k) moved by the conformal ``offsets`` (k,), each central
    interval stretched to hold 0, and the median at 0: the run's median step is the
    composed median, and the learned shift only leans the interval around it.

    A median moved by the learned shift did not carry to sources it had not seen: on the
    visible runs' score side (data/e2e/split.yaml) it took the median absolute error from
    8.4% to 15.3% while the fit side, which the shift had learned from, went from 8.9% to
    6.9% (docs/validation-log.md, 2026-11-28)."""
    q = np.sort(q + offsets, axis=1)
    mid = q.shape[1] // 2
    q[:, :mid] = np.minimum(q[:, :mid], 0.0)
    q[:, mid] = 0.0
    q[:, mid + 1:] = np.maximum(q[:, mid + 1:], 0.0)
    return q


def left_out_quantiles(model: DoubtModel, X: np.ndarray, y: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """(n, k) quantiles of ``log(measured / predicted)`` of each row as :meth:`DoubtModel.predict`
    would give them from a model fitted and calibrated without the row's source: the
    leave-one-source-out construction that judges the error model on sources it has not seen."""
    from predictor.core.framework import uncertainty_features  # the frameworks' files, read when first asked

    levels = np.asarray(model.levels)
    held_out = model.held_out_predictions(X, y, sources)
    q = np.empty_like(held_out)
    for source in np.unique(sources):
        test, train = sources == source, sources != source
        nested = model.held_out_predictions(X[train], y[train], sources[train])
        q[test] = calibrated(held_out[test], conformal_offsets_by_source(nested, y[train], sources[train], levels))
        seen = {uncertainty_features()[int(f)] for f in X[train, FEATURES.index("framework")]}
        q[test] = widen(q[test], outside(X[test], X[train].min(axis=0), X[train].max(axis=0), seen),
                        source_reach(y[train], sources[train], levels))
    return q


@dataclass
class DoubtModel:
    """Quantiles of ``log(measured / predicted)`` given :data:`FEATURES`, calibrated by
    leave-one-source-out CQR (module docstring). ``fit`` returns self; learned attributes
    end in ``_``."""

    levels: tuple = DEFAULT_QUANTILES
    learner: dict | None = None

    def _learner(self) -> QuantileXGBRegressor:
        return QuantileXGBRegressor(quantiles=self.levels, **(self.learner or LEARNER))

    def fit(self, X: np.ndarray, y: np.ndarray, sources: np.ndarray,
            held_out: np.ndarray | None = None) -> DoubtModel:
        """Fit on every row; calibrate on each source's errors as predicted without it
        (``held_out``, from :meth:`held_out_predictions`, when already computed)."""
        X, y, sources = np.asarray(X, float), np.asarray(y, float), np.asarray(sources)
        if len(np.unique(sources)) < 3:
            raise PrismError(f"sources: {len(np.unique(sources))}; the predictive uncertainty is calibrated by "
                             f"leaving one source out and needs runs from at least 3 sources", field="sources")
        levels = np.asarray(self.levels)
        held_out = self.held_out_predictions(X, y, sources) if held_out is None else held_out
        self.offsets_ = conformal_offsets_by_source(held_out, y, sources, levels)
        self.reach_ = source_reach(y, sources, levels)
        self.regressor_ = self._learner().fit(X, y)
        self.low_, self.high_ = X.min(axis=0), X.max(axis=0)
        self.frameworks_ = sorted({_frameworks()[int(f)] for f in X[:, FEATURES.index("framework")]})
        self.sources_ = sorted(map(str, np.unique(sources)))
        self.rows_ = len(y)
        self.runs_ = {"source": sources.astype(str), **{k: X[:, FEATURES.index(k)] for k in RUN_COLUMNS[1:-1]},
                      "log_error": y}
        return self

    def held_out_predictions(self, X: np.ndarray, y: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """(n, k) uncalibrated quantiles of each row from a model fitted without its source."""
        out = np.empty((len(y), len(self.levels)))
        for source in np.unique(sources):
            test = sources == source
            out[test] = self._learner().fit(X[~test], y[~test]).predict(X[test])
        return out

    def extrapolating(self, X: np.ndarray) -> list[list[str]]:
        """Per row, the features outside the training range (or an unseen framework)."""
        return outside(np.asarray(X, float), self.low_, self.high_, self.frameworks_)

    def alike(self, x: np.ndarray) -> dict | None:
        """What the runs most like the query ``x`` (one row of :data:`FEATURES`) measured
        against PRISM's median: the first match of :data:`ALIKE` with runs of
        :data:`ALIKE_SOURCES` sources or more, its sources and runs, and the 5th and 95th
        percentiles of measured / predicted - 1 among them, each source weighing the same.
        None where the model keeps no runs (one saved before it kept them)."""
        runs = getattr(self, "runs_", None)
        if runs is None:
            return None
        for keys in ALIKE:
            mask = np.ones(len(runs["log_error"]), bool)
            for k in keys:
                mask &= runs[k] == x[FEATURES.index(k)]
            sources = runs["source"][mask]
            if len(np.unique(sources)) >= ALIKE_SOURCES or not keys:
                break
        off, weights = np.expm1(runs["log_error"][mask]), source_weights(sources)
        return {"matched_on": {k: _described(k, x[FEATURES.index(k)]) for k in keys},
                "sources": int(len(np.unique(sources))), "runs": int(mask.sum()),
                "off_by": [_weighted_quantile(off, weights, 0.05), _weighted_quantile(off, weights, 0.95)]}

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n, k) calibrated quantiles of ``log(measured / predicted)``, every central
        interval holding 0 (:func:`calibrated`), a row of a kind no source was widened to
        the sources' reach (:func:`widen`)."""
        X = np.asarray(X, float)
        return widen(calibrated(self.regressor_.predict(X), self.offsets_), self.extrapolating(X), self.reach_)

    # ------------------------------------------------------------ artifacts

    def save(self, directory, report: dict | None = None) -> Path:
        """Write the model as a whole into ``directory`` (a temporary folder renamed into
        place, as an operator model set); ``report`` (the leave-one-source-out check) goes
        into the manifest."""
        directory = Path(directory)
        with whole_folder(directory) as tmp:
            files = {"center": "doubt.ubj.gz", "spread": "doubt.quantiles.ubj.gz"}
            hashes = {key: write_booster(trees, tmp / files[key]) for key, trees in
                      (("center", self.regressor_.center_), ("spread", self.regressor_.booster_))}
            manifest = {
                "kind": "predictive uncertainty of the median step (log measured / predicted)",
                "features": list(FEATURES), "frameworks": list(_frameworks()), "tiers": list(TIER_CODES),
                "levels": list(self.levels), "learner": self.learner or LEARNER,
                "offsets": self.offsets_.tolist(), "reach": self.reach_.tolist(),
                "low": self.low_.tolist(), "high": self.high_.tolist(), "frameworks_seen": self.frameworks_,
                "sources": self.sources_, "rows": self.rows_, "report": report or {},
                "files": {k: {"name": files[k], "sha256": hashes[k]} for k in files},
                "xgboost": xgb.__version__, "numpy": np.__version__}
            runs = "\n".join([",".join(RUN_COLUMNS)] + [
                ",".join([str(src), *(f"{self.runs_[k][i]:g}" for k in RUN_COLUMNS[1:-1]),
                          f"{self.runs_['log_error'][i]:.5f}"]) for i, src in enumerate(self.runs_["source"])]) + "\n"
            (tmp / DOUBT_RUNS_FILE).write_text(runs)
            manifest["runs"] = {"name": DOUBT_RUNS_FILE, "sha256": hashlib.sha256(runs.encode()).hexdigest()}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
        return directory

    @classmethod
    def load(cls, directory) -> DoubtModel:
        directory = Path(directory)
        recover_folder(directory)
        path = directory / "manifest.json"
        if not path.is_file():
            raise PrismError(f"{directory}: no predictive-uncertainty model (manifest.json missing); train one with "
                             f"python benchmarks/bench_doubt.py --save", field=str(directory))
        try:
            manifest = json.loads(path.read_text())
            if list(manifest["features"]) != list(FEATURES):
                raise PrismError(f"{path}: trained on features {manifest['features']}, this PRISM reads "
                                 f"{list(FEATURES)}; retrain it (python benchmarks/bench_doubt.py --save)",
                                 field=str(path))
            model = cls(levels=tuple(manifest["levels"]), learner=manifest["learner"])
            regressor = model._learner()
            boosters = {key: booster(read_booster(directory / entry["name"], entry["sha256"]))
                        for key, entry in manifest["files"].items()}
        except (OSError, KeyError, ValueError, EOFError, xgb.core.XGBoostError) as exc:
            raise PrismError(f"{directory}: unreadable predictive-uncertainty model ({exc}); retrain it "
                             f"(python benchmarks/bench_doubt.py --save)", field=str(directory)) from None
        regressor.center_, regressor.booster_ = boosters["center"], boosters["spread"]
        regressor.offsets_ = np.zeros(len(model.levels))
        model.regressor_ = regressor
        model.offsets_ = np.asarray(manifest["offsets"])
        model.reach_ = np.asarray(manifest["reach"], float)
        model.low_, model.high_ = np.asarray(manifest["low"]), np.asarray(manifest["high"])
        model.frameworks_ = list(manifest["frameworks_seen"])
        model.sources_ = list(manifest["sources"])
        model.rows_ = int(manifest["rows"])
        model.report_ = manifest.get("report", {})
        model.runs_ = _read_runs(directory, manifest["runs"]) if "runs" in manifest else None
        return model


def _read_runs(directory: Path, entry: dict) -> dict:
    """The runs :meth:`DoubtModel.save` wrote, checked against their checksum."""
    path = directory / entry["name"]
    try:
        text = path.read_text()
    except OSError as exc:
        raise PrismError(f"{path}: unreadable ({exc}); retrain (python benchmarks/bench_doubt.py --save)",
                         field=str(path)) from None
    if hashlib.sha256(text.encode()).hexdigest() != entry["sha256"]:
        raise PrismError(f"{path}: does not match its checksum in manifest.json (changed or truncated); retrain "
                         f"(python benchmarks/bench_doubt.py --save)", field=str(path))
    lines = [line.split(",") for line in text.splitlines()[1:]]
    return {"source": np.array([line[0] for line in lines]),
            **{k: np.array([float(line[j]) for line in lines]) for j, k in enumerate(RUN_COLUMNS[1:], start=1)}}


def _described(feature: str, value: float) -> str:
    """A matched feature's value in words."""
    if feature == "gpu":
        return f"compute capability {value:g}.x GPUs" if value > 0 else "a CPU" if value == 0 else \
            "a GPU of no stated generation"
    if feature == "tier":
        return TIER_CODES[int(value)]
    if feature == "framework":
        return _frameworks()[int(value)]
    return GEMM_PRECISION_WORDS[int(value)]
