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
