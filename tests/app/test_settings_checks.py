"""Settings a new user gets wrong (added or deleted keys, numbers for switches, NaN budgets,
absurd token budgets, folders for figures) and samples with impossible latencies: one line
naming the field, exit code 2, never a traceback, a silent default or a figure written
somewhere else than asked."""
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor.analyses.variability import time_to_train
from predictor.app.cli import main
from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT, load_hardware, section
from predictor.core.specs import SamplingConfig

JOB = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_switches_still_take_true_false_and_0_1(capsys):
    for value in ("true", "false", "0", "1"):
        assert main([*JOB, f"parallel.overlap_grad_reduce={value}", "--json"]) == 0
    capsys.readouterr()


def test_many_interruptions_are_counted_without_running_out_of_memory():
    """A high interruption rate (or a long run on many GPUs) made one array entry per
    interruption: 34 GiB for 1000 interruptions per GPU-day on 8 GPUs, then a MemoryError."""
    hw = load_hardware("h100-sxm")
    busy = replace(hw, variability=replace(hw.variability, interruptions_per_gpu_day=200.0))
    out = time_to_train(np.full(10, 3.2), 3.8e6, busy, gpus=8, runs=4000, seed=0)  # about 1e23 interruptions
    assert all(np.isfinite(v) for part in out.values() for v in part.values())
    assert out["interruptions"]["p50"] > 1e20 and out["days"]["p50"] > out["productive_days"]["p50"]
    assert 0 < out["goodput"]["p50"] < 0.01
    for rate in (1000.0, 1e12):  # past any progress (the second past numpy's Poisson range): no figure, not a cap
        busy = replace(hw, variability=replace(hw.variability, interruptions_per_gpu_day=rate))
        out = time_to_train(np.full(10, 3.2), 3.8e6, busy, gpus=8, runs=4000, seed=0)
        assert out["days"] is None and out["interruptions"] is None and out["goodput"]["p50"] == 0
    few = time_to_train(np.full(10, 3.2), 3.8e6, hw, gpus=8, runs=4000, seed=0)  # the usual case: unchanged path
    assert few["interruptions"]["p50"] < 10 and few["goodput"]["p50"] > 0.9


def test_a_non_finite_sampling_budget_is_refused():
    """NaN passed the plan's ``budget_s < 1`` check and sampled without end."""
    for key in ("budget_s", "max_call_ms"):
        with pytest.raises(PrismError) as err:
            section(load_config([f"sampling.{key}=nan"]), "sampling", SamplingConfig)
        assert err.value.field == f"sampling.{key}"


def test_predict_batch_names_an_unknown_output(tmp_path, capsys):
    table = REPO_ROOT / "data" / "e2e" / "e2e_training_visible.csv"
    assert main(["predict-batch", str(table), f"out={tmp_path / 'p.csv'}", "output=xml"]) == 2
    assert "output=xml: choose table or json" in _one_line(capsys)
    assert not (tmp_path / "p.csv").exists()


def test_a_profiler_cost_that_is_no_number_is_named_as_written(tmp_path, capsys):
    trace = REPO_ROOT / "measurements" / "h100-gpt3-1.3b-step-trace.json.gz"
    assert main(["import-trace", str(trace), f"out={tmp_path}", "profiler_cost_us=abc"]) == 2
    assert "profiler_cost_us=abc:" in _one_line(capsys)  # was 'profiler_cost_us=nan'


def test_a_figure_path_that_names_a_folder_is_refused(tmp_path, capsys):
    """plot=DIR wrote DIR.png beside the folder."""
    for value in (str(tmp_path), f"{tmp_path / 'new'}/"):
        assert main(["predict", "model=tiny", "hardware=local-cpu", f"plot={value}"]) == 2
        assert "names a folder; give a file in it" in _one_line(capsys)
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}*.png")) and not list(tmp_path.iterdir())


