"""The notes and checks a new user's probe of predict, compare, search and calibrate found
missing (probe 7): settings checked before any work, notes where a setting does nothing, model
sets that train refuses to replace, predict-batch reruns after a retrain or a fix."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from predictor.analyses.batch import predict_batch
from predictor.analyses.compare import compare
from predictor.analyses.predict import predict, steps_to_train
from predictor.analyses.variability import ops_above_noise
from predictor.app.cli import main, split_hardware
from predictor.app.render import _percent
from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT, load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.data.measurements import read_measurements, write_measurements
from predictor.latency.artifacts import check_replaceable, manifest_text, models_dir


def _error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"prism {verb}: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("verb", ["calibrate", "validate"])
@pytest.mark.parametrize("seed", ["abc", "true", "1.5", "-1"])
def test_calibrate_and_validate_check_the_seed_before_any_work(tmp_path, capsys, verb, seed):
    """calibrate fitted for 20 s, then crashed on int('abc'); seed=true was stored as 1."""
    measured = REPO_ROOT / "measurements" / "local-cpu-suite-GG.parquet"
    assert main([verb, f"measured={measured}", "hardware=local-cpu", f"models_dir={tmp_path}", f"seed={seed}"]) == 2
    assert "seed=" in _error(capsys, verb)


def test_context_parallel_offers_only_degrees_the_gpus_hold(capsys):
    job = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.tp=8"]
    assert main([*job, "parallel.cp=2", "model.seq_length=8194"]) == 2  # 17 and 241 split 8194 but not 64 GPUs
    assert "pick cp=1 (no context parallelism)" in _error(capsys, "predict")
    # 8190 tokens cut into 2·cp chunks for cp = 3, 5, 7, 9, 13, ...; 96 GPUs at tp=8 hold cp=3 of them
    assert main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=96", "parallel.tp=8", "parallel.cp=2",
                 "model.seq_length=8190"]) == 2
    assert "pick cp among 3 (or 1, none)" in _error(capsys, "predict")


@pytest.mark.parametrize("level, text", [(0.95, "95%"), (0.995, "99.5%"), (0.004, "0.4%"), (0.9999, "99.99%"),
                                         (1 / 3, "33.3%")])
def test_a_confidence_level_is_never_rounded_to_certainty(level, text):
    assert _percent(level) == text


def test_a_run_takes_whole_steps():
    assert steps_to_train(1, 4096) == 1 and steps_to_train(8192, 4096) == 2 and steps_to_train(8193, 4096) == 3
    hw = load_hardware("h100-sxm")
    p = predict(load_model("llama3-8b"), hw, ParallelConfig(tp=8), draws=50, train_tokens=1)
    assert p.time_to_train_days["p50"] * 86400 >= 0.5 * p.step_time_s["p50"]  # one step, less any doubt below it


def test_sharding_with_one_replica_is_noted():
    p = predict(load_model("llama3-8b"), load_hardware("h100-sxm"), ParallelConfig(tp=8, sharding="zero3"), draws=50)
    assert any("parallel.sharding=zero3: nothing to shard at dp·cp=1" in n for n in p.notes)


def test_compare_over_every_profile_leaves_out_those_whose_nodes_cannot_hold_the_job(capsys):
    c = compare(load_model("llama3-8b"), None, ParallelConfig(tp=4), 12, draws=50, leave_out=True)
    names = [r.hardware for r in c.results]
    assert "gb200-nvl72" in names and "h100-sxm" not in names
    assert any(n.startswith("left out h100-sxm: 12 GPUs are no whole number") for n in c.notes)
    assert main(["compare", "model=llama3-8b", "gpus=12", "parallel.tp=4", "hardware=[h100-sxm,gh200]"]) == 2
    assert "gpus=12: not a whole number of nodes" in _error(capsys, "compare")  # profiles the user named


def test_compare_says_a_profile_named_twice_is_compared_once(capsys):
    split_hardware(["hardware=[b200,h100-sxm,h100-sxm]", "hardware=b200"])
    assert "h100-sxm, b200 named more than once, compared once" in capsys.readouterr().err


def test_op_shares_of_the_variance_are_shown_above_the_draws_noise_only():
    """Ops whose holds moved 0.07% of the variance were shown as 73% and 26%, and reordered
    with the seed."""
    ops = [{"name": "gemm/fwd", "share": 0.73, "variance_drop": 0.0025},
           {"name": "all_reduce/step", "share": 0.26, "variance_drop": 0.0009},
           {"name": "gemm/bwd", "share": 0.0, "variance_drop": -0.0030}]
    assert ops_above_noise(ops, 10) == ([], pytest.approx(0.0030))
    ops[0]["variance_drop"] = 0.6
    shown, _ = ops_above_noise(ops, 10)
    assert [o["name"] for o in shown] == ["gemm/fwd"]


def _set_copy(tmp_path, hw: str = "local-cpu") -> Path:
    root = tmp_path / "models"
    shutil.copytree(models_dir() / hw, root / hw)
    return root


def test_train_refuses_to_replace_a_set_that_holds_files_no_set_writes(tmp_path, capsys):
    """A sample run written into a set's folder was deleted by the next train there."""
    root = _set_copy(tmp_path)
    run = root / "local-cpu" / "local-cpu-20261128T080019-001c6f.parquet"
    shutil.copy(REPO_ROOT / "measurements" / "local-cpu-suite-GG.parquet", run)
    assert main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={root}"]) == 2
    assert f"{run.name}, which no set writes" in _error(capsys, "train") and run.is_file()


