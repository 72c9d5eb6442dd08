"""Implausible values that passed without a note (issue 55): a head 7 wide, a CPU at 67.5%
MFU in compare, models written inside a sample store, a sample file stripped of PRISM's metadata."""
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from predictor.analyses.compare import mfu_note
from predictor.app.cli import main


def test_a_head_width_no_multiple_of_8_is_noted(capsys):
    assert main(["predict", "model=tiny", "hardware=local-cpu", "model.head_dim=7"]) == 0
    out = capsys.readouterr().out
    assert "model.head_dim=7: no multiple of 8" in out
    assert main(["predict", "model=tiny", "hardware=local-cpu"]) == 0
    assert "no multiple of 8" not in capsys.readouterr().out


def test_an_mfu_above_what_runs_reach_or_the_peak_allows_is_noted():
    assert "MFU 67.5% is above the 60%" in mfu_note("local-cpu", 0.675)
    assert "above the hardware's peak" in mfu_note("local-cpu", 1.3)
    assert mfu_note("h100-sxm", 0.45) is None


def test_models_written_inside_a_sample_store_are_refused(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    run = sorted(Path("samples/local-cpu").resolve().glob("*.parquet"))[0]
    shutil.copy(run, store / run.name)
    for models in (store, store / "models"):
        assert main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={models}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"inside the sample store {store}" in err, err
    assert sorted(p.name for p in store.iterdir()) == [run.name]


def test_a_sample_file_stripped_of_prism_s_metadata_is_noted(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    run = sorted(Path("samples/local-cpu").resolve().glob("*.parquet"))[0]
    table = pq.read_table(run)
    pq.write_table(table.replace_schema_metadata({}), store / "stripped.parquet")
    args = [f"samples={store}", "hardware=local-cpu", "regressor.params.n_estimators=5",
            "regressor.params.median_rounds=5", "regressor.params.spread_estimators=5"]
    assert main(["train", *args, f"models_dir={tmp_path / 'm'}"]) == 0
    assert "1 of 1 run file(s) carry no PRISM metadata" in capsys.readouterr().out
    shutil.copy(run, store / "stripped.parquet")  # the same rows as PRISM wrote them
    assert main(["train", *args, f"models_dir={tmp_path / 'm2'}"]) == 0
    assert "no PRISM metadata" not in capsys.readouterr().out
