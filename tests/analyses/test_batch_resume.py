"""`prism predict-batch` resumed (issue 55): the output holds exactly one row per input row,
whatever stopped the run before (Ctrl-C, a kill mid-chunk); a rerun of a finished table
writes nothing new, and a failed row predicted again replaces its old row."""
import csv

import pandas as pd
import pytest

from predictor.analyses import batch
from predictor.analyses.batch import predict_batch

DRAWS = 40


@pytest.fixture
def table(reference_data, tmp_path):
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    rows = runs[runs.set_id == "vtrain_multi"].head(5).copy()
    rows.iloc[1, rows.columns.get_loc("tp")] = "abc"  # fails, every run
    rows.iloc[3, rows.columns.get_loc("gpu")] = "Voodoo5"
    src = tmp_path / "in.csv"
    rows.to_csv(src, index=False)
    return src


def _keys(out):
    with open(out, newline="") as f:
        return [r[-1] for r in list(csv.reader(f))[1:]]


def test_a_rerun_of_a_finished_table_with_failed_rows_writes_one_row_per_key(table, tmp_path):
    out = tmp_path / "out.csv"
    first = predict_batch(table, out, draws=DRAWS, chunk_rows=2)
    assert first.failed == 2 and len(_keys(out)) == 5
    before = out.read_bytes()
    for _ in range(2):
        report = predict_batch(table, out, draws=DRAWS, chunk_rows=2)
        keys = _keys(out)
        assert len(keys) == len(set(keys)) == 5, keys  # the failed rows were appended again
        assert report.rows == 5 and report.failed == 2
    assert out.read_bytes() == before  # a retried row that fails alike replaces its old row


def test_a_retried_row_replaces_its_old_row_even_when_the_run_is_stopped(table, tmp_path, monkeypatch):
    out = tmp_path / "out.csv"
    predict_batch(table, out, draws=DRAWS, chunk_rows=2)
    real, calls = batch.BatchPredictor.predict, []

    def stopped_after_the_first_chunk(self, chunk):
        calls.append(chunk)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, chunk)
    monkeypatch.setattr(batch.BatchPredictor, "predict", stopped_after_the_first_chunk)
    report = predict_batch(table, out, draws=DRAWS, chunk_rows=1)
    assert report.status == "interrupted"
    keys = _keys(out)
    assert len(keys) == len(set(keys)) == 5, keys


def test_a_long_table_says_how_far_it_is_where_stderr_is_no_terminal(table, tmp_path, capsys, monkeypatch):
    """A log (no terminal: no bar) heard nothing for many minutes of a long table."""
    from predictor.app.cli import main
    monkeypatch.setattr(batch, "FIRST_CHUNK_ROWS", 2)
    monkeypatch.setattr(batch, "PROGRESS_ROWS", 2)
    assert main(["predict-batch", str(table), f"out={tmp_path / 'out.csv'}", f"draws={DRAWS}"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "rows predicted into" in line]
    assert [line.split(":")[1].split(" rows")[0].strip() for line in lines] == ["2 of 5", "5 of 5"], lines
