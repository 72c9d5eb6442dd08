"""The contract every registered pricing adjustment keeps (predictor/latency/adjustments/),
checked for each one as scikit-learn's check_estimator checks an estimator: it names itself,
its version and its mechanism; it changes no call it does not apply to; it keeps a call's
quantiles in order; its fitted parameters round-trip through the manifest's JSON; a damaged
entry is one error naming its field."""
import ast
import json
from pathlib import Path

import numpy as np
import pytest

import predictor.latency.adjustments as registry
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware
from predictor.latency.adjustments import ADJUSTMENTS, BY_NAME, MARKS
from predictor.latency.adjustments.base import Adjustment, Params
from predictor.latency.artifacts import ModelSet, models_dir, read_adjustments
from predictor.latency.pricer import Pricer
from predictor.latency.regressor import DEFAULT_QUANTILES

FOLDER = Path(registry.__file__).parent
NAMES = [a.name for a in ADJUSTMENTS]


def _models(hardware: str, adjustment: Adjustment) -> ModelSet:
    """The shipped set of ``hardware`` with ``adjustment``'s example parameters stored in it."""
    hw = load_hardware(hardware)
    models = ModelSet.load(models_dir() / hardware, hw)
    params = adjustment.example()
    if params is not None:
        section = {**models.manifest.get("adjustments", {}), adjustment.name: adjustment.to_json(params)}
        models.manifest = {**models.manifest, "adjustments": section}
    return models


class _Recording(Adjustment):
    """``inner`` as it is, recording where it applied."""

    def __init__(self, inner: Adjustment):
        self.inner, self.name, self.marks, self.masks = inner, inner.name, inner.marks, []

    def applies(self, batch, params):
        which = self.inner.applies(batch, params)
        self.masks.append(([c for c in batch.calls], which.copy(), batch.quantiles.copy()))
        return which

    def apply(self, batch, q, params, which):
        return self.inner.apply(batch, q, params, which)

    def evidence(self, evidence, batch):
        return self.inner.evidence(evidence, batch)


@pytest.mark.parametrize("name", NAMES)
def test_it_names_itself_its_version_and_its_mechanism(name):
    adjustment = BY_NAME[name]
    assert adjustment.name == name and (FOLDER / f"{name}.py").is_file()  # one file, named as registered
    assert isinstance(adjustment.version, int) and adjustment.version >= 1
    assert isinstance(adjustment.mechanism, str) and len(adjustment.mechanism) > 20
    doc = ast.get_docstring(ast.parse((FOLDER / f"{name}.py").read_text()))
    assert doc and len(doc) > 200, "its file opens with a docstring that names the mechanism"
    if adjustment.testbed_only:  # what only the CPU testbed needs says why, and what would retire it
        assert "CPU testbed" in doc and "tests/" in adjustment.retire_when
    assert set(adjustment.marks) <= set(MARKS)


def test_the_registry_lists_every_file_of_the_package_once():
    files = {p.stem for p in FOLDER.glob("*.py")} - {"__init__", "base"}
    assert sorted(files) == sorted(NAMES) and len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_it_changes_only_the_calls_it_applies_to_and_keeps_their_quantiles_in_order(name):
    adjustment = BY_NAME[name]
    hardware, calls = adjustment.example_calls()
    if not calls:  # it changes no single call (its docstring says where it applies): on every other one's calls
        for other in ADJUSTMENTS:
            hardware, calls = other.example_calls()
            if calls:
                models = _models(hardware, adjustment)
                recording = _Recording(adjustment)
                q, _ = Pricer(models, models.hw, adjustments=[recording]).price(calls)
                np.testing.assert_array_equal(q, Pricer(models, models.hw, adjustments=[]).price(calls)[0])
                assert not any(mask.any() for _, mask, _ in recording.masks)
        return
    models = _models(hardware, adjustment)
    recording = _Recording(adjustment)
    chain = [recording if a.name == name else a for a in ADJUSTMENTS]
    without = [a for a in ADJUSTMENTS if a.name != name]
    q, evidence = Pricer(models, models.hw, adjustments=chain).price(calls)
    q0, evidence0 = Pricer(models, models.hw, adjustments=without).price(calls)
    applied = {c: bool(w) for group, mask, _ in recording.masks for c, w in zip(group, mask)}
    assert any(applied.values()), f"{name} applies to none of its example calls"
    assert not all(applied.values()), f"{name}'s example calls should include some it leaves alone"
    for i, call in enumerate(calls):
        if not applied[call]:  # identity where it does not apply
            np.testing.assert_array_equal(q[i], q0[i])
            assert evidence[i] == evidence0[i]
    assert (np.diff(q, axis=1) >= 0).all() and np.isfinite(q).all() and (q > 0).all()
    for _, _, before in recording.masks:  # monotone in, monotone out
        assert (np.diff(before, axis=1) >= 0).all()


@pytest.mark.parametrize("name", NAMES)
def test_its_params_round_trip_through_the_manifest_json(name):
    adjustment = BY_NAME[name]
    params = adjustment.example()
    if adjustment.params_type is None:
        assert params is None
        return
    assert isinstance(params, Params) and isinstance(params, adjustment.params_type)
    entry = json.loads(json.dumps(adjustment.to_json(params)))
    assert entry["version"] == adjustment.version
    assert adjustment.from_json(entry, f"adjustments.{name}") == params
    assert read_adjustments({"adjustments": {name: entry}}) == {name: params}


@pytest.mark.parametrize("name", [n for n in NAMES if BY_NAME[n].params_type is not None])
def test_a_damaged_entry_is_one_error_naming_its_field(name):
    adjustment = BY_NAME[name]
    entry = adjustment.to_json(adjustment.example())
    for damaged, field in (({**entry, "version": adjustment.version + 1}, f"adjustments.{name}.version"),
                           ({**entry, "params": "x"}, f"adjustments.{name}.params"),
                           ("x", f"adjustments.{name}")):
        with pytest.raises(PrismError) as err:
            read_adjustments({"adjustments": {name: damaged}}, Path("models/x/manifest.json"))
        assert err.value.field.startswith(field) and "models/x/manifest.json" in str(err.value)


def test_an_unknown_adjustment_is_refused_by_name():
    with pytest.raises(PrismError) as err:
        read_adjustments({"adjustments": {"warp_drive": {"version": 1, "params": {}}}})
    assert err.value.field == "adjustments.warp_drive"


@pytest.mark.parametrize("name", [n for n in NAMES if BY_NAME[n].legacy_key])
def test_an_older_set_s_top_level_key_reads_as_the_section(name):
    adjustment = BY_NAME[name]
    params = adjustment.example()
    legacy = adjustment.to_json(params)["params"]
    legacy = next(iter(legacy.values())) if len(legacy) == 1 else legacy  # the old keys held the one map itself
    assert read_adjustments({adjustment.legacy_key: legacy}) == {name: params}
    with pytest.raises(PrismError) as err:
        read_adjustments({adjustment.legacy_key: "x"})
    assert err.value.field == adjustment.legacy_key


def test_levels_other_than_the_default_price_alike():
    adjustment = BY_NAME["sm_margin"]
    hardware, calls = adjustment.example_calls()
    models = _models(hardware, adjustment)
    q, _ = Pricer(models, models.hw).price(calls)
    part, _ = Pricer(models, models.hw).price(calls, levels=[0.5])
    np.testing.assert_allclose(part[:, 0], q[:, list(DEFAULT_QUANTILES).index(0.5)])
