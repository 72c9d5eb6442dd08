"""Probe 6: runs sampled at different thread counts, and what prism samples counts."""
from __future__ import annotations

import pandas as pd
import pytest

from predictor.app.cli import main
from predictor.core.profiles import REPO_ROOT
from predictor.data import store
from predictor.data.summary import summarize

LOCAL_RUN = next((REPO_ROOT / "samples" / "local-cpu").glob("*.parquet"))


def _run(folder, run_id: str, threads: int, rows: pd.DataFrame) -> None:
    """A run of ``rows`` into ``folder`` as prism sample writes one, at ``threads``."""
    store.write_run(rows.assign(run_id=run_id), folder, run_id, {"hardware": "local-cpu", "threads": threads})


@pytest.fixture(scope="module")
def gemm_rows() -> pd.DataFrame:
    df = store.read_samples(LOCAL_RUN)
    return df[(df.op == "gemm") & (df.origin == "sampled")].head(200)


def test_train_refuses_runs_sampled_at_two_thread_counts(tmp_path, gemm_rows, capsys):
    """Trained together, a GEMM at 2 threads beside the same GEMM at 1 read as a 0.6 temporal
    sigma and a step ten times too long; the store's runs name their counts."""
    _run(tmp_path / "s", "one", 1, gemm_rows)
    _run(tmp_path / "s", "two", 2, gemm_rows.assign(latency_us=gemm_rows.latency_us / 1.8))
    assert main(["train", f"samples={tmp_path / 's'}", "hardware=local-cpu", f"models_dir={tmp_path / 'm'}"]) == 2
    err = capsys.readouterr().err
    assert "sampling.threads=1 (one.parquet)" in err and "sampling.threads=2 (two.parquet)" in err
    assert not (tmp_path / "m" / "local-cpu").exists()


def test_sample_refuses_to_resume_a_store_of_another_thread_count(tmp_path, gemm_rows, capsys):
    """It reported nothing-to-do: the tasks the 2-thread run stored read as done at 1 thread."""
    _run(tmp_path, "two", 2, gemm_rows)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["sample", "sampling.threads=1", "sampling.ops=[gemm]", "sampling.shapes_per_op=2",
                 f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "output_dir=" in err and "sampling.threads=2 (two.parquet)" in err and "sampling.threads=2 to resume" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing sampled, nothing written


def test_the_summary_counts_the_rows_train_fits_not_the_co_run_twins(tmp_path, gemm_rows):
    """The co-run phase's twins (timed alone and beside a neighbour) made 10 repeats read as 30."""
    fwd = gemm_rows[gemm_rows["pass"] == "fwd"]
    shape = fwd[["m", "n", "k"]].drop_duplicates().head(1).merge(fwd)
    twins = [shape.assign(origin=o, latency_us=shape.latency_us * f) for o, f in
             (("co_run_alone", 1.0), ("co_run_beside", 40.0))]
    _run(tmp_path, "run", 1, pd.concat([shape, *twins], ignore_index=True))
    [row] = summarize(tmp_path).to_dict("records")
    assert row["rows"] == row["min_repeats"] == len(shape)
    assert row["p50_us_max"] == pytest.approx(shape.latency_us.median(), rel=1e-3)
