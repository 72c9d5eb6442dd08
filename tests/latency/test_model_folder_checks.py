"""Bad input met further from the command line: model folders edited by hand or another
tool (measurement files of another writer: tests/data/test_measurement_files.py), profile
figures no GPU has, settings a profile file leaves out, and table rows that half describe a
Mixture-of-Experts model. Each is one
line naming the field, never a traceback, a NaN or a plausible wrong answer."""
import json
import shutil
from dataclasses import replace

import pytest

from predictor.analyses.batch import predict_table
from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT, load_hardware
from predictor.core.specs import ParallelConfig
from predictor.engine.stages import ep_sm_share
from predictor.latency.artifacts import ModelSet

JOB = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def local_models(tmp_path):
    folder = tmp_path / "local-cpu"
    shutil.copytree(REPO_ROOT / "models" / "local-cpu", folder)
    return folder


def _edit_manifest(folder, damage) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    damage(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _gemm(m: dict) -> dict:
    return m["models"]["gemm/fwd"]


@pytest.mark.parametrize("damage, field", [
    (lambda m: _gemm(m).pop("pass"), "models.gemm/fwd"),  # was KeyError: 'pass'
    (lambda m: _gemm(m).pop("features"), "models.gemm/fwd"),  # was KeyError: 'features'
    (lambda m: _gemm(m)["files"].pop("center"), "models.gemm/fwd"),  # was KeyError: 'center'
    (lambda m: _gemm(m)["files"]["center"].update(file=5), "models.gemm/fwd"),  # was a TypeError
    (lambda m: _gemm(m).update({"pass": "sideways"}), "models.gemm/fwd"),  # gemm/fwd fell to the prior, silently
    (lambda m: m["models"].update({"gemm/bwd": dict(m["models"]["gemm/fwd"])}), "models.gemm/bwd"),  # fwd twice
    (lambda m: m.update(models={}), "models"),  # every op on the prior, reported as measured samples
    (lambda m: m.update(calibration={"foo": 1}), "calibration"),  # was a TypeError
    (lambda m: m.update(calibration="yes"), "calibration"),
    (lambda m: m.update(calibration={"compute_scale": float("nan")}), "calibration"),  # was NaN step times
    (lambda m: m.update(device={"foo": 1}), "device"),  # was KeyError: 'name'
    (lambda m: m.update(device="cpu"), "device"),
    (lambda m: m.update(co_run="x"), "co_run"),
])
def test_a_damaged_manifest_is_named_at_load(local_models, damage, field):
    _edit_manifest(local_models, damage)
    with pytest.raises(PrismError) as exc:
        ModelSet.load(local_models, load_hardware("local-cpu"))
    assert exc.value.field == field and str(local_models / "manifest.json") in str(exc.value)


def test_the_shipped_and_calibrated_manifests_still_load(local_models):
    from predictor.latency.artifacts import manifest_text
    manifest = json.loads((local_models / "manifest.json").read_text())
    manifest.update(calibration={"compute_scale": 1.2, "op_overhead_us": 3.0, "tp_overhead_us": 0.0, "layouts": 4})
    (local_models / "manifest.json").write_text(manifest_text(manifest))  # as prism calibrate saves it (its checksum)
    assert ModelSet.load(local_models, load_hardware("local-cpu")).calibration.compute_scale == 1.2


def test_a_folder_in_place_of_a_manifest_or_booster_is_named(local_models, capsys):
    hw = load_hardware("local-cpu")
    (local_models / "gemm__fwd.ubj.gz").unlink()
    (local_models / "gemm__fwd.ubj.gz").mkdir()  # was IsADirectoryError
    with pytest.raises(PrismError, match="gemm__fwd.ubj.gz: listed in manifest.json but missing"):
        ModelSet.load(local_models, hw)
    (local_models / "manifest.json").unlink()
    (local_models / "manifest.json").mkdir()
    assert main(["predict", "model=tiny", "hardware=local-cpu", f"models_dir={local_models.parent}"]) == 2
    assert "manifest.json: cannot be read" in _one_line(capsys)


def test_a_variability_file_that_is_json_but_no_object_is_named(local_models):
    (local_models / "variability.json").write_text("[]")  # was AttributeError: 'list' object has no attribute 'get'
    with pytest.raises(PrismError, match="variability.json: not a measured variability file"):
        ModelSet.load(local_models, load_hardware("local-cpu"))


def test_a_setting_the_profile_file_leaves_out_says_to_add_it(capsys):
    # was "model.num_experts: no such setting; did you mean model.num_layers?" for a real setting
    assert main([*JOB, "model.num_experts=8"]) == 2
    assert "add it with +model.num_experts=8" in _one_line(capsys)
    assert main([*JOB, "hardware.node.nvlink_domain=16"]) == 2
    assert "+hardware.node.nvlink_domain=16" in _one_line(capsys)
    assert main([*JOB, "model.num_expert=8"]) == 2  # a typo is still no setting
    assert "model.num_expert: no such setting" in _one_line(capsys)


def test_an_expert_dispatcher_that_holds_every_sm_is_named():
    hw = load_hardware("h100-sxm")
    par = ParallelConfig(ep=8, moe_dispatcher="flex", overlap_ep_comm=True)
    assert 0 < ep_sm_share(par, hw) < 1
    with pytest.raises(PrismError, match="hardware.device.sms=20: parallel.moe_dispatcher=flex's kernels hold 20"):
        ep_sm_share(par, replace(hw, device=replace(hw.device, sms=20)))


def test_a_dense_row_with_expert_columns_is_refused_not_read_as_dense():
    row = dict(model="llama-x", layers=32, hidden=4096, heads=32, seq_len=4096, gbs=64, tp=1, pp=1, dp=8, gpu="H100",
               num_gpus=8, num_experts="", top_k="2", expert_ffn="", shared_experts="", moe_layer_freq="")
    blank_experts = [row | {"top_k": value} for value in ("", "0", "nan")]
    out = predict_table([row, row | {"top_k": "", "expert_ffn": "1024"}, *blank_experts], draws=20)
    assert out.pred_status[0].startswith("top_k='2': an expert setting on a row without num_experts")  # was dense
    assert out.pred_status[1].startswith("expert_ffn='1024'")
    assert list(out.pred_status[2:]) == ["ok"] * 3
