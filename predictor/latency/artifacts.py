"""Per-(hardware, op, pass) latency distributions: train, save, load, query.

A :class:`ModelSet` holds one hardware's models. Each predicts quantiles of
``log(latency / floor)`` (see :mod:`predictor.latency.features`) and answers in microseconds.
Artifacts: ``models/<hardware>/<op>__<pass>.ubj.gz`` (the center booster) and
``<op>__<pass>.quantiles.ubj.gz`` (the residual quantiles), each XGBoost's own UBJ format
gzip-compressed (a quarter of the size: the shipped models travel with the repository),
and ``manifest.json`` (the booster format, each file's checksum, features, quantiles,
offsets, training-data hash, sample counts, held-out metrics, library versions, the
hardware floor they were trained against). A set is written as a whole
(:func:`whole_folder`): an interrupted save leaves the previous set, never a mix.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.files import MANIFEST, writable, write_atomically
from predictor.core.ops import COLLECTIVE_OPS, DTYPE_BYTES, HOST_OPS, OPS, dtype_bytes
from predictor.core.profiles import REPO_ROOT, as_hardware, group_options, load_hardware, this_cpu
from predictor.core.specs import HardwareConfig, RegressorConfig
from predictor.latency.adjustments import ADJUSTMENTS, BY_NAME, Params
from predictor.latency.adjustments.backward_entry import origins
from predictor.latency.adjustments.co_run import without_co_run
from predictor.latency.adjustments.collective_gap import without_gap_rows
from predictor.latency.calibration import Calibration
from predictor.latency.features import TOPOLOGY, call_dtypes, compute_floor_us, feature_names, features
from predictor.latency.regressor import DEFAULT_QUANTILES, QuantileXGBRegressor, check_settings, valid_levels, xgb
from predictor.latency.variability_profile import (
    VARIABILITY_FILE,
    MeasuredVariability,
    read_variability,
    write_variability,
)

if TYPE_CHECKING:  # pandas, scikit-learn and joblib are imported where used: prism predict needs none
    import pandas as pd

#: 2: boosters gzip-compressed (:data:`BOOSTER_FORMAT`); 1 (uncompressed ``.ubj``) is refused.
FORMAT_VERSION = 2
BOOSTER_FORMAT = "ubj.gz"
#: The models shipped with the repository; only a deliberate ``prism train models_dir=models``
#: replaces them.
SHIPPED_MODELS = REPO_ROOT / "models"
#: Where ``prism train`` writes unless given ``models_dir=`` (``runs/`` is git-ignored).
TRAINED_MODELS = Path("runs") / "models"


def models_dir(configured=None) -> Path:
    """Where trained models are read from: ``configured``, which must exist (a mistyped
    folder must not silently leave predictions on the spec-only prior), or the shipped
    ``models/``."""
    if not configured:
        return SHIPPED_MODELS
    if not isinstance(configured, str | os.PathLike):
        raise PrismError(f"models_dir={configured!r}: a folder of trained models, as a str or Path, e.g. "
                         f"models_dir='runs/models'", field="models_dir")
    path = Path(configured)
    if path.exists() and not path.is_dir():
        raise PrismError(f"models_dir={configured}: a file; name the folder prism train wrote (it holds one "
                         f"folder per hardware)", field="models_dir")
    if not path.is_dir():
        listing = "; ".join(f"{folder} ({', '.join(held)})" for folder, held in _model_folders(path.parent))
        raise PrismError(f"models_dir={configured}: no such folder. Folders of trained models: {listing}. "
                         f"Name one of them, or leave models_dir out to use the shipped models", field="models_dir")
    refuse_set_folder(path)
    return path


def refuse_set_folder(path: Path) -> None:
    """Refuse ``path`` as ``models_dir`` where it is one hardware's set (its manifest): one
    level too deep, and a save into it would nest a set inside another."""
    if (path / MANIFEST).is_file():
        raise PrismError(f"models_dir={path}: the folder of one hardware's set ({MANIFEST}); models_dir holds one "
                         f"such folder per hardware: give models_dir={path.parent}", field="models_dir")


def _model_folders(near: Path) -> list[tuple[Path, list[str]]]:
    """The folders of trained models in ``near``, ``runs/models`` and the shipped one that
    hold models of a hardware profile, each with those profiles."""
    folders = {p.parent.parent for p in near.glob(f"*/*/{MANIFEST}")} | {TRAINED_MODELS, SHIPPED_MODELS}
    unique: dict[Path, Path] = {}
    for f in sorted(folders, key=lambda f: (f.is_absolute(), str(f))):  # a relative name where there is one
        if f.is_dir():
            unique.setdefault(f.resolve(), f)
    profiles = set(group_options("hardware"))  # models/ also holds models of other kinds
    held = [(f, sorted(m.parent.name for m in f.glob(f"*/{MANIFEST}") if m.parent.name in profiles))
            for f in unique.values()]
    return [(f, names) for f, names in held if names]


def trained_models(hw: HardwareConfig | str, root=None) -> ModelSet | None:
    """``hw``'s trained models (``hw`` a profile or a conf/hardware name), or None where the
    shipped ``models/`` has none (predictions then rest on priors). A folder named as ``root``
    must hold them: pointing at one is asking for its models, and a spec-only answer would
    pass for theirs."""
    hw, folder = as_hardware(hw), models_dir(root)
    for name in filter(None, (hw.name, hw.models_from)):  # a save killed between its renames left a set aside
        recover_folder(folder / name)
    if not holds_models(folder, hw):
        if root:
            raise PrismError(f"models_dir={root}: no trained models of {hw.name} in it (no "
                             f"{folder / hw.name / MANIFEST}; it holds {', '.join(held_sets(folder)) or 'none'}); "
                             f"train them with prism train samples=DIR hardware={hw.name} models_dir={root}, or leave "
                             f"models_dir out for the shipped models", field="models_dir")
        return None
    if (folder / hw.name / MANIFEST).exists():
        return ModelSet.load(folder / hw.name, hw)
    return ModelSet.load(folder / hw.models_from, load_hardware(hw.models_from)).with_hardware(hw)


def holds_models(folder: Path, hw: HardwareConfig) -> bool:
    """Whether ``folder`` (a models_dir) holds models :func:`trained_models` loads for ``hw``:
    its own, or those of the profile it borrows them from (``models_from``)."""
    return (folder / hw.name / MANIFEST).exists() or bool(hw.models_from
                                                          and (folder / hw.models_from / MANIFEST).exists())


def held_sets(folder: Path) -> list[str]:
    """The hardware whose saved sets ``folder`` (a models_dir) holds."""
    return sorted(m.parent.name for m in folder.glob(f"*/{MANIFEST}"))


#: What a hardware's predictions rest on, best first: operator samples measured on it,
#: models fitted to its published microbenchmarks, or its datasheet alone (wider bands).
TIERS = ("measured samples", "microbenchmarks", "spec-only prior")
#: ``origin`` prefix of rows imported from published microbenchmarks
#: (:mod:`predictor.data.importers.microbench`).
MICROBENCH = "microbench:"


def evidence_tier(models: ModelSet | None, evidence=None) -> str:
    """The tier (:data:`TIERS`) of ``models``; None means no trained models: the spec prior.
    With ``evidence`` (a composed job's :class:`~predictor.latency.lookup.Evidence` per op),
    the spec prior too where no op of the job rests on a trained model (a set trained on
    another op alone), whose predictive interval must be the prior's."""
    if models is None or (evidence is not None and all(e.prior for e in evidence)):
        return TIERS[2]
    tier = models.manifest.get("tier", TIERS[0])
    source = models.manifest.get("hardware", models.hw.name)
    return tier if source == models.hw.name else f"{tier} of {source} (same compute die)"


def shape_groups(op: str, rows: pd.DataFrame) -> np.ndarray:
    """One id per distinct (shape, topology, dtype): a shape's repeats form one group."""
    cols = list(OPS[op].shape) + (list(TOPOLOGY) if OPS[op].collective else []) + ["dtype"]
    cols = [c for c in cols if c in rows]
    return rows.groupby(cols, dropna=False, sort=False).ngroup().to_numpy()


#: A shape's repeats whose slowest is more than this many times their median were disturbed
#: (another process held the core, a page fault storm). In the project's own CPU store
#: samples/local-cpu, a compute op's shape (1,146 of ~10 repeats) has max/median 1.39 at the
#: median, 2.34 at the 95th percentile and 3.29 at the 99th, and 1 shape exceeds 10 (0.09%);
#: in the GPU stores samples/h100 and h200 (4,039 shapes), 9 (0.2%). A stall the issue saw
#: was 116x. Collectives are not judged: gloo's on a shared host spread 14-48x as a rule (11 of
#: local-cpu's 50 collective shapes exceed 10x), which is their distribution, not a stall.
DISTURBED_SPREAD = 10.0
#: Above this share of a store's shapes disturbed, ``prism train`` refuses it unless told
#: ``allow_disturbed=true``: five times the share the project's noisiest store shows.
DISTURBED_SHARE = 0.05
#: Disturbed shapes below which a store is warned of, never refused: one or two stalls in a
#: small plan (a quick sample of a few dozen shapes) are over 5% of it alone.
DISTURBED_REFUSED = 3
#: Repeats below which a shape's spread is not judged.
DISTURBED_MIN_REPEATS = 3


def disturbed_shapes(rows: pd.DataFrame) -> dict:
    """How many shapes of ``rows`` (one hardware's samples) were disturbed, per ``op/pass``:
    shapes of a compute or host op whose repeats' max/median exceeds :data:`DISTURBED_SPREAD`. Their stalled repeats
    become the models' upper tails (a step predicted 100x its measure), so train reports them
    and the manifest keeps the counts under ``disturbed``."""
    import pandas as pd

    by_op, shapes = {}, 0
    for (op, pass_), g in rows.groupby(["op", "pass"], sort=True):
        if op in COLLECTIVE_OPS:  # their spread is their distribution (DISTURBED_SPREAD)
            continue
        latency = pd.Series(g["latency_us"].to_numpy(dtype=float))
        grouped = latency.groupby(shape_groups(op, g))
        spread = (grouped.max() / grouped.median())[grouped.size() >= DISTURBED_MIN_REPEATS]
        shapes += len(spread)
        if (n := int((spread > DISTURBED_SPREAD).sum())):
            by_op[f"{op}/{pass_}"] = n
    return {"threshold": DISTURBED_SPREAD, "shapes": shapes, "disturbed": sum(by_op.values()), "by_op": by_op}


def disturbed_note(disturbed: dict | None) -> str | None:
    """The line train prints about disturbed shapes, or None where there are none."""
    if not disturbed or not disturbed.get("disturbed"):
        return None
    ops = ", ".join(f"{k} {n}" for k, n in disturbed["by_op"].items())
    return (f"WARNING: {disturbed['disturbed']} of {disturbed['shapes']} shapes were disturbed while sampled (their "
            f"slowest repeat over {disturbed['threshold']:g}x their median: another process held the CPU): {ops}; "
            f"their stalls are in these models' upper tails. Sample again on an idle machine")


def floor_fingerprint(hw: HardwareConfig) -> str:
    """Hash of the hardware figures the floor uses: models trained on other figures are stale."""
    text = json.dumps({"peak": hw.peak_flops, "bw": hw.memory.bandwidth,
                       "intra": [hw.network.intra_node.bandwidth, hw.network.intra_node.latency_us],
                       "inter": [hw.network.inter_node.bandwidth, hw.network.inter_node.latency_us]},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _floor_figures(hw: HardwareConfig) -> dict[str, object]:
    """The figures :func:`floor_fingerprint` hashes, by their key in a hardware profile."""
    intra, inter = hw.network.intra_node, hw.network.inter_node
    return {**{f"peak_flops.{k}": v for k, v in hw.peak_flops.items()}, "memory.bandwidth": hw.memory.bandwidth,
            "network.intra_node.bandwidth": intra.bandwidth, "network.intra_node.latency_us": intra.latency_us,
            "network.inter_node.bandwidth": inter.bandwidth, "network.inter_node.latency_us": inter.latency_us}


def _stale(path: Path, hw: HardwareConfig, what: str, figures: Callable[[HardwareConfig], dict],
           trained_on: Callable[[HardwareConfig], bool]) -> PrismError:
    """The error for models trained on other hardware figures (``figures``) than ``hw``'s.
    The manifest keeps only their hash, so the profile as saved tells the cause apart: where
    it still gives the trained hash (``trained_on``), ``hw``'s own settings moved off it
    (hardware.*=... on the command line), and the fix is to drop them; else the profile was
    edited since the training."""
    try:
        profile = load_hardware(hw.name)
    except PrismError:  # a profile built in code, with no conf/hardware file of its name
        return PrismError(f"{path}: {what} changed since these models were trained: a hardware.* setting on the "
                          f"command line, or conf/hardware/{hw.name}.yaml edited; drop the setting, or retrain with "
                          f"prism train", field=str(path))

    def shown(value) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)

    now, saved = figures(hw), figures(profile)
    moved = [k for k in sorted(set(now) | set(saved)) if now.get(k) != saved.get(k)]
    given = [f"hardware.{k}={shown(now.get(k))}" for k in moved]
    settings = ", ".join(f"{g} (the profile: {shown(saved.get(k))})" for g, k in zip(given, moved))
    if trained_on(profile):
        return PrismError(f"{path}: {what} changed on the command line since these models were trained: these "
                          f"hardware.* settings differ from the profile they were trained with "
                          f"(conf/hardware/{hw.name}.yaml): {settings}; drop them from the command line, or "
                          f"retrain with them (prism train samples=DIR hardware={hw.name} {' '.join(given)})",
                          field=str(path))
    return PrismError(f"{path}: {what} of conf/hardware/{hw.name}.yaml changed since these models were trained"
                      + (f", and the command line sets {settings}" if moved else "")
                      + "; retrain with prism train", field=str(path))


def data_hash(rows: pd.DataFrame) -> str:
    import pandas as pd

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
        """Latency quantiles in microseconds, shape (len(shapes), n_quantiles): the
        regressor's, slowed where their median would beat the compute ceiling
        (:func:`compute_ceiling`), spread kept."""
        X, floor = features(self.op, self.pass_, shapes, hw)
        q = floor[:, None] * np.exp(self.regressor.predict(X))
        ceiling = self.info.get("compute_ceiling")
        if ceiling:
            least = compute_floor_us(self.op, self.pass_, shapes, hw) / _ceilings(ceiling, call_dtypes(shapes, len(q)))
            q *= np.maximum(least / q[:, q.shape[1] // 2], 1.0)[:, None]
        return q


def _ceilings(ceiling: dict[str, float], dtypes: np.ndarray) -> np.ndarray:
    """Each call's ceiling: its precision's, else the loosest of the sampled precisions of its
    element width without block scales (mxfp8 and float8_blockwise take float8's), which the
    regressor reads alike (``dtype_bytes``). A width no sample had (fp8 where only bf16 was
    measured, nvfp4 where fp8 was) takes the nearest wider sampled width's: the regressor has
    never seen that many FLOPs per byte, and a narrower precision reaches no larger share of
    its own peak than the wider one did (B200's measured table: bf16 at most 0.63 of its peak,
    fp8 0.61; models/b200). None (infinite) where no wider precision was sampled."""
    def width(names) -> np.ndarray:
        return np.floor(dtype_bytes(np.asarray(names)) * 2) / 2  # scales cost 1/32 or 1/16 of a byte
    by_width: dict[float, float] = {}
    for w, v in zip(width(list(ceiling)), ceiling.values()):
        by_width[w] = max(v, by_width.get(w, 0.0))

    def of_width(w: float) -> float:
        wider = [x for x in sorted(by_width) if x >= w]
        return by_width[wider[0]] if wider else np.inf

    names, which = np.unique(dtypes, return_inverse=True)
    return np.array([ceiling.get(d, of_width(w)) for d, w in zip(names, width(names))], float)[which]


#: The largest conformal shift a trained model's quantile gets (log-latency units: e^10 is
#: 22,000x); a larger one is a damaged manifest, whose predictions would overflow.
MAX_OFFSET = 10.0


#: The manifest's own checksum (:func:`manifest_checksum`): a manifest edited by hand (an
#: entry removed, offsets inverted) would be trusted as what prism train wrote.
CHECKSUM_KEY = "checksum"


def manifest_checksum(manifest: dict) -> str:
    """SHA-256 of ``manifest``'s canonical JSON (sorted keys, no spaces) less its checksum."""
    body = {k: v for k, v in manifest.items() if k != CHECKSUM_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_text(manifest: dict) -> str:
    """``manifest`` as saved: its fields as they are, then its checksum, last (so that
    :func:`unsigned_text` gives back the text of the manifest as it was before one)."""
    body = {k: v for k, v in manifest.items() if k != CHECKSUM_KEY}
    return json.dumps({**body, CHECKSUM_KEY: manifest_checksum(body)}, indent=1)


_CHECKSUM_LINE = re.compile(r',\n "checksum": "[0-9a-f]{64}"\n}$')


def unsigned_text(text: str) -> str:
    """A saved manifest's text without its checksum line: what identifies a set's models
    (predict-batch's fingerprint) stays what it was before manifests carried checksums."""
    return _CHECKSUM_LINE.sub("\n}", text)


def _check_checksum(path: Path, manifest: dict) -> None:
    """Refuse a manifest whose checksum does not match its contents: it was changed after
    prism train (or prism calibrate) wrote it, and what it says can no longer be trusted."""
    saved = manifest.get(CHECKSUM_KEY)
    if saved is not None and saved != manifest_checksum(manifest):
        raise PrismError(f"{path}: changed since prism train wrote it (its checksum does not match its contents: an "
                         f"entry removed or a figure edited); retrain with prism train samples=DIR "
                         f"hardware={manifest.get('hardware', 'HW')} models_dir={path.parent.parent}, or restore "
                         f"the file as saved", field=CHECKSUM_KEY)


def unsigned_note(models: ModelSet | None) -> str | None:
    """A note where a set's manifest carries no checksum (saved before manifests did): its
    edits cannot be told from what prism train wrote."""
    if models is None or not models.manifest or CHECKSUM_KEY in models.manifest:
        return None
    where = models.directory or f"models/{models.hw.name}"
    return (f"{where}/{MANIFEST} carries no checksum (saved by an older PRISM): a hand edit of it would go unnoticed; "
            f"retrain with prism train to add one")


def _check_manifest(path: Path, manifest: dict) -> None:
    """One error naming the manifest and its field where :meth:`ModelSet.load` could not
    use it (a file edited by hand or by another tool: every figure would be wrong or a
    traceback)."""
    def fail(what: str, field: str):
        raise PrismError(f"{path}: {what}; retrain with prism train", field=field)

    quantiles = manifest.get("quantiles")
    if not valid_levels(quantiles):
        fail(f"quantiles {quantiles!r} are not increasing levels including {list(DEFAULT_QUANTILES)}", "quantiles")
    if manifest.get("tier", TIERS[0]) not in TIERS:
        fail(f"tier {manifest.get('tier')!r} is none of {', '.join(TIERS)}", "tier")
    if not isinstance(manifest.get("floor_fingerprint"), str):
        fail("no floor_fingerprint", "floor_fingerprint")
    entries = manifest.get("models")
    if not isinstance(entries, dict) or not entries:  # prism train writes at least one model
        fail(f"'models' is {entries!r:.40}, not the map of trained models", "models")
    for key, entry in entries.items():
        # the key is what predictions look the model up by: "gemm/fwd" holding gemm's bwd would answer for it
        if not isinstance(entry, dict) or entry.get("op") not in OPS \
                or entry.get("pass") not in OPS[entry["op"]].passes or key != f"{entry['op']}/{entry['pass']}" \
                or not isinstance(entry.get("features"), list) or not isinstance(entry.get("files"), dict) \
                or set(entry["files"]) != {"center", "quantiles"} \
                or not all(isinstance(f, dict) and isinstance(f.get("file"), str) and isinstance(f.get("sha256"), str)
                           for f in entry["files"].values()):
            fail(f"models.{key} is not an entry prism train writes (op, pass, features, files center and quantiles "
                 f"with file and sha256)", f"models.{key}")
        offsets = entry.get("offsets")
        if (not isinstance(offsets, list) or len(offsets) != len(quantiles)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_OFFSET
                           for v in offsets)):
            fail(f"models.{key}.offsets {offsets!r} are not {len(quantiles)} finite shifts within +-{MAX_OFFSET:g}",
                 f"models.{key}.offsets")
    # the parts prism calibrate and prism train add, read far from here (every op's latency, the note on
    # another CPU's models, a neighbour's slowdown): a damaged one is named now, not met as a traceback or NaN
    calibration = manifest.get("calibration")
    if calibration is not None and not _is_calibration(calibration):
        raise PrismError(f"{path}: calibration {calibration!r:.80} is not what prism calibrate stores "
                         f"(compute_scale > 0, op_overhead_us and tp_overhead_us >= 0, finite); run prism calibrate "
                         f"again", field="calibration")
    device = manifest.get("device")
    if device is not None and not (isinstance(device, dict) and isinstance(device.get("name"), str)
                                   and isinstance(device.get("hosts"), list)):
        fail(f"device {device!r:.80} is not the sampled device's name and hosts", "device")
    read_adjustments(manifest, path)  # a neighbour's slowdown, a CPU's gap curve...


#: The manifest's section of the adjustments' fitted parameters: ``{name: {"version": v, "params": {...}}}``.
ADJUSTMENTS_KEY = "adjustments"


def read_adjustments(manifest: dict, path: Path | None = None) -> dict[str, Params]:
    """The typed parameters of the adjustments (:mod:`predictor.latency.adjustments`) a
    manifest stores under :data:`ADJUSTMENTS_KEY`, and under the top-level keys sets saved
    before it held them (``co_run``, ``collective_gap``, ``backward_entry_us``: each
    adjustment's ``legacy_key``). A malformed one is one :class:`PrismError` naming its field."""
    section = manifest.get(ADJUSTMENTS_KEY, {})
    try:
        if not isinstance(section, dict):
            raise PrismError(f"{ADJUSTMENTS_KEY}: {section!r:.60} is not an object of adjustment parameters; retrain "
                             f"with prism train", field=ADJUSTMENTS_KEY)
        out = {}
        for name, entry in section.items():
            if name not in BY_NAME:
                raise PrismError(f"{ADJUSTMENTS_KEY}.{name}: no such adjustment in this PRISM (it has "
                                 f"{', '.join(BY_NAME)}); retrain with prism train", field=f"{ADJUSTMENTS_KEY}.{name}")
            out[name] = BY_NAME[name].from_json(entry, f"{ADJUSTMENTS_KEY}.{name}")
        for adjustment in ADJUSTMENTS:  # the loader shim of older sets' keys
            if adjustment.legacy_key in manifest and adjustment.name not in out:
                out[adjustment.name] = adjustment.from_legacy(manifest[adjustment.legacy_key], adjustment.legacy_key)
    except PrismError as exc:
        if path is None:
            raise
        raise PrismError(f"{path}: {exc}", field=exc.field) from None
    return out


def adjustments_section(params: Mapping[str, Params]) -> dict:
    """:data:`ADJUSTMENTS_KEY`'s JSON of the fitted ``params``, in the registry's order."""
    return {a.name: a.to_json(params[a.name]) for a in ADJUSTMENTS if a.name in params}


#: Top-level keys of older manifests that :data:`ADJUSTMENTS_KEY` replaces.
LEGACY_KEYS = tuple(a.legacy_key for a in ADJUSTMENTS if a.legacy_key)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < np.inf


def _is_calibration(value) -> bool:
    """Whether a manifest's ``calibration`` is as :meth:`ModelSet.save_calibration` writes it."""
    try:
        cal = Calibration(**value)
    except TypeError:  # not a mapping, or keys Calibration does not have
        return False
    return _positive(cal.compute_scale) and all(_positive(v) or v == 0 for v in
                                                (cal.op_overhead_us, cal.tp_overhead_us))


def _is_ceiling(value) -> bool:
    """Whether a manifest's ``compute_ceiling`` is absent (a set saved before it) or as
    :func:`compute_ceiling` writes it."""
    return value is None or (isinstance(value, dict) and bool(value) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < np.inf for v in value.values()))


def compute_ceiling(op: str, pass_: str, rows: pd.DataFrame, hw: HardwareConfig) -> dict[str, float] | None:
    """Per precision, the highest share of the compute roofline (FLOPs at the datasheet
    peak) that any sampled call of a compute op reached; None for collectives and host ops.

    Trees cannot leave the range of their targets, but a sum of trees can: outside the
    sampled shapes, leaves of different trees that never fired together add up. On the
    H100 GEMM table (m, n, k up to 4096, the fastest at 780 TFLOP/s, 79% of peak) the
    backward of an 8192-cubed GEMM came out at 872 TFLOP/s. No prediction's median may run
    a larger share of the peak than the samples ever did."""
    if OPS[op].collective or OPS[op].host:
        return None
    share = compute_floor_us(op, pass_, rows, hw) / rows["latency_us"].to_numpy()
    dtypes = call_dtypes(rows, len(rows))
    best = {str(d): float(share[dtypes == d].max()) for d in np.unique(dtypes)}
    return {d: v for d, v in best.items() if v > 0} or None  # an op of no FLOPs has nothing to cap


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
            "compute_ceiling": compute_ceiling(op, pass_, rows, hw),
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

    def __init__(self, hw: HardwareConfig, quantiles, models: dict, manifest: dict | None = None,
                 variability: MeasuredVariability | None = None, directory: Path | None = None):
        self.hw = hw
        self.quantiles = tuple(quantiles)
        self.models = models
        self.manifest = manifest or {}
        self.variability = variability  # sigmas fitted on the samples' repeats (variability.json), if any
        self.directory = directory  # the folder they were loaded from (None: built in memory)
        self.replaced: str | None = None  # what the last save replaced, as prism train reports it
        self._adjustments: tuple[dict, dict] | None = None  # (the manifest read, its adjustments)

    @property
    def where(self) -> str:
        """Where the models came from, as the evidence names them: their folder (relative to
        the project where it lies inside it), or ``models/<hardware>`` for a set built in memory."""
        if self.directory is None:
            return f"models/{self.manifest.get('hardware', self.hw.name)}"
        path = Path(self.directory).resolve()
        return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)

    def with_hardware(self, hw: HardwareConfig) -> ModelSet:
        """The same models queried for ``hw``: a copy of their profile with another network
        (a job on its own cluster), or a profile that borrows them (``models_from``); the
        floors, and so the predictions, follow ``hw``."""
        return ModelSet(hw, self.quantiles, self.models, self.manifest, self.variability, self.directory)

    @property
    def adjustments(self) -> dict[str, Params]:
        """The adjustments' fitted parameters, typed (:func:`read_adjustments`), by name."""
        if self._adjustments is None or self._adjustments[0] is not self.manifest:
            self._adjustments = (self.manifest, read_adjustments(self.manifest))
        return self._adjustments[1]

    def adjustment(self, name: str) -> Params | None:
        """The fitted parameters of the adjustment ``name``, None where none were fitted."""
        return self.adjustments.get(name)

    @property
    def calibration(self) -> Calibration | None:
        """The in-situ calibration fitted to measured steps on this hardware, if any."""
        cal = self.manifest.get("calibration")
        return Calibration(**cal) if cal else None

    def save_calibration(self, directory, calibration: Calibration | None) -> Path:
        """Store ``calibration`` in the manifest of the models saved in ``directory``
        (atomically); None takes a stored one out."""
        path = Path(directory) / MANIFEST
        manifest = json.loads(path.read_text())
        ours = json.loads(json.dumps(self.manifest, default=str))  # as written: lists, not tuples
        if {k: v for k, v in manifest.items() if k not in ("calibration", CHECKSUM_KEY)} != \
                {k: v for k, v in ours.items() if k not in ("calibration", CHECKSUM_KEY)}:
            raise PrismError(f"{directory}: its models were replaced while the calibration was fitted to the ones "
                             f"before (another prism train into it?); run prism calibrate again on them; nothing "
                             f"stored", field="models_dir")
        manifest.pop("calibration", None)
        if calibration is not None:
            manifest["calibration"] = calibration.to_dict()
        text = manifest_text(manifest)
        write_atomically(path, lambda tmp: tmp.write_text(text))
        self.manifest = json.loads(text)
        return path

    def has(self, op: str, pass_: str) -> bool:
        return (op, pass_) in self.models

    def query(self, op: str, pass_: str, shapes: pd.DataFrame) -> pd.DataFrame:
        """Latency quantiles (us) for each row of ``shapes``, one column per quantile."""
        if (op, pass_) not in self.models:
            have = ", ".join(f"{o}/{p}" for o, p in sorted(self.models))
            raise PrismError(f"no model for {op}/{pass_} on {self.hw.name}; this model set has: {have}. "
                             f"Sample the op and run prism train", field=f"{op}/{pass_}")
        _check_shapes(op, shapes, self.hw)
        import pandas as pd

        columns = [f"q{a:g}" for a in self.quantiles]
        if shapes.empty:  # no call to answer (XGBoost cannot shape a prediction of no rows)
            return pd.DataFrame(columns=columns, index=shapes.index, dtype=float)
        return pd.DataFrame(self.models[(op, pass_)].predict(shapes, self.hw), columns=columns, index=shapes.index)

    # -- artifacts --------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write every model as ``<op>__<pass>.ubj.gz`` and ``<op>__<pass>.quantiles.ubj.gz``
        plus the manifest, as a whole: the previous set in ``directory`` stays until the new
        one is complete (:func:`whole_folder`)."""
        import sklearn  # its version, for the manifest

        directory = Path(directory)
        with whole_folder(directory) as tmp:
            replaced = replaced_set(directory, len(self.models))  # read before the folder is replaced
            entries = {}
            for (op, pass_), m in sorted(self.models.items()):
                files = {}
                for part, booster, name in (("center", m.regressor.center_, f"{op}__{pass_}.ubj.gz"),
                                            ("quantiles", m.regressor.booster_, f"{op}__{pass_}.quantiles.ubj.gz")):
                    files[part] = {"file": name, "sha256": write_booster(booster, tmp / name)}
                entries[f"{op}/{pass_}"] = {**m.info, "files": files, "op": op, "pass": pass_,
                                            "features": feature_names(op)}
            manifest = {
                "format": FORMAT_VERSION, "boosters": BOOSTER_FORMAT, "hardware": self.hw.name,
                "quantiles": list(self.quantiles),
                "target": "log(latency_us / floor_us)", "floor_fingerprint": floor_fingerprint(self.hw),
                "created": datetime.now(timezone.utc).isoformat(),
                "versions": {"xgboost": xgb.__version__, "scikit-learn": sklearn.__version__,
                             "numpy": np.__version__, "python": platform.python_version()},
                **{k: v for k, v in self.manifest.items()
                   if k in ("samples", "collective_network", "tier", "collective_scope", "device", "host_floor",
                           "disturbed")},
                **({ADJUSTMENTS_KEY: adjustments_section(self.adjustments)} if self.adjustments else {}),
                "models": entries,
            }
            text = manifest_text(manifest)
            (tmp / MANIFEST).write_text(text)
            if self.variability is not None:
                write_variability(tmp, self.variability)
        self.manifest, self.replaced = json.loads(text), replaced
        return directory

    @classmethod
    def load(cls, directory, hw: HardwareConfig | str) -> ModelSet:
        """Load a hardware's models (``hw`` a profile or a conf/hardware name), checking them
        against the manifest and the profile."""
        hw, directory = as_hardware(hw), Path(directory)
        recover_folder(directory)
        path = directory / MANIFEST
        if not directory.exists():
            where = "" if directory.is_absolute() else f" (read from {Path.cwd()})"
            raise PrismError(f"{directory}: no such folder{where}; give the folder of a model set, e.g. "
                             f"{models_dir(None) / hw.name} (the shipped one)", field=str(directory))
        if not path.exists():
            raise PrismError(f"{directory}: no trained models ({MANIFEST} missing); train them with "
                             f"prism train samples=DIR hardware={hw.name}", field=str(directory))
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PrismError(f"{path}: not valid JSON ({exc}); retrain with prism train", field=str(path)) from None
        except OSError as exc:  # a folder of that name, or unreadable
            raise PrismError(f"{path}: cannot be read ({exc.strerror or exc}); retrain with prism train",
                             field=str(path)) from None
        if not isinstance(manifest, dict):
            raise PrismError(f"{path}: a JSON {type(manifest).__name__}, not the manifest's object; retrain with "
                             f"prism train", field=str(path))
        if manifest.get("format") != FORMAT_VERSION or manifest.get("boosters") != BOOSTER_FORMAT:
            raise PrismError(f"{path}: format {manifest.get('format')} (boosters {manifest.get('boosters')}), this "
                             f"PRISM reads format {FORMAT_VERSION} ({BOOSTER_FORMAT}); retrain with prism train",
                             field=str(path))
        _check_manifest(path, manifest)
        if manifest.get("hardware") != hw.name:
            raise PrismError(f"{path}: made for hardware {manifest.get('hardware')!r}, not {hw.name!r}; "
                             f"retrain with prism train", field=str(path))
        if manifest["floor_fingerprint"] != floor_fingerprint(hw):
            raise _stale(path, hw, "the peak, bandwidth or network figures", _floor_figures,
                         lambda profile: floor_fingerprint(profile) == manifest["floor_fingerprint"])
        ops = {entry["op"] for entry in manifest["models"].values()}
        if ops & set(HOST_OPS) and manifest.get("host_floor") != host_fingerprint(hw, ops):
            raise _stale(path, hw, "the host block", lambda h: {f"host.{k}": v for k, v in vars(h.host).items()},
                         lambda profile: host_fingerprint(profile, ops) == manifest.get("host_floor"))
        models = {}
        for key, entry in manifest["models"].items():
            boosters = {}
            for part, f in entry["files"].items():
                file = directory / f["file"]
                if not file.is_file():  # missing, or a folder of that name
                    raise PrismError(f"{file}: listed in {MANIFEST} but missing; retrain with prism train",
                                     field=str(file))
                boosters[part] = (file, read_booster(file, f["sha256"]))
            if entry["features"] != feature_names(entry["op"]):
                raise PrismError(f"{key}: trained on features {entry['features']}, this PRISM "
                                 f"computes {feature_names(entry['op'])}; retrain with prism train", field=key)
            if not _is_ceiling(entry.get("compute_ceiling")):
                raise PrismError(f"{path}: {key}: compute_ceiling {entry['compute_ceiling']!r} is not a map of "
                                 f"precision to a positive share of the peak; retrain with prism train", field=key)
            models[(entry["op"], entry["pass"])] = partial(_operator_model, entry, boosters, manifest["quantiles"])
        # last: a damage the checks above name by its field is said so; one they pass (an entry removed,
        # offsets inverted) is found by the checksum
        _check_checksum(path, manifest)
        return cls(hw, manifest["quantiles"], LazyModels(models), manifest, read_variability(directory), directory)


def _operator_model(entry: dict, boosters: dict[str, tuple[Path, bytes]], quantiles: list[float]) -> OperatorModel:
    """The model of one manifest entry, from its boosters' files and checked gzip-compressed bytes."""
    reg = QuantileXGBRegressor(quantiles=tuple(quantiles))
    built = {}
    for part, (file, data) in boosters.items():
        try:
            built[part] = booster(data)
        except (OSError, EOFError, xgb.core.XGBoostError):  # its checksum matched: written so, not torn since
            raise PrismError(f"{file}: not a gzip-compressed XGBoost model; retrain with prism train",
                             field=str(file)) from None
    reg.center_, reg.booster_ = built["center"], built["quantiles"]
    reg.offsets_ = np.asarray(entry["offsets"])
    return OperatorModel(entry["op"], entry["pass"], reg, entry)


class LazyModels(Mapping):
    """(op, pass) -> :class:`OperatorModel`, each built from its boosters on first use: a
    prediction needs some of a hardware's models (15 of 28 for GPT-3 on A100), and
    building a booster costs more than the prediction."""

    def __init__(self, builders: dict[tuple[str, str], Callable[[], OperatorModel]]):
        self._builders, self._built = builders, {}

    def __getitem__(self, key: tuple[str, str]) -> OperatorModel:
        if key not in self._built:
            self._built[key] = self._builders[key]()
        return self._built[key]

    def __contains__(self, key) -> bool:  # without building the model
        return key in self._builders

    def __iter__(self):
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


def write_booster(booster: xgb.Booster, path: Path) -> str:
    """Save ``booster`` to ``path`` as gzip-compressed UBJ; return the file's sha256."""
    # Level 6 is within 4% of level 9's size at a fifth of its time; mtime=0 makes one
    # booster always give the same bytes, so that an unchanged model is no change in git.
    data = gzip.compress(booster.save_raw(raw_format="ubj"), compresslevel=6, mtime=0)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_booster(file: Path, sha256: str) -> bytes:
    """The bytes :func:`write_booster` saved in ``file``, checked against their checksum
    (:func:`booster` builds the booster)."""
    data = file.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PrismError(f"{file}: does not match its checksum in {MANIFEST} (changed or "
                         f"truncated); retrain with prism train", field=str(file))
    return data


def booster(data: bytes) -> xgb.Booster:
    """The booster of :func:`read_booster`'s bytes."""
    # Queries come in small batches: one thread beats a thread per core, which spends
    # more time synchronising than predicting (2.7 s vs 5-6 s for a four-profile prism
    # compare on 2 busy cores). Loading too: 0.4 s for 56 boosters on 2 busy cores with
    # XGBoost's default threads, 0.08 s with one.
    with xgb.config_context(nthread=1):
        return xgb.Booster(params={"nthread": 1}, model_file=bytearray(gzip.decompress(data)))


def check_replaceable(directory: Path) -> None:
    """Refuse ``directory`` as the place of a set unless it is missing, empty or a set saved
    before (its manifest): saving replaces the whole folder, so anything else there (the
    sample store itself, with ``prism train samples=samples/cpu models_dir=samples``) would be lost.
    A folder that cannot be written in is refused too, before the training rather than after it."""
    if directory.exists() and not directory.is_dir():
        raise PrismError(f"{directory}: a file, where the set's folder goes; move it, or save elsewhere "
                         f"(models_dir=)", field=str(directory))
    refuse_set_folder(directory.parent)
    if directory.is_dir() and not (directory / MANIFEST).is_file() and any(directory.iterdir()):
        raise PrismError(f"{directory}: holds files that are no saved model set (no {MANIFEST}), and saving one "
                         f"replaces the whole folder, so they would be lost; move them, or save elsewhere "
                         f"(models_dir=)", field=str(directory))
    foreign = sorted(p.name for p in directory.iterdir() if not _set_file(p)) if directory.is_dir() else []
    if foreign:  # a sample run or a set saved one folder too deep: the swap would take them with it
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise PrismError(f"{directory}: a saved model set that also holds {shown}, which no set writes; saving "
                         f"replaces the whole folder, so they would be lost; move them out first", field=str(directory))
    if directory.is_dir():  # the save renames it aside: one it cannot write in (immutable) it cannot rename
        writable("models_dir", directory, folder=True)


#: The runs the predictive-uncertainty model learned from (:meth:`predictor.latency.doubt.DoubtModel.save`).
DOUBT_RUNS_FILE = "runs.csv"


def _set_file(path: Path) -> bool:
    """Whether ``path`` is a file a saved set writes: its manifest, a booster
    (``<op>__<pass>.ubj.gz``, ``.quantiles.ubj.gz``), the measured variability or the
    uncertainty model's runs, or a hidden one the tools leave (a lock or a temporary file)."""
    return path.name.startswith(".") or (path.is_file() and (path.name in (MANIFEST, VARIABILITY_FILE, DOUBT_RUNS_FILE)
                                                             or path.name.endswith(".ubj.gz")))


def replaced_set(directory: Path, models: int) -> str | None:
    """What saving a set of ``models`` models in ``directory`` replaces, None where no set is
    there: the set's models, when and on how many sample rows they were trained, and its
    calibration, which goes with them (it was fitted to their predictions)."""
    try:
        old = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # check_replaceable let the folder through: its manifest is there
        old = None
    if not isinstance(old, dict):
        return f"replaced the set in {directory} (its {MANIFEST} unreadable) by these {models} models"
    entries, samples = old.get("models"), old.get("samples") if isinstance(old.get("samples"), dict) else {}
    rows = f"{samples['rows']:,}" if isinstance(samples.get("rows"), int) else "?"
    text = (f"replaced the set of {len(entries) if isinstance(entries, dict) else '?'} models in {directory}, trained "
            f"{str(old.get('created', '?'))[:16].replace('T', ' ')} UTC on {rows} sample rows (hash "
            f"{samples.get('hash', '?')}), by these {models}")
    if not _is_calibration(old.get("calibration")):
        return text
    cal = Calibration(**old["calibration"])
    return (f"{text}; its calibration (compute_scale {cal.compute_scale:.3g}, op_overhead_us {cal.op_overhead_us:.3g}, "
            f"tp_overhead_us {cal.tp_overhead_us:.3g}, fitted on {cal.layouts} layouts) is dropped with it: run prism "
            f"calibrate measured=FILE hardware={directory.name} models_dir={directory.parent} again")


#: A new set's temporary folder untouched this long was left by a save killed outright: a
#: save writes its files in seconds (27 models), a concurrent one is never idle an hour.
ABANDONED_TMP_S = 3600.0


def _aside(directory: Path, kind: str = "old", idle_s: float = 0.0) -> list[Path]:
    """The folders :func:`whole_folder` left beside ``directory``, oldest first: ``old``, the
    replaced sets it has not removed yet; ``tmp``, new sets it was writing, untouched for
    ``idle_s``."""
    if not directory.parent.is_dir():
        return []
    name = re.compile(rf"\.{re.escape(directory.name)}\.[0-9a-f]{{8}}\.{kind}")
    found = [p for p in directory.parent.iterdir() if name.fullmatch(p.name) and p.is_dir()]
    return sorted((p for p in found if time.time() - p.stat().st_mtime >= idle_s), key=lambda p: p.stat().st_mtime)


def recover_folder(directory: Path) -> None:
    """Finish a replacement that :func:`whole_folder` was killed in (``kill -9``, power
    loss), before ``directory`` is read or replaced: killed between its two renames, the set
    is back in its place (the new one had not arrived); killed while removing the replaced
    set, what is left of that is removed."""
    olds = _aside(Path(directory))
    if olds and not Path(directory).exists():
        os.rename(olds.pop(), directory)
    for old in olds + _aside(Path(directory), "tmp", ABANDONED_TMP_S):
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def whole_folder(directory: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``directory`` to write a set of files into; when
    the block ends without an error it replaces ``directory`` (the old folder is moved
    aside, then removed). On an error or an interrupt the temporary folder is removed and
    ``directory`` is left as it was: a reader finds the old set or the new, never a mix; a
    process killed outright between the two renames leaves the old set aside, and the next
    load or save puts it back (:func:`recover_folder`)."""
    recover_folder(directory)
    check_replaceable(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp, old = directory.with_name(f".{directory.name}.{tag}.tmp"), directory.with_name(f".{directory.name}.{tag}.old")
    tmp.mkdir()
    try:
        yield tmp
        replacing = directory.exists()
        try:
            if replacing:
                os.rename(directory, old)
            try:
                os.rename(tmp, directory)
            except BaseException:
                if replacing:
                    os.rename(old, directory)
                raise
        except OSError as exc:  # a set left aside by a failed rename back is put back by the next load
            raise PrismError(f"{directory}: cannot be replaced ({exc.strerror or exc}), so the new set is not "
                             f"saved and {'the set there is kept' if replacing else 'nothing was written'}; make "
                             f"{directory} and its folder writable, or save elsewhere (models_dir=)",
                             field=str(directory)) from None
        if replacing:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: The longest call a sample may time: 1000 s. The sampler caps its calls at tens of ms
#: (sampling.max_call_ms), published microbenchmarks at seconds; past it latency_us holds
#: another unit (ns), not a time.
MAX_LATENCY_US = 1e9
#: How far past the profile's datasheet peak the median GEMM sample of an op may run: the
#: fastest measured reach 0.95-1.04 of it (the shipped sets' compute_ceiling;
#: local-cpu's peak is an estimate), so a median at twice the peak is a unit (s or ms written
#: as µs) or a profile's peak wrong. The median: a traced call whose profiler cost left it at
#: the importer's floor (predictor.data.importers.trace.FLOOR_US) runs past it alone.
MAX_GEMM_PEAK_SHARE = 2.0


def check_latencies(rows: pd.DataFrame, hw: HardwareConfig) -> None:
    """One error naming ``latency_us`` where a row's latency is empty, non-positive,
    infinite, or longer than :data:`MAX_LATENCY_US`, and where an op's median GEMM runs
    faster than :data:`MAX_GEMM_PEAK_SHARE` times ``hw``'s peak (``prism train`` and
    ``prism evaluate`` refuse them alike)."""
    latency = rows["latency_us"]
    bad = ~(latency > 0) | ~np.isfinite(latency)  # NaN fails the first test
    if bad.any():
        where = ", ".join(f"{op}/{p} {n}" for (op, p), n in rows[bad].groupby(["op", "pass"]).size().items())
        raise PrismError(f"samples: latency_us is empty, non-positive or infinite in {int(bad.sum())} row(s) "
                         f"({where}); a sample is a measured time: drop those rows or sample again",
                         field="latency_us")
    slow = latency > MAX_LATENCY_US
    if slow.any():
        raise PrismError(f"samples: latency_us of {int(slow.sum())} row(s) above {MAX_LATENCY_US:.0e} µs, over 16 "
                         f"minutes for one call (largest {latency.max():.3g}): latency_us holds microseconds; convert "
                         f"the rows (ns / 1000) or sample again", field="latency_us")
    gemms = rows[rows["op"].isin(["gemm", "bmm"]) & rows["pass"].isin(["fwd", "bwd"])]
    for (op, pass_), g in gemms.groupby(["op", "pass"]):
        share = compute_floor_us(op, pass_, g, hw) / g["latency_us"].to_numpy()
        if np.median(share) > MAX_GEMM_PEAK_SHARE:
            dtype = str(call_dtypes(g, len(g))[0])
            raise PrismError(f"samples: latency_us of the {len(g)} {op}/{pass_} row(s) puts their median at "
                             f"{np.median(share):.3g} times {hw.name}'s peak {dtype} FLOP/s: latency_us holds "
                             f"microseconds (seconds or ms written as µs?), or the profile's peak_flops.{dtype} is "
                             f"wrong; convert the rows or fix the profile", field="latency_us")


def op_samples(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that time an op as its model learns it: not the co-run phase's nor the gap
    curve's, which time a neighbour's and a shorter gap's cost."""
    return without_gap_rows(without_co_run(rows))


def training_rows(rows: pd.DataFrame, hw: HardwareConfig) -> tuple[pd.DataFrame, dict[str, Params]]:
    """``rows`` (one hardware's samples) as its op models learn them, and what each
    adjustment fitted on them: in the registry's order, each fits on the rows the ones before
    it prepared, then prepares them (takes its own rows out, or its part off)."""
    fitted = {}
    for adjustment in ADJUSTMENTS:
        params = adjustment.fit(rows, hw)
        if params is not None:
            fitted[adjustment.name] = params
        rows = adjustment.prepare(rows, params, hw)
    return rows, fitted


def train(samples: pd.DataFrame, hw: HardwareConfig, rc: RegressorConfig, n_jobs: int = 2,
          progress: bool = False, allow_disturbed: bool = False) -> ModelSet:
    """Fit one model per (op, pass) present in ``samples`` for ``hw`` (in parallel). A store
    of which more than :data:`DISTURBED_SHARE` of the shapes were disturbed while sampled
    (:func:`disturbed_shapes`) is refused unless ``allow_disturbed``; its repeats are kept
    as they are (what was measured), and the manifest counts the disturbed shapes."""
    import joblib

    check_settings(rc.name, rc.quantiles, dict(rc.params))  # before any work: a bad setting fails in every fit
    rows = samples[samples["hardware"] == hw.name]
    if rows.empty:
        held = ", ".join(sorted(map(str, samples["hardware"].dropna().unique()))) or "nothing"
        raise PrismError(f"hardware={hw.name}: the samples hold no rows for it (they hold: {held})", field='hardware')
    check_latencies(rows, hw)
    # the sampler's own repeats: imported ones (a profiler trace's steps, published tables) are not repeats of one call
    disturbed = disturbed_shapes(rows[origins(rows) == "sampled"])
    if not allow_disturbed and disturbed["disturbed"] >= DISTURBED_REFUSED \
            and disturbed["disturbed"] > DISTURBED_SHARE * disturbed["shapes"]:
        raise PrismError(f"samples: {disturbed['disturbed']} of {disturbed['shapes']} shapes were disturbed while "
                         f"sampled (slowest repeat over {DISTURBED_SPREAD:g}x the median; more than "
                         f"{DISTURBED_SHARE:.0%} of them): their stalls would become the models' upper tails; sample "
                         f"again on an idle machine, or train on them anyway with allow_disturbed=true",
                         field="allow_disturbed")
    # a neighbouring rank's cost, a CPU collective's by the compute before it, the autograd entry...
    rows, adjusted = training_rows(rows, hw)
    groups = [(op, pass_, g) for (op, pass_), g in rows.groupby(["op", "pass"], sort=True)]
    jobs = (joblib.delayed(fit_operator_model)(op, pass_, g, hw, rc) for op, pass_, g in groups)
    # threads, not processes: XGBoost fits without the GIL, and no worker process outlives a
    # killed prism train or prints its own traceback on Ctrl-C (27 models: 5.6 s, processes 8.0 s)
    fitted = joblib.Parallel(n_jobs=n_jobs, prefer="threads", verbose=0)(jobs)
    models = {(m.op, m.pass_): m for m in fitted}
    origin = origins(rows)
    coll = rows[rows["op"].isin(COLLECTIVE_OPS)]
    manifest = {"samples": {"rows": int(len(rows)), "hash": data_hash(rows[["op", "pass", "latency_us"]])},
                "collective_network": collective_network(rows, hw),
                "tier": TIERS[1] if origin.str.startswith(MICROBENCH).all() else TIERS[0],
                # Collectives measured inside one node say nothing of the network between nodes.
                "collective_scope": "intra-node" if not coll.empty and (coll["nodes"] <= 1).all() else "all",
                "device": sampled_device(rows[origin == "sampled"]), "disturbed": disturbed}
    if rows["op"].isin(HOST_OPS).any():
        manifest["host_floor"] = host_fingerprint(hw, {op for op, _ in models})
    if adjusted:
        manifest[ADJUSTMENTS_KEY] = adjustments_section(adjusted)
    return ModelSet(hw, rc.quantiles, models, manifest)


def _check_shapes(op: str, shapes, hw: HardwareConfig) -> None:
    """What :meth:`ModelSet.query` is asked: a table with ``op``'s shape columns, positive
    sizes, and (for a compute op) the ``dtype`` each call runs in."""
    import pandas as pd

    if not isinstance(shapes, pd.DataFrame):
        raise PrismError(f"shapes: a pandas DataFrame with {op}'s columns {', '.join(OPS[op].shape)} "
                         f"(got {type(shapes).__name__})", field="shapes")
    spec = OPS[op]
    missing = [c for c in spec.shape if c not in shapes]
    if not (spec.collective or spec.host) and "dtype" not in shapes:
        missing.append("dtype")
    if missing:
        raise PrismError(f"shapes: no column {', '.join(missing)}; {op} needs {', '.join(spec.shape)}"
                         + ("" if spec.collective or spec.host else f" and dtype (e.g. {hw.train_dtype})"),
                         field="shapes")
    unknown = ~shapes["dtype"].isin(list(DTYPE_BYTES)) if not (spec.collective or spec.host) else []
    if any(unknown):
        raise PrismError(f"shapes: column dtype holds {shapes['dtype'][unknown].iloc[0]!r}; write one of "
                         f"{', '.join(DTYPE_BYTES)}", field="dtype")
    for column in spec.shape:
        if column in ("causal", "optimizer"):
            continue
        values = pd.to_numeric(shapes[column], errors="coerce")
        if not (values > 0).all():
            raise PrismError(f"shapes: column {column} holds {str(shapes[column][~(values > 0)].iloc[0])!r}; "
                             f"sizes are positive numbers", field=column)


def sampled_device(rows: pd.DataFrame) -> dict | None:
    """The device and hosts our own samples were taken on (None: none are ours)."""
    if rows.empty or "device_name" not in rows:
        return None
    hosts = sorted(map(str, rows["host"].dropna().unique())) if "host" in rows else []
    return {"name": str(rows["device_name"].mode().iloc[0]), "hosts": hosts}


def foreign_device(models: ModelSet | None) -> str | None:
    """A note when CPU models were sampled on another machine than this one: a CPU's
    models describe the CPU they were sampled on, not every CPU."""
    if models is None or models.hw.device.kind != "cpu" or not models.manifest.get("device"):
        return None
    device, here, host = models.manifest["device"], this_cpu(), socket.gethostname()
    if device["name"] == here and (not device["hosts"] or host in device["hosts"]):
        return None
    name = models.hw.name
    folder = Path(models.directory or f"models/{name}")
    if folder.is_absolute() and folder.is_relative_to(Path.cwd()):
        folder = folder.relative_to(Path.cwd())
    return (f"{folder} were sampled on {device['name']} (host {', '.join(device['hosts']) or '?'}), not on "
            f"this machine ({here}, host {host}): they describe that CPU. Sample and train this one: "
            f"prism sample hardware={name} sampling=quick output_dir=samples/cpu, then prism train "
            f"samples=samples/cpu hardware={name}, and predict with models_dir=runs/models "
            f"(or add sample_if_missing=true to do both)")


#: Host figures only one host op's floor reads: a model set without that op does not
#: depend on them (a profile that gains such a figure keeps its trained models).
OWN_HOST_FIELDS = {"checkpoint": ("checkpoint_fwd_us", "checkpoint_bwd_us"),
                   "dtensor": ("dtensor_fwd_us", "dtensor_bwd_us"), "collective_launch": ("collective_launch_us",)}


def host_fingerprint(hw: HardwareConfig, ops) -> str:
    """Hash of the host figures the floors of the host ops among ``ops`` use
    (:class:`~predictor.core.specs.HostSpec`)."""
    unused = {f for op, fields in OWN_HOST_FIELDS.items() if op not in ops for f in fields}
    figures = {k: v for k, v in vars(hw.host).items() if k not in unused}
    return hashlib.sha256(json.dumps(figures, sort_keys=True).encode()).hexdigest()[:16]


def collective_network(rows: pd.DataFrame, hw: HardwareConfig) -> str | None:
    """The network the collective samples describe: this profile's own when we measured
    them (origin ``sampled``), else where they came from (e.g. ``ett:Perlmutter``): one
    cluster's network is not another's, so the composer uses them only on their own."""
    coll = rows[rows["op"].isin(COLLECTIVE_OPS)]
    if coll.empty:
        return None
    seen = set(origins(coll))
    # Published microbenchmarks of the GPU system's own node (NVLink/NVSwitch come with
    # it) describe every cluster of that system inside a node.
    if seen == {"sampled"} or all(o.startswith(MICROBENCH) for o in seen):
        return hw.network.name
    return ",".join(sorted({o.split("/")[0] for o in seen}))
