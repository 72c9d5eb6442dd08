"""The fourth new-user probe, configuration and API entry points: a PRISM_CONF_DIR that is
no conf/ folder or holds a broken or mistyped config.yaml, a learner PRISM does not have,
a bare key's suggestion, loaders given a path, and the lower-level API given the names
predict() takes. Each case: one line naming the field (or the file) and the fix."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from predictor.analyses.calibrate import fit_calibration
from predictor.analyses.validate import validate
from predictor.app import cli, config
from predictor.core import profiles
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import RegressorConfig
from predictor.data.measurements import read_measurements
from predictor.latency.artifacts import ModelSet, models_dir, train
from predictor.latency.regressor import DEFAULT_QUANTILES
from tests.conftest import ROOT

CPU = load_hardware("local-cpu")


def _error(capsys, *argv) -> str:
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _point_at(monkeypatch, root) -> None:
    """``PRISM_CONF_DIR=root``, as the command line and the API read it."""
    monkeypatch.setattr(profiles, "CONF_DIR", root)
    monkeypatch.setattr(config, "CONF_DIR", root)
    monkeypatch.setattr(config, "ROOT_FILE", root / "config.yaml")
    profiles._device_names.cache_clear()


@pytest.fixture
def conf(tmp_path, monkeypatch):
    """A copy of conf/ that PRISM_CONF_DIR points at."""
    root = tmp_path / "conf"
    shutil.copytree(profiles.REPO_ROOT / "conf", root)
    _point_at(monkeypatch, root)
    yield root
    profiles._device_names.cache_clear()


@pytest.mark.parametrize("make, says", [
    (lambda root: None, "does not exist"),
    (lambda root: root.write_text(""), "is a file, not a folder"),
    (lambda root: root.mkdir(), "holds no config.yaml"),
])
def test_a_conf_dir_that_is_no_conf_folder_is_named(tmp_path, monkeypatch, capsys, make, says):
    # was FileNotFoundError, NotADirectoryError, or "no conf/model/gpt3-13b.yaml; choose one of: " (none)
    root = tmp_path / "mine"
    make(root)
    _point_at(monkeypatch, root)
    err = _error(capsys, "predict", "model=gpt3-13b")
    assert f"PRISM_CONF_DIR={root}: {says}; point PRISM_CONF_DIR at a folder laid out like conf/" in err


def test_the_api_names_the_conf_dir_its_entries_are_missing_from(tmp_path, monkeypatch):
    # was "no conf/model/gpt3-13b.yaml; choose one of: " with nothing to choose and no word of PRISM_CONF_DIR
    _point_at(monkeypatch, tmp_path / "nonexist")
    with pytest.raises(PrismError, match=rf"no {tmp_path}/nonexist/model/gpt3-13b\.yaml \(PRISM_CONF_DIR="
                                         rf"{tmp_path}/nonexist\); .* holds no \.yaml file: point PRISM_CONF_DIR"):
        load_model("gpt3-13b")


def test_an_empty_conf_dir_variable_is_unset(tmp_path):
    # was Path(""): the current folder read as conf/ ("FileNotFoundError: config.yaml")
    check = "from predictor.core.profiles import CONF_DIR, REPO_ROOT; assert CONF_DIR == REPO_ROOT / 'conf', CONF_DIR"
    subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env={**os.environ, "PRISM_CONF_DIR": ""}, check=True)


@pytest.mark.parametrize("text, says", [
    ("", "config.yaml: no defaults list"),  # was KeyError: 'defaults'
    ("defaults:\n  - model: tiny\n", "config.yaml: the defaults list names no hardware file"),
    ("defaults:\n  - tiny\n", "config.yaml: defaults entry tiny: write '- group: option'"),
])
def test_a_config_yaml_without_its_defaults_list_is_named(conf, capsys, text, says):
    (conf / "config.yaml").write_text(text)
    assert says in _error(capsys, "predict")


def test_a_default_naming_a_missing_file_is_named(conf, capsys):
    # was FileNotFoundError: .../parallel/singel.yaml
    root = conf / "config.yaml"
    root.write_text(root.read_text().replace("- parallel: single", "- parallel: singel"))
    err = _error(capsys, "predict")
    assert f"{root}: defaults entry parallel=singel: no {conf}/parallel/singel.yaml" in err
    assert "choose one of: single" in err


def test_an_empty_entry_names_its_file(conf, capsys):
    # was "model.name: not set; every entry of this group sets it", no file named
    (conf / "model" / "empty.yaml").write_text("")
    assert f"{conf}/model/empty.yaml: empty; every model file sets its settings" in _error(
        capsys, "predict", "model=empty")
    (conf / "model" / "empty.yaml").write_text("name: empty\nfamily: gpt\n")
    with pytest.raises(PrismError, match=r"empty\.yaml: no num_layers, hidden_size, .*; every model file sets them"):
        load_model("empty")


@pytest.mark.parametrize("line, says", [
    ("train_token: 5.0e+12", "train_token is no setting of PRISM; did you mean train_tokens?"),
    ("foo: 1", "foo is no setting of PRISM"),
])
def test_a_mistyped_key_of_one_s_own_config_yaml_is_refused(conf, capsys, line, says):
    # was ignored: train_token: 5e12 left the default 1e12 tokens, foo: 1 accepted
    root = conf / "config.yaml"
    root.write_text(root.read_text().replace("train_tokens: 1.0e+12", line))
    assert f"{root}: {says}" in _error(capsys, "predict")


def test_a_key_one_s_own_config_yaml_leaves_out_is_named(conf, capsys):
    root = conf / "config.yaml"
    root.write_text(root.read_text().replace("pue: 1.0", ""))
    assert f"{root}: no pue, a setting prism reads; copy its line from" in _error(capsys, "predict")


@pytest.mark.parametrize("name", ["banana", "lightgbm"])
def test_a_learner_prism_does_not_have_is_refused(name):
    # was ignored: XGBoost trained all the same
    with pytest.raises(PrismError, match=rf"^regressor\.name={name}: .*choose xgboost") as err:
        train(pd.DataFrame({"hardware": []}), CPU, RegressorConfig(name, list(DEFAULT_QUANTILES)))
    assert err.value.field == "regressor.name"


@pytest.mark.parametrize("load, name", [(load_hardware, "../model/gpt3-13b"), (load_model, "../config")])
def test_the_loaders_refuse_a_path(load, name):
    # was gpt3-13b.yaml read as hardware, and "model.defaults: no such setting" for config.yaml
    group = "hardware" if load is load_hardware else "model"
    with pytest.raises(PrismError, match=rf"^{group}={name}: a file path; {group}= takes the name of a file"):
        load(name)


def test_model_set_query_names_an_unknown_dtype_and_answers_no_rows():
    models = ModelSet.load(models_dir() / CPU.name, CPU)
    with pytest.raises(PrismError, match="column dtype holds 'fp32'; write one of float32, ") as err:
        models.query("gemm", "fwd", pd.DataFrame({"m": [8], "n": [8], "k": [8], "dtype": ["fp32"]}))  # was KeyError
    assert err.value.field == "dtype"
    empty = models.query("gemm", "fwd", pd.DataFrame({"m": [], "n": [], "k": [], "dtype": []}))  # was ValueError
    assert empty.empty and list(empty.columns) == [f"q{a:g}" for a in models.quantiles]


def test_the_lower_level_api_takes_a_hardware_name():
    # each was AttributeError: 'str' object has no attribute 'name' (or 'NoneType' ... 'hardware')
    models = ModelSet.load(models_dir() / CPU.name, "local-cpu")
    assert models.hw == CPU
    frame = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    one = frame[frame.layout_id == frame.layout_id.iloc[0]]
    assert len(validate(one, "local-cpu", models, draws=200).scores) == 1
    with pytest.raises(PrismError, match="^measured: 1 layout"):  # past the hardware: the fit's own minimum
        fit_calibration(one, "local-cpu", models)
    with pytest.raises(PrismError, match=r"^measured=None: a table of measured steps") as err:
        validate(None, CPU, models)
    assert err.value.field == "measured"
    with pytest.raises(PrismError, match="^models='models/local-cpu': a ModelSet"):
        validate(one, CPU, "models/local-cpu")