@pytest.mark.parametrize("latency", [np.inf, np.nan, -1.0])
def test_evaluate_refuses_latencies_that_are_no_measurement(tmp_path, latency, capsys):
    """Infinite latencies printed NaN and inf scores with exit 0; NaN and negative ones were
    dropped and the store then read as holding no op with a model."""
    store = REPO_ROOT / "samples" / "local-cpu"
    frame = pd.read_parquet(next(store.glob("*.parquet")))
    frame = frame[frame.op == "all_reduce"].head(20).copy()
    frame["latency_us"] = latency
    frame.to_parquet(tmp_path / "bad.parquet")
    assert main(["evaluate", f"samples={tmp_path / 'bad.parquet'}", "hardware=local-cpu"]) == 2
    assert "latency_us is empty, non-positive or infinite in 20 row(s)" in _one_line(capsys)


@pytest.mark.parametrize("scale, says", [
    (1e-3, "puts their median at"),  # ms written as µs: trained into 182 TFLOP/s on 2 cores, without a word
    (1e9, "above 1e+09 µs"),  # ns written as µs: a 1024-cubed GEMM predicted at 1.2e13 µs
])
def test_train_refuses_latencies_in_another_unit(tmp_path, scale, says, capsys):
    store = REPO_ROOT / "samples" / "local-cpu"
    frame = pd.concat(pd.read_parquet(f) for f in store.glob("*.parquet"))
    frame = frame[frame.op == "gemm"].head(40)
    frame.assign(latency_us=frame.latency_us * scale).to_parquet(tmp_path / "units.parquet")
    args = [f"samples={tmp_path / 'units.parquet'}", "hardware=local-cpu"]
    assert main(["train", *args, f"models_dir={tmp_path / 'models'}"]) == 2
    assert says in _one_line(capsys) and not (tmp_path / "models" / "local-cpu").exists()
    assert main(["evaluate", *args]) == 2
    assert says in _one_line(capsys)


def test_a_full_disk_is_one_line_naming_where_and_leaves_no_lock(tmp_path, monkeypatch, capsys):
    """A write that ran out of room was an OSError traceback (no JSON on stdout), and the
    predict-batch lock it left empty stopped every later run until deleted by hand."""
    import errno
    import os
    import time

    from predictor.core.files import held_lock
    from predictor.latency.artifacts import ModelSet

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ModelSet, "save", full)
    out = tmp_path / "models"
    assert main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={out}", "--json"]) == 2
    captured = capsys.readouterr()
    assert f"models_dir={out}: No space left on device while writing; free space there" in captured.err
    assert json.loads(captured.out)["error"].startswith(f"models_dir={out}: No space left on device")
    lock = tmp_path / ".out.csv.lock"
    lock.touch()  # as the full disk left it: created, never filled
    with pytest.raises(PrismError, match="busy"):  # a writer that has just created it
        with held_lock(lock, lambda holder: "busy", "out"):
            pass
    os.utime(lock, (time.time() - 60, time.time() - 60))
    with held_lock(lock, lambda holder: "busy", "out") as note:
        assert "took over an empty writer lock" in note
    assert not lock.exists()


def test_a_bad_plotting_backend_or_an_ascii_terminal_is_no_traceback(tmp_path):
    """MPLBACKEND=bogus failed matplotlib's import after the prediction, which was lost; a
    terminal that cannot print · failed predict's table with a UnicodeEncodeError."""
    import os
    import subprocess
    import sys
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_ALL", "PYTHONUTF8")}
    job = [sys.executable, "-m", "predictor.app.cli", "predict", "model=gpt3-13b", "hardware=a100-sxm4-80gb",
           "gpus=64", "parallel.tp=8"]
    done = subprocess.run([*job, f"plot={tmp_path / 'step.png'}"], env=base | {"MPLBACKEND": "bogus"},
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 2 and done.stderr.startswith("prism predict: error: MPLBACKEND=bogus: matplotlib "
                                                           "refuses it"), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "step.png").exists()
    done = subprocess.run(job, env=base | {"LC_ALL": "C", "PYTHONUTF8": "0"}, capture_output=True, cwd=REPO_ROOT)
    assert done.returncode == 0 and b"dp=8 tp=8" in done.stdout, done.stderr
