"""The fourth new-user probe, on files: a batch output of another table, settings of the
Python API that hung or failed every row, a store named like a run file, names longer than
a file system takes, figures written to devices, and --show-config with --json. Each case:
one line naming the field and the fix, exit code 2, and nothing stored lost."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from predictor.analyses import batch
from predictor.analyses.batch import predict_batch
from predictor.app.cli import main
from predictor.app.plots import plot_path
from predictor.core.errors import PrismError
from predictor.core.files import writable
from predictor.core.profiles import REPO_ROOT
from predictor.data.store import read_samples

DRAWS = 60
TRACE = REPO_ROOT / "measurements" / "local-cpu-tp2-dtensor-trace-excerpt.json"
LONG = "a" * 300


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def tables(reference_data, tmp_path):
    """Two tables of the published runs' layout: its first 3 rows, and another one alone."""
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    first, other = tmp_path / "b1.csv", tmp_path / "b3.csv"
    runs.head(3).to_csv(first, index=False)
    runs.iloc[[10]].to_csv(other, index=False)
    return first, other


def test_another_table_s_output_is_refused_not_replaced(tables, tmp_path, capsys):
    # was: "o.csv: 1 rows, ..." and the first table's 3 predictions gone without a word
    first, other = tables
    out = tmp_path / "o.csv"
    assert predict_batch(first, out, draws=DRAWS).written == 3
    before = out.read_bytes()
    assert main(["predict-batch", str(other), f"out={out}", f"draws={DRAWS}"]) == 2
    assert "is not this table's predict-batch output (none of its 3 rows is a row of this table)" in _one_line(capsys)
    assert out.read_bytes() == before and not (tmp_path / ".o.csv.lock").exists()
    # the same table with other settings is refused too: its rows would be predicted again over these
    with pytest.raises(PrismError, match="holds 3 row\\(s\\) of this table predicted with other settings"):
        predict_batch(first, out, draws=DRAWS + 1)
    assert out.read_bytes() == before


@pytest.mark.parametrize("setting, says", [
    ({"chunk_rows": 0}, "chunk_rows=0: must be a positive integer"),  # was: an endless loop, out emptied
    ({"chunk_rows": -3}, "chunk_rows=-3: must be a positive integer"),  # was: an endless loop
    ({"draws": "5"}, "draws='5': must be a positive integer"),  # was: status done, every row failed
    ({"draws": 5.5}, "draws=5.5: must be a positive integer"),
    ({"seed": -1}, "seed=-1: must be a non-negative integer"),
])
def test_the_api_checks_its_settings_before_any_write(tables, tmp_path, monkeypatch, setting, says):
    first, _ = tables
    out = tmp_path / "o.csv"
    predict_batch(first, out, draws=DRAWS)
    before = out.read_bytes()
    monkeypatch.setattr(batch.BatchPredictor, "predict", lambda *a: pytest.fail("predicted with a bad setting"))
    with pytest.raises(PrismError, match=f"^{says}") as error:
        predict_batch(first, out, **({"draws": DRAWS} | setting))
    assert error.value.field == next(iter(setting))
    assert out.read_bytes() == before and not (tmp_path / ".o.csv.lock").exists()


@pytest.mark.parametrize("verb", [["import-trace", str(TRACE), "hardware=local-cpu"],
                                  ["import-ett", "data/ett/Perlmutter"],
                                  ["import-microbench", "data/microbench", "hardware=h100-sxm"]])
def test_an_import_into_a_run_file_name_is_refused(verb, tmp_path, capsys, monkeypatch):
    # was: a FOLDER x.parquet made inside the store, which every later read called corrupt
    monkeypatch.chdir(REPO_ROOT)
    assert main([*verb, f"out={tmp_path / 'st' / 'x.parquet'}"]) == 2
    err = _one_line(capsys)
    assert f"out={tmp_path / 'st' / 'x.parquet'}: names a run file" in err
    assert f"give the folder, e.g. out={tmp_path / 'st'}" in err
    assert not (tmp_path / "st").exists()


def test_a_folder_named_like_a_run_file_is_named_as_such_not_as_corrupt(tmp_path, capsys):
    # was: "st/x.parquet: not a readable Parquet file (... is a directory). It is truncated or corrupt"
    (tmp_path / "st" / "x.parquet").mkdir(parents=True)
    for argv in (["samples", str(tmp_path / "st")], ["train", f"samples={tmp_path / 'st'}", "hardware=local-cpu"]):
        assert main(argv) == 2
        err = _one_line(capsys)
        assert "x.parquet: a folder named like a run file, not a run" in err and "corrupt" not in err


def test_read_samples_of_none_names_the_parameter():
    # was: TypeError from Path(None)
    with pytest.raises(PrismError, match="^samples=None: must be a path") as error:
        read_samples(None)
    assert error.value.field == "samples"


@pytest.mark.parametrize("argv, field", [
    (["predict", "model=tiny", "hardware=local-cpu", f"plot={LONG}.png"], "plot"),
    (["predict-batch", "{table}", f"out={LONG}.csv"], "out"),
    (["import-trace", str(TRACE), f"out={LONG}", "hardware=local-cpu"], "out"),
    (["train", f"samples={LONG}", "hardware=local-cpu"], "samples"),
    (["samples", LONG], "samples"),
])
def test_a_name_longer_than_a_file_system_takes_is_one_line(argv, field, tables, tmp_path, capsys, monkeypatch):
    # was: OSError: [Errno 36] File name too long, a traceback
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{table}", str(tables[0])) for a in argv]
    assert main(argv) == 2
    err = _one_line(capsys)
    assert f"{field}=aaaa" in err and "more than the 255 a file system takes" in err


def test_a_long_name_says_which_field(tmp_path):
    with pytest.raises(PrismError, match="^plot=a{40}\\.\\.\\.: a name of 304 bytes in it, more than the 255") as e:
        plot_path(f"{LONG}.png")
    assert e.value.field == "plot"


def test_a_figure_is_never_written_to_a_device_or_beside_an_existing_name(tmp_path, capsys):
    # was: plot=/dev/null wrote /dev/null.png (as root, a file in /dev)
    assert main(["predict", "model=tiny", "hardware=local-cpu", "plot=/dev/null"]) == 2
    assert "plot=/dev/null: the figure is a PNG; give a path ending in .png" in _one_line(capsys)
    fifo = tmp_path / "fig.png"
    os.mkfifo(fifo)
    with pytest.raises(PrismError, match="is not a regular file"):
        writable("plot", fifo)  # the write's rename would replace the pipe
    # a new name without a suffix still takes .png, and the plot line names the file written
    assert main(["predict", "model=tiny", "hardware=local-cpu", f"plot={tmp_path / 'step'}"]) == 0
    assert f"{tmp_path / 'step.png'}" in capsys.readouterr().out and (tmp_path / "step.png").is_file()


def test_show_config_with_json_prints_json(capsys):
    # was: the commented YAML, which no JSON reader takes
    with pytest.raises(SystemExit) as done:
        main(["predict", "--show-config", "--json", "model=tiny"])
    assert done.value.code == 0
    config = json.loads(capsys.readouterr().out)
    assert config["model"]["name"] == "tiny" and config["output"] == "json"


def test_sample_into_a_run_file_name_is_refused(tmp_path, capsys):
    """`prism sample output_dir=x.parquet` made a folder named like a run file in the store."""
    assert main(["sample", f"output_dir={tmp_path / 'x.parquet'}", "sampling.budget_s=5"]) == 2
    assert "output_dir=" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()
