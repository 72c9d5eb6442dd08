"""Repeats that stalled while sampled (issue 55): another process held the CPU, a shape's
slowest repeat is 100x its median, and that stall became the models' upper tail without a
word. prism train counts such shapes, says so loudly and in the manifest, and refuses a store
where many are, unless told allow_disturbed=true."""
import json

import pytest

from predictor.app.cli import main
from predictor.data.store import read_samples
from predictor.latency import artifacts
from predictor.latency.artifacts import DISTURBED_SHARE, DISTURBED_SPREAD, disturbed_shapes, shape_groups


@pytest.fixture(scope="module")
def local_cpu():
    return read_samples("samples/local-cpu")


def test_the_project_s_own_cpu_store_is_mostly_undisturbed(local_cpu):
    counted = disturbed_shapes(local_cpu)
    assert not any(key.split("/")[0] in ("all_reduce", "send_recv") for key in counted["by_op"])
    assert counted["threshold"] == DISTURBED_SPREAD and counted["shapes"] > 1000
    assert 0 < counted["disturbed"] <= DISTURBED_SHARE * counted["shapes"]


def test_a_stalled_repeat_is_counted_per_op(local_cpu):
    gemm = local_cpu[local_cpu.op == "gemm"].copy()
    before = disturbed_shapes(gemm)["disturbed"]
    ids = shape_groups("gemm", gemm)
    first = gemm.index[ids == ids[0]][0]
    gemm.loc[first, "latency_us"] *= 116  # the stall the issue saw
    after = disturbed_shapes(gemm)
    assert after["disturbed"] == before + 1 and sum(after["by_op"].values()) == after["disturbed"]


def test_train_warns_records_and_refuses_a_disturbed_store(tmp_path, capsys, monkeypatch):
    root = tmp_path / "models"
    monkeypatch.setattr(artifacts, "DISTURBED_SHARE", 0.0005)  # local-cpu's 0.09% of shapes: "many" here
    monkeypatch.setattr(artifacts, "DISTURBED_REFUSED", 1)
    assert main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={root}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "allow_disturbed=true" in err and "idle machine" in err, err
    assert not (root / "local-cpu").exists()
    assert main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={root}",
                 "allow_disturbed=true"]) == 0
    out = capsys.readouterr().out
    assert "WARNING:" in out and "shapes were disturbed while sampled" in out
    manifest = json.loads((root / "local-cpu" / "manifest.json").read_text())
    assert manifest["disturbed"]["disturbed"] > 0 and manifest["disturbed"]["by_op"]


def test_only_the_sampler_s_own_repeats_are_judged(local_cpu, monkeypatch):
    """A profiler trace's timings of one op inside real steps are no repeats of one call: a
    store of them (prism import-trace) was refused as disturbed."""
    from predictor.core.errors import PrismError
    from predictor.core.profiles import load_hardware
    from predictor.latency.regressor import DEFAULT_QUANTILES
    rc = artifacts.RegressorConfig("xgboost", list(DEFAULT_QUANTILES))
    gemm = local_cpu[local_cpu.op == "gemm"].copy()
    ids = shape_groups("gemm", gemm)
    for group in set(ids[:200]):
        gemm.loc[gemm.index[ids == group][0], "latency_us"] *= 116

    def fit(*args):
        raise RuntimeError("fit reached")
    monkeypatch.setattr(artifacts, "fit_operator_model", fit)
    with pytest.raises(PrismError, match="allow_disturbed=true"):
        artifacts.train(gemm, load_hardware("local-cpu"), rc, n_jobs=1)
    with pytest.raises(RuntimeError, match="fit reached"):
        artifacts.train(gemm.assign(origin="trace"), load_hardware("local-cpu"), rc, n_jobs=1)
