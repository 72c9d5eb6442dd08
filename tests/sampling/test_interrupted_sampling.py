"""``prism sample`` and ``prism measure`` stopped at random points (issue 55; the other writing
verbs: tests/test_interrupted_writers.py): SIGINT, SIGTERM or SIGKILL at a seeded random moment,
then the same command again. Each repeat is timed once and nothing stored is lost; a measurement
file holds the layout whole or not at all."""
import pandas as pd
import pytest
from interrupts import PRISM, _moments, _run, _stopped

from predictor.data.store import read_samples

pytestmark = pytest.mark.slow

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
    # no steps timed again under steal: a loaded machine would add some and the count below would move
    argv = [*PRISM, "measure", "model=tiny", "parallel.dp=2", "measure.steps=6", "measure.warmup=1",
            "measure.steal_retakes=0", f"out={out}"]
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
