"""Every writing verb stopped at random points (issue 55): Ctrl-C, SIGTERM or SIGKILL at a
seeded random moment, then the same command again. The store, model folder, measurement file
or table holds each row once, loses nothing already written, and the rerun ends as an
uninterrupted run does. Sample and measure: tests/sampling/test_interrupted_sampling.py; the
interrupts at chosen points: tests/sampling/ (test_sample_cli, test_cluster_sampling, test_measure)."""
import signal

import pandas as pd
import pytest
from interrupts import PRISM, ROOT, _moments, _run, _stopped

from predictor.data.store import read_samples

pytestmark = pytest.mark.slow


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
    for i, (after, sig) in enumerate(_moments(7, 4.0, n=2)):
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
    moments = [(0.3, signal.SIGINT), (0.6, signal.SIGKILL), (1.2, signal.SIGTERM)] + _moments(11, 3.0, n=2)
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

