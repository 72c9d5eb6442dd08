"""Every writing verb stopped at random points (issue 55): Ctrl-C, SIGTERM or SIGKILL at a
seeded random moment, then the same command again. The store, model folder, measurement file
or table holds each row once, loses nothing already written, and the rerun ends as an
uninterrupted run does. (tests/sampling/ holds the interrupts at chosen points: after a
sample run's first part, a cluster rank killed, a measurement's torchrun stopped.)"""
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from predictor.data.store import read_samples

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PRISM = [sys.executable, "-m", "predictor.app.cli"]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _stopped(argv: list[str], after_s: float, sig: int) -> subprocess.CompletedProcess:
    """``argv`` run and sent ``sig`` after ``after_s`` seconds (if still running)."""
    run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        run.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        run.send_signal(sig)
    out, err = run.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, run.returncode, out, err)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)


def _moments(seed: int, longest_s: float, n: int = 3):
    rng = random.Random(seed)
    return [(rng.uniform(0.2, longest_s), rng.choice(SIGNALS)) for _ in range(n)]


@pytest.mark.parametrize("verb, source", [("import-microbench", "data/microbench"),
                                          ("import-ett", "data/ett/Perlmutter")])
def test_an_importer_stopped_anywhere_then_rerun_holds_each_row_once(verb, source, tmp_path):
    whole = tmp_path / "whole"
    assert _run([*PRISM, verb, source, f"out={whole}"]).returncode == 0
    want = read_samples(whole)
    for i, (after, sig) in enumerate(_moments(hash(verb) % 1000, 1.5)):
        out = tmp_path / f"store{i}"
        stopped = _stopped([*PRISM, verb, source, f"out={out}"], after, sig)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        again = _run([*PRISM, verb, source, f"out={out}"])
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
        got = read_samples(out)
        assert len(got) == len(want), (after, sig)  # nothing twice, nothing lost


def test_train_stopped_anywhere_leaves_the_old_set_or_none_and_the_rerun_finishes(tmp_path):
    argv = [*PRISM, "train", "samples=samples/local-cpu", "hardware=local-cpu"]
    for i, (after, sig) in enumerate(_moments(7, 4.0)):
        models = tmp_path / f"models{i}"
        stopped = _stopped([*argv, f"models_dir={models}"], after, sig)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        predicted = _run([*PRISM, "predict", "model=tiny", "hardware=local-cpu", f"models_dir={models}"])
        # a whole set, or none with one line saying so: never a half-written set read as whole
        assert predicted.returncode in (0, 2) and "Traceback" not in predicted.stderr, predicted.stderr
        again = _run([*argv, f"models_dir={models}"])
        assert again.returncode == 0, again.stderr
        assert _run([*PRISM, "predict", "model=tiny", "hardware=local-cpu", f"models_dir={models}"]).returncode == 0


def test_predict_batch_stopped_anywhere_then_rerun_writes_the_uninterrupted_table(tmp_path):
    table = ROOT / "data" / "e2e" / "e2e_training_visible.csv"
    whole = tmp_path / "whole.csv"
    assert _run([*PRISM, "predict-batch", str(table), f"out={whole}", "draws=100"]).returncode == 0
    # every signal while the worker pool starts (the first second) and while it predicts
    moments = [(t, sig) for t in (0.3, 1.0) for sig in SIGNALS] + _moments(11, 3.0)
    for i, (after, sig) in enumerate(moments):
        out = tmp_path / f"out{i}.csv"
        stopped = _stopped([*PRISM, "predict-batch", str(table), f"out={out}", "draws=100"], after, sig)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        if out.exists():
            assert pd.read_csv(out).pred_key.is_unique
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True) if sig == signal.SIGKILL else None
        again = _run([*PRISM, "predict-batch", str(table), f"out={out}", "draws=100"])
        assert again.returncode == 0, again.stderr
        assert out.read_bytes() == whole.read_bytes(), (after, sig)


#: A small sampling plan (tests/sampling/test_sample_cli.py's, on two compute ops): about 20 s.
SAMPLE = ["sample", "hardware=local-cpu", "sampling=quick", "sampling.budget_s=120", "sampling.threads=1",
          "sampling.repeats=10", "sampling.shapes_per_op=4", "sampling.targets=[tiny]",
          "sampling.micro_batch_sizes=[1]", "sampling.tp_degrees=[1]", "sampling.flush_every_s=0",
          "sampling.co_run_share=0", "sampling.ops=[gemm,layernorm]"]
SHAPE = ["op", "pass", "m", "n", "k", "tokens", "hidden"]


def test_sample_stopped_anywhere_then_rerun_times_each_repeat_once(tmp_path):
    for i, (after, sig) in enumerate(_moments(3, 12.0, n=2)):
        out = tmp_path / f"store{i}"
        stopped = _stopped([*PRISM, *SAMPLE, f"output_dir={out}"], after, sig)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        again = _run([*PRISM, *SAMPLE, f"output_dir={out}"])
        assert again.returncode == 0, again.stderr
        df = read_samples(out)
        per_task = df.groupby(SHAPE, dropna=False).repeat.agg(sorted).map(tuple)
        assert (per_task == tuple(range(10))).all(), (after, sig)  # every repeat once: none twice, none lost


def test_measure_stopped_anywhere_leaves_the_file_whole_and_the_rerun_adds_the_layout_once(tmp_path):
    out = tmp_path / "m.parquet"
    argv = [*PRISM, "measure", "model=tiny", "parallel.dp=2", "measure.steps=6", "measure.warmup=1", f"out={out}"]
    assert _run([*argv, "parallel.dp=1"]).returncode == 0  # a layout already in the file
    before = pd.read_parquet(out)
    for after, sig in _moments(5, 8.0, n=2):
        stopped = _stopped(argv, after, sig)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        now = pd.read_parquet(out)
        assert len(now) in (len(before), len(before) + 2 * 6)  # as it was, or the layout whole
    assert _run(argv).returncode == 0
    final = pd.read_parquet(out)
    assert len(final) == len(before) + 2 * 6 and not final.duplicated(["layout_id", "step", "rank"]).any()
