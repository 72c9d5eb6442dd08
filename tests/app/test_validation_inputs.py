"""Values are checked where they are read: a bad model dimension, hardware figure or
models_dir is one error naming it, and no output holds a NaN or an infinity (issue 16)."""
import json
import math
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from predictor.app.cli import _print, main
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model

JOB = ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64"]


def _error(capsys, *args):
    """The one error line of ``prism predict JOB args``, which must exit with code 2."""
    assert main(["predict", *JOB, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    return captured.err.strip().removeprefix("prism predict: error: ")


@pytest.mark.parametrize("override, message", [
    ("model.num_heads=0", "model.num_heads=0: must be a positive integer"),
    ("model.num_layers=-1", "model.num_layers=-1: must be a positive integer"),
    ("model.head_dim=0", "model.head_dim=0: must be a positive integer"),
    ("model.num_kv_heads=7", "model.num_kv_heads=7: must divide model.num_heads=40"),
    ("+model.num_experts=-2", "model.num_experts=-2: must be a non-negative integer"),
    ("model.activation=relu", "model.activation='relu': unknown; choose one of: gelu, swiglu"),
    ("model.norm=batchnorm", "model.norm='batchnorm': unknown; choose one of: layernorm, rmsnorm"),
    ("model.position=alibi", "model.position='alibi': unknown; choose one of: learned, rope"),
    ("hardware.memory.bandwidth=-1", "hardware.memory.bandwidth=-1.0: must be a positive finite number"),
    ("hardware.peak_flops.float16=0", "hardware.peak_flops.float16=0.0: must be a positive finite number"),
    ("hardware.network.inter_node.bandwidth=nan", "hardware.network.inter_node.bandwidth=nan: must be a positive"),
    ("hardware.network.intra_node.latency_us=inf", "hardware.network.intra_node.latency_us=inf: must be a non-neg"),
    ("hardware.node.gpus_per_node=0", "hardware.node.gpus_per_node=0: must be a positive integer"),
    ("hardware.price_per_gpu_hour=-3", "hardware.price_per_gpu_hour=-3.0: must be a positive finite number"),
    ("hardware.variability.spatial_cv=-0.1", "hardware.variability.spatial_cv=-0.1: must be a non-negative"),
])
def test_a_bad_model_or_hardware_value_is_one_error_naming_it(capsys, override, message):
    assert _error(capsys, override).startswith(message)


def test_a_negative_hidden_size_is_an_error_not_nan_json(capsys):
    assert main(["predict", *JOB, "model.hidden_size=-5", "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": "model.hidden_size=-5: must be a positive integer",
                                        "field": "model.hidden_size"}  # the error, as JSON: no NaN prediction
    assert "model.hidden_size=-5: must be a positive integer" in captured.err


def test_models_are_checked_however_they_are_made():
    llama = load_model("llama3-70b")
    with pytest.raises(PrismError) as err:
        replace(llama, num_kv_heads=3)
    assert err.value.field == "model.num_kv_heads"
    with pytest.raises(PrismError, match="model.seq_length=2048.0: must be a positive integer"):
        replace(llama, seq_length=2048.0)
    assert replace(llama, num_experts=16, top_k=2).num_experts == 16
    hw = load_hardware("h100-sxm")
    with pytest.raises(PrismError) as err:
        replace(hw, power_w=float("inf"))
    assert err.value.field == "hardware.power_w"
    assert replace(hw, price_per_gpu_hour=None, power_w=None).power_w is None  # unknown is allowed


def test_a_mistyped_models_dir_is_an_error_listing_what_exists(capsys, tmp_path, monkeypatch):
    message = _error(capsys, "models_dir=modles")
    assert message.startswith("models_dir=modles: no such folder")
    assert "a100-sxm4-80gb" in message and "leave models_dir out" in message
    (tmp_path / "mine" / "local-cpu").mkdir(parents=True)
    (tmp_path / "mine" / "local-cpu" / "manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert "Folders of trained models: mine (local-cpu)" in _error(capsys, "models_dir=mien")


def test_json_output_never_holds_nan_or_infinity(capsys):
    cfg = OmegaConf.create({"output": "json"})
    with pytest.raises(PrismError, match=r"result.step_time_s\[1\]: not a finite number"):
        _print(cfg, {"model": "m", "step_time_s": [1.0, math.nan]}, "")
    with pytest.raises(PrismError, match=r"result.cost.p95: not a finite number"):
        _print(cfg, {"cost": {"p50": 1.0, "p95": math.inf}}, "")
    assert capsys.readouterr().out == ""
    _print(cfg, {"step_time_s": [1.0, 2.0], "plot": None}, "")
    assert json.loads(capsys.readouterr().out) == {"step_time_s": [1.0, 2.0], "plot": None}