def test_a_set_s_own_folder_is_refused_as_models_dir_and_as_a_sample_store(tmp_path, capsys):
    root = _set_copy(tmp_path)
    set_folder = root / "local-cpu"
    for verb in (["train", "samples=samples/local-cpu"], ["predict", "model=tiny"]):
        assert main([*verb, "hardware=local-cpu", f"models_dir={set_folder}"]) == 2
        assert f"give models_dir={root}" in _error(capsys, verb[0])
    assert not (set_folder / "local-cpu").exists()
    assert main(["sample", "hardware=local-cpu", "sampling.budget_s=5", f"output_dir={set_folder}"]) == 2
    assert "a saved model set's folder" in _error(capsys, "sample")


def test_predict_batch_does_not_resume_rows_of_models_retrained_in_the_same_folder(tmp_path):
    rows = pd.read_csv(REPO_ROOT / "data" / "e2e" / "e2e_training_visible.csv")
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    rows[rows.gpu.str.startswith("A100")].head(2).to_csv(src, index=False)
    root = _set_copy(tmp_path, "a100-sxm4-80gb")
    assert predict_batch(src, out, draws=20, models_root=root).predicted == 2
    assert predict_batch(src, out, draws=20, models_root=root).resumed == 2
    manifest = root / "a100-sxm4-80gb" / "manifest.json"  # retrained: another manifest in the same place
    manifest.write_text(manifest.read_text().replace('"created": "', '"created": "2', 1))
    with pytest.raises(PrismError, match="models' fingerprint"):
        predict_batch(src, out, draws=20, models_root=root)


