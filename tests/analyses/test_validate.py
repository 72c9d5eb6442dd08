"""`prism validate`: the scores, and the verb on a measurement file."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from predictor.analyses.validate import score


def test_a_distribution_scored_against_itself_is_perfect():
    rng = np.random.default_rng(0)
    draws = np.exp(rng.normal(np.log(0.1), 0.05, 20000))
    s = score("x", draws, draws[:4000])
    assert s.median_ape < 0.005 and s.p95_ape < 0.01 and s.ks < 0.02
    assert s.coverage_80 == pytest.approx(0.8, abs=0.02)
    assert s.p95_p50_pred == pytest.approx(s.p95_p50_meas, rel=0.01)


def test_a_shifted_prediction_shows_in_every_score():
    rng = np.random.default_rng(1)
    measured = np.exp(rng.normal(np.log(0.1), 0.02, 50))
    s = score("x", measured.mean() * 1.2 * np.exp(rng.normal(0, 0.02, 4000)), measured)
    assert s.median_ape == pytest.approx(0.2, abs=0.02)
    assert s.ks > 0.9 and s.coverage_80 < 0.05


def test_validate_cli_prints_one_json_object_per_layout(tmp_path, cpu_env):
    import json
    import subprocess
    import sys

    from predictor.data.measurements import read_measurements, write_measurements
    from tests.conftest import ROOT
    frame = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    two = frame[frame.layout_id.isin(frame.layout_id.unique()[:2])]
    path = write_measurements(two, tmp_path / "m.parquet")
    out = subprocess.run([sys.executable, "-m", "predictor.app.cli", "validate", f"measured={path}",
                          "hardware=local-cpu", f"out={tmp_path / 'cdf.png'}", "--json"],
                         capture_output=True, text=True, env=cpu_env, timeout=120)
    assert out.returncode == 0, out.stderr
    scores = json.loads(out.stdout)
    assert [s["layout_id"] for s in scores] == list(two.layout_id.unique())
    for s in scores:
        assert {"median_ape", "p95_ape", "ks", "coverage_80"} <= set(s)
        assert 0 <= s["ks"] <= 1 and 0 <= s["coverage_80"] <= 1 and s["median_ape"] >= 0
    assert (tmp_path / "cdf.png").stat().st_size > 10_000


def test_validate_names_a_missing_file_and_a_foreign_hardware(tmp_path, cpu_env):
    import subprocess
    import sys

    from tests.conftest import ROOT
    run = lambda *a: subprocess.run([sys.executable, "-m", "predictor.app.cli", "validate", *a],  # noqa: E731
                                    capture_output=True, text=True, env=cpu_env, timeout=120)
    missing = run(f"measured={tmp_path / 'none.parquet'}", "hardware=local-cpu")
    assert missing.returncode == 2 and "measured=" in missing.stderr and "prism measure" in missing.stderr
    foreign = run(f"measured={ROOT / 'measurements' / 'local-cpu-suite.parquet'}", "hardware=a100-sxm4-80gb")
    assert foreign.returncode == 2 and "give hardware=local-cpu" in foreign.stderr


@pytest.mark.slow
def test_validate_published_reports_coverage_and_draws_reliability(tmp_path, reference_data, cpu_env):
    """prism validate published=TABLE: coverage of the predictive intervals on a table of runs."""
    table = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv")
    small = table[table.set_id.isin(["narayanan2021_t1", "neusight_dist"])]
    path = tmp_path / "runs.csv"
    small.to_csv(path, index=False)
    png = tmp_path / "rel.png"
    out = subprocess.run([sys.executable, "-m", "predictor.app.cli", "validate", f"published={path}", f"plot={png}",
                          "--json"], capture_output=True, text=True, env=cpu_env, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    overall = result["summary"][0]
    assert overall["group"] == "all" and overall["runs"] == len(small)
    assert all(0 <= overall[f"cover{c}"] <= 1 for c in (50, 80, 90)) and overall["width90"] > 0
    assert [r["nominal"] for r in result["reliability"]][0] == pytest.approx(0.1) and png.stat().st_size > 0
    bad = tmp_path / "no_steps.csv"
    small.drop(columns=["iter_time_s", "iter_time_s_derived", "tflops_per_gpu"]).to_csv(bad, index=False)
    out = subprocess.run([sys.executable, "-m", "predictor.app.cli", "validate", f"published={bad}"],
                         capture_output=True, text=True, env=cpu_env, timeout=300)
    assert out.returncode == 2 and "published" in out.stderr and "Traceback" not in out.stderr


def test_a_lent_gpu_s_layouts_are_predicted_as_the_reference_workload_runs_them():
    """The reference workload is eager PyTorch under torch.autocast on CUDA: its measured
    layouts decompose in the eager family, with the fp32 weights' casts and the gradients'
    accumulation (measurements/h200-suite-B: four layouts of 4 micro-batches on an H200)."""
    from predictor.core.profiles import load_hardware
    from predictor.data.measurements import measured_workloads, read_measurements
    from tests.conftest import ROOT

    works = measured_workloads(read_measurements(ROOT / "measurements" / "h200-suite-B.parquet"), load_hardware("h200"))
    assert len(works) == 4
    for _, work, steps in works:
        ops = {c.op for st in work.stages for c in st.forward + st.backward + st.step}
        assert {"master_weights", "grad_accumulate"} <= ops and len(steps) == 15


SUITE = "tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=none 1f1b"


@pytest.fixture
def one_layout():
    """The rows of one layout of a shipped measurement file: one rank, 30 steps."""
    from predictor.data.measurements import read_measurements
    from tests.conftest import ROOT
    frame = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    return frame[frame.layout_id == SUITE].reset_index(drop=True)


def test_a_layout_whose_settings_contradict_its_id_or_its_ranks_is_refused(one_layout):
    """parallel_json tp=2 over the steps of one rank was predicted silently as a tp=2 job."""
    from predictor.analyses.validate import validate
    from predictor.core.errors import PrismError
    from predictor.core.profiles import load_hardware
    from predictor.data.measurements import read_measurements
    from tests.conftest import ROOT
    hw = load_hardware("local-cpu")
    tp2 = one_layout.assign(parallel_json=json.dumps(json.loads(one_layout.parallel_json[0]) | {"tp": 2}))
    with pytest.raises(PrismError, match=f"layout '{SUITE}': its parallel_json says tp=2 but its layout_id says "
                                         f"tp1") as exc:
        validate(tp2, hw, None)
    assert exc.value.field == "measured"
    renamed = tp2.assign(layout_id=SUITE.replace("tp1", "tp2"))
    with pytest.raises(PrismError, match=r"rows hold rank\(s\) 0 but its parallel_json \(dp=1 tp=2 pp=1 cp=1\) "
                                         r"needs ranks 0 to 1"):
        validate(renamed, hw, None)
    frame = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    dp2 = frame[(frame.layout_id == "tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b") & (frame["rank"] == 0)]
    with pytest.raises(PrismError, match="rows hold rank"):  # a rank's rows lost
        validate(dp2, hw, None)


def test_distribution_scores_of_few_steps_and_a_job_the_memory_cannot_hold_are_noted(one_layout):
    """llama3-8b over one CPU rank's step scored a median error of 19,195,445% with no word,
    and one step a KS distance and a coverage as if it were a distribution."""
    from dataclasses import asdict

    from predictor.analyses.validate import validate
    from predictor.core.profiles import load_hardware, load_model
    hw = load_hardware("local-cpu")
    assert validate(one_layout, hw, None, draws=200).notes == []  # 30 steps of tiny
    few = one_layout[one_layout.step < 3]
    scored = validate(few, hw, None, draws=200)
    (only,) = scored.notes
    assert only == (f"layout '{SUITE}': 3 step(s) measured: ks and coverage_80 compare distributions and need at "
                    f"least 5 steps, so none is given; measure more (measure.steps=30)")
    (s,) = scored.scores  # a KS of 1.0 and a coverage of 0% read as the worst scores, not as none
    assert s.ks is None and s.coverage_80 is None and s.median_ape >= 0
    assert scored.summary()["ks_median"] is None and scored.summary()["coverage_80_median"] is None
    big = few.assign(model_json=json.dumps(asdict(load_model("llama3-8b")) | {"seq_length": 128}))
    result = validate(big, hw, None, draws=200)
    assert any(n.startswith(f"layout '{SUITE}': DOES NOT FIT: ") and "of local-cpu's 24 GiB" in n
               for n in result.notes)
    assert len(result.scores[0].to_dict()["notes"]) == 2  # in prism validate --json too
    # four steps of 1e9 s among tiny's ~0.04 s were scored (p95/p50 22,357,620,968) without a word
    absurd = one_layout.assign(step_time_s=one_layout.step_time_s.where(one_layout.step >= 4, 1e9))
    (far,) = validate(absurd, hw, None, draws=200).notes
    assert far.startswith(f"layout '{SUITE}': 4 step(s) over 10x the median step (the longest 1e+09 s") \
        and "check the file's step_time_s" in far


def test_a_hardware_with_no_profile_is_not_suggested(one_layout):
    from predictor.core.errors import PrismError
    from predictor.core.profiles import load_hardware
    from predictor.data.measurements import measured_on
    with pytest.raises(PrismError, match="no-such-gpu has no profile in conf/hardware .*add "
                                         "conf/hardware/no-such-gpu.yaml") as exc:
        measured_on(one_layout.assign(hardware="no-such-gpu"), load_hardware("local-cpu"))
    assert exc.value.field == "hardware" and "give hardware=no-such-gpu" not in str(exc.value)
    with pytest.raises(PrismError, match="the file was measured on h200; give hardware=h200$"):
        measured_on(one_layout.assign(hardware="h200"), load_hardware("local-cpu"))


def test_a_layout_resting_mostly_on_priors_is_noted(one_layout):
    """A model set of GEMMs alone validated and calibrated without a word of what the scores rest on."""
    from predictor.analyses.validate import validate
    from predictor.core.profiles import load_hardware
    from predictor.core.specs import RegressorConfig
    from predictor.data.store import read_samples
    from predictor.latency.artifacts import train
    from tests.conftest import ROOT
    hw = load_hardware("local-cpu")
    gemms = read_samples(ROOT / "samples" / "local-cpu", ops=["gemm"])
    fast = {"n_estimators": 5, "median_rounds": 5, "spread_estimators": 5}
    models = train(gemms, hw, RegressorConfig("xgboost", [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95], fast), n_jobs=1)
    notes = validate(one_layout, hw, models, draws=200).notes
    (note,) = [n for n in notes if "rests on priors" in n]
    assert "of its operator time rests on priors, not on samples (" in note and "sample those ops" in note
