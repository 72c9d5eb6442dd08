"""Bad input to the latency models: latencies that are no measurement, regressor settings,
queries without their columns, and model sets whose files or manifest were tampered with. Each
is one error naming the field, before any fit or at load."""

import gzip
import json

import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT
from predictor.core.specs import RegressorConfig
from predictor.latency.regressor import DEFAULT_QUANTILES


def test_training_refuses_latencies_that_are_no_measurement():
    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import train
    rows = pd.DataFrame({"hardware": "local-cpu", "op": "gemm", "pass": "fwd", "m": 64, "n": 64, "k": 64,
                         "dtype": "float32", "latency_us": [10.0, -5.0, float("nan")], "origin": "sampled"})
    with pytest.raises(PrismError, match="latency_us") as exc:
        train(rows, load_hardware("local-cpu"), RegressorConfig("xgboost", list(DEFAULT_QUANTILES)))
    assert "gemm/fwd 2" in str(exc.value)


@pytest.mark.parametrize("quantiles, params, field", [
    ([0.5], {}, "regressor.quantiles"),  # predictions draw from the 5%..95% levels
    ([0.9, 0.1, 0.5], {}, "regressor.quantiles"),
    ([*DEFAULT_QUANTILES[:-1], 1.5], {}, "regressor.quantiles"),
    (list(DEFAULT_QUANTILES), {"max_depth": -1}, "regressor.params.max_depth"),
    (list(DEFAULT_QUANTILES), {"learning_rate": "abc"}, "regressor.params.learning_rate"),
    (list(DEFAULT_QUANTILES), {"multi_strategy": "foo"}, "regressor.params.multi_strategy"),
    (list(DEFAULT_QUANTILES), {"n_estimators": 0}, "regressor.params.n_estimators"),
    (list(DEFAULT_QUANTILES), {"calibration_fraction": 1.5}, "regressor.params.calibration_fraction"),
    (list(DEFAULT_QUANTILES), {"depth": 3}, "regressor.params.depth"),
])
def test_regressor_settings_are_checked_before_any_fit(quantiles, params, field):
    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import train
    rows = pd.DataFrame({"hardware": "local-cpu", "op": "gemm", "pass": "fwd", "m": 64, "n": 64, "k": 64,
                         "dtype": "float32", "latency_us": [10.0], "origin": "sampled"})
    with pytest.raises(PrismError) as exc:
        train(rows, load_hardware("local-cpu"), RegressorConfig("xgboost", quantiles, params))
    assert exc.value.field == field and str(exc.value).count("\n") == 0


@pytest.mark.parametrize("shapes, says", [
    ({"m": [8192], "n": [8192], "k": [8192]}, "no column dtype"),  # was read as float32, 15x slower
    ({"m": [0], "n": [8192], "k": [8192], "dtype": ["bfloat16"]}, "column m holds '0'"),
    ({"m": [-5], "n": [8192], "k": [8192], "dtype": ["bfloat16"]}, "column m holds '-5'"),
    ({"n": [8192], "k": [8192], "dtype": ["bfloat16"]}, "no column m"),
])
def test_a_model_query_needs_its_columns_and_positive_sizes(shapes, says):
    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import ModelSet
    models = ModelSet.load(REPO_ROOT / "models" / "a100-sxm4-80gb", load_hardware("a100-sxm4-80gb"))
    with pytest.raises(PrismError, match=says):
        models.query("gemm", "fwd", pd.DataFrame(shapes))


def test_a_booster_that_matches_its_checksum_but_is_no_model_is_named(tmp_path):
    import hashlib
    import shutil

    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import ModelSet, manifest_text
    folder = tmp_path / "a100-sxm4-80gb"
    shutil.copytree(REPO_ROOT / "models" / "a100-sxm4-80gb", folder)
    data = gzip.compress(b"not a model" * 100)
    (folder / "gemm__fwd.ubj.gz").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["models"]["gemm/fwd"]["files"]["center"]["sha256"] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(manifest_text(manifest))  # re-signed: the booster's own check is tested
    models = ModelSet.load(folder, load_hardware("a100-sxm4-80gb"))
    with pytest.raises(PrismError, match="gemm__fwd.ubj.gz: not a gzip-compressed XGBoost model"):
        models.query("gemm", "fwd", pd.DataFrame({"m": [64], "n": [64], "k": [64], "dtype": ["bfloat16"]}))


@pytest.mark.parametrize("ceiling", ["fast", {"bfloat16": -1}, {"bfloat16": "0.8"}, {}])
def test_a_tampered_compute_ceiling_is_named(tmp_path, ceiling):
    import shutil

    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import ModelSet
    folder = tmp_path / "h100-sxm"
    shutil.copytree(REPO_ROOT / "models" / "h100-sxm", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["models"]["gemm/bwd"]["compute_ceiling"] = ceiling
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PrismError, match="gemm/bwd: compute_ceiling .* retrain with prism train"):
        ModelSet.load(folder, load_hardware("h100-sxm"))


@pytest.mark.parametrize("damage, field", [
    (lambda m: m.pop("models"), "models"),
    (lambda m: m.update(tier="gold"), "tier"),
    (lambda m: m.update(quantiles=[0.5]), "quantiles"),
    (lambda m: m["models"]["gemm/fwd"].update(offsets=[0.0, 0.1]), "models.gemm/fwd.offsets"),
    (lambda m: m["models"]["gemm/fwd"].update(offsets=["0"] * 7), "models.gemm/fwd.offsets"),
    (lambda m: m["models"]["gemm/fwd"].update(offsets=[1e6] * 7), "models.gemm/fwd.offsets"),  # predicts nan
    (lambda m: m["models"]["gemm/fwd"].pop("files"), "models.gemm/fwd"),
])
def test_a_damaged_manifest_is_named_at_load(tmp_path, damage, field):
    import shutil

    from predictor.core.profiles import load_hardware
    from predictor.latency.artifacts import ModelSet
    folder = tmp_path / "local-cpu"
    shutil.copytree(REPO_ROOT / "models" / "local-cpu", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    damage(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PrismError, match="retrain with prism train") as exc:
        ModelSet.load(folder, load_hardware("local-cpu"))
    assert exc.value.field == field