def test_predict_batch_predicts_again_the_rows_that_failed_once_their_cause_is_fixed(tmp_path):
    """A truncated model file failed every row, and the rerun after restoring it resumed the failures."""
    rows = pd.read_csv(REPO_ROOT / "data" / "e2e" / "e2e_training_visible.csv")
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    rows[rows.gpu.str.startswith("A100")].head(2).to_csv(src, index=False)
    root = _set_copy(tmp_path, "a100-sxm4-80gb")
    model = next((root / "a100-sxm4-80gb").glob("gemm__fwd*"))
    whole = model.read_bytes()
    model.write_bytes(whole[: len(whole) // 2])
    first = predict_batch(src, out, draws=20, models_root=root)
    assert (first.predicted, first.failed) == (0, 2)
    model.write_bytes(whole)
    again = predict_batch(src, out, draws=20, models_root=root)
    assert (again.predicted, again.failed, again.resumed) == (2, 0, 0)
    assert predict_batch(src, out, draws=20, models_root=root).resumed == 2
    assert len(pd.read_csv(out)) == 2


def test_evaluate_names_the_ops_its_models_cannot_score(tmp_path, capsys):
    root = tmp_path / "models"
    shutil.copytree(models_dir() / "local-cpu", root / "local-cpu")
    manifest = root / "local-cpu" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["models"] = {k: v for k, v in doc["models"].items() if k == "gemm/fwd"}
    manifest.write_text(manifest_text(doc))  # a set of one model, as prism train writes it (its checksum)
    assert main(["evaluate", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={root}"]) == 0
    out = capsys.readouterr().out
    assert "note: not scored, no model of them in" in out and "gemm/bwd (" in out


def test_a_set_s_own_files_do_not_stop_its_replacement(tmp_path):
    root = _set_copy(tmp_path)
    (root / "local-cpu" / "variability.json").write_text("{}")  # train writes it with fit_variability=true
    (root / "local-cpu" / ".manifest.json.1a2b3c4d.tmp").write_text("")  # a write cut short
    check_replaceable(root / "local-cpu")


def test_validate_notes_steps_measured_at_another_thread_count(tmp_path, capsys):
    frame = read_measurements(REPO_ROOT / "measurements" / "local-cpu-suite-GG.parquet")
    one = frame[frame.layout_id == frame.layout_id.iloc[0]]
    path = write_measurements(one.assign(threads_per_rank=2), tmp_path / "thr2.parquet")
    assert main(["validate", f"measured={path}", "hardware=local-cpu", f"out={tmp_path / 'v.png'}"]) == 0
    assert "measured at 2 thread(s) per rank, the models sampled at 1" in capsys.readouterr().out
    _replaced = pytest.importorskip("sampling.measure")._replaced  # torch: the measuring extra
    assert _replaced(path, one.layout_id.iloc[0]).startswith(f"{one.step.nunique()} steps of this layout measured")
    assert _replaced(path, "another layout") is None and _replaced(tmp_path / "none.parquet", "x") is None


def test_a_collective_across_hosts_takes_no_less_than_its_measured_part_on_one():
    """tiny at gpus=4 on local-cpu (two hosts) priced its all-reduce by the rough network prior,
    under the measured one-host time, and stepped faster than at gpus=2."""
    from predictor.core.ops import Call
    from predictor.latency.artifacts import trained_models
    from predictor.latency.lookup import call_quantiles
    hw = load_hardware("local-cpu")
    models = trained_models(hw, None)
    one = Call.of("all_reduce", "step", {"message_bytes": 1 << 20, "group_size": 2}, topology=(2, 1))
    two = Call.of("all_reduce", "step", {"message_bytes": 1 << 20, "group_size": 4}, topology=(2, 2))
    q, evidence = call_quantiles([one, two], models, hw, "float32")
    assert (q[1] >= q[0]).all() and evidence[1].text.startswith("network prior")


def test_search_columns_grow_with_their_widest_cell():
    """At 16,777,216 GPUs the rank and dp columns ran together and tokens/s outgrew its header."""
    from predictor.app.render import _layout_table
    row = {"rank": 1, "dp": 8388608, "tp": 1, "pp": 1, "cp": 2, "vpp": 1, "mbs": 1, "recompute": "none",
           "sharding": "distributed_optimizer", "p50_s": 3.601, "p95_s": 3.653, "risk": 1.014, "memory_gib": 65.9,
           "tokens_per_s": 152658622031.0, "mfu": 0.473, "median_step_80_s": (3.601, 6.613), "composed": True}
    head, line = _layout_table([row], "p50", False)
    assert head.split()[:2] == ["rank", "dp"] and line.split()[:2] == ["1", "8388608"]
    assert head.index("tokens/s") + len("tokens/s") == line.index("152,658,622,031") + len("152,658,622,031")


def test_a_device_given_as_a_store_is_named_as_such(capsys):
    assert main(["samples", "/dev/null"]) == 2
    assert "/dev/null is no file or folder" in _error(capsys, "samples")
