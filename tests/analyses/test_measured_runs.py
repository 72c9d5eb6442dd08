"""Probe 5: measured steps that are not one row per (step, rank) or not in seconds, figures and
calibrations with nowhere to go, a retrained set's lost calibration, and predict-batch reruns
that replaced a finished output."""
import errno
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from predictor.analyses import calibrate
from predictor.analyses.batch import predict_batch
from predictor.analyses.calibrate import fit_calibration
from predictor.analyses.validate import validate
from predictor.app.cli import main
from predictor.app.plots import default_plot_path
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware
from predictor.data.measurements import read_measurements, write_measurements
from predictor.latency.artifacts import ModelSet, models_dir, trained_models
from predictor.latency.calibration import Calibration
from tests.conftest import ROOT

RR = ROOT / "measurements" / "local-cpu-suite-RR.parquet"
ONE_RANK = "tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=none 1f1b"
DP2 = "tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b"
TINY = [ONE_RANK, DP2, "tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=full 1f1b",
        "tiny seq128 dp1 tp2 pp1 mbs1 gbs4 rc=none 1f1b"]


@pytest.fixture(scope="module")
def rr():
    return read_measurements(RR)


def _refused_alike(frame, match):
    """validate and calibrate read measured steps through the same code: both refuse, alike."""
    for reads in (lambda: validate(frame, "local-cpu", None, draws=100), lambda: fit_calibration(frame, "local-cpu",
                                                                                                   None, draws=20)):
        with pytest.raises(PrismError, match=match) as exc:
            reads()
        assert exc.value.field == "measured"


def test_a_layout_s_steps_stored_twice_are_refused_by_validate_and_calibrate(rr, tmp_path, capsys):
    """A layout's 30 steps appended to a copy of themselves, times x3, were scored as 60 steps
    (meas p50 265.8 ms where its 30 steps' median is 88.6)."""
    layout = rr[rr.layout_id == ONE_RANK]
    twice = pd.concat([rr[rr.layout_id.isin(TINY)], layout.assign(step_time_s=layout.step_time_s * 3)],
                      ignore_index=True)
    _refused_alike(twice, f"layout '{ONE_RANK}': step 0 of rank 0 has more than one row \\(30 rows repeat .*drop "
                          f"the repeated rows")
    path = write_measurements(twice, tmp_path / "twice.parquet")
    assert main(["validate", f"measured={path}", "hardware=local-cpu", f"out={tmp_path / 'cdf.png'}"]) == 2
    err = capsys.readouterr().err
    assert "step 0 of rank 0 has more than one row" in err and "Traceback" not in err


def test_a_rank_missing_most_steps_is_refused_by_validate_and_calibrate(rr):
    """dp=2 with rank 1's rows of 25 of its 30 steps gone was scored on rank 0's steps alone."""
    frame = rr[rr.layout_id.isin(TINY)]
    lost = frame[~((frame.layout_id == DP2) & (frame["rank"] == 1) & (frame.step >= 5))]
    _refused_alike(lost, f"layout '{DP2}': rank 1 has no row for 25 of the layout's 30 steps \\(step\\(s\\) 5, 6, 7, "
                         f"8, 9, 10, 11, 12, \\.\\.\\.\\).*measure the layout again")


@pytest.mark.parametrize("factor", [1000.0, 1e-9])
def test_steps_in_another_unit_are_refused_by_validate_as_by_calibrate(rr, factor, monkeypatch):
    """Milliseconds given as step_time_s were scored with errors of 36986923766.0%."""
    hw = load_hardware("local-cpu")
    frame = rr[rr.layout_id.isin(TINY)]
    wrong = frame.assign(step_time_s=frame.step_time_s * factor)
    match = "times the predicted .*no calibration explains these steps; check that step_time_s is in seconds"
    with pytest.raises(PrismError, match=f"layout '{TINY[0]}': its median step, .*{match}") as exc:
        validate(wrong, hw, trained_models(hw), draws=200)
    assert exc.value.field == "measured"
    # the same check, before the fit that took seconds to reach a bound
    monkeypatch.setattr(calibrate, "_fit", lambda *a, **k: pytest.fail("fitted to steps no calibration explains"))
    with pytest.raises(PrismError, match=match):
        fit_calibration(wrong, hw, trained_models(hw), draws=50)
    assert validate(frame, hw, trained_models(hw), draws=200).scores  # in seconds: scored


@pytest.fixture
def read_only(monkeypatch):
    """Makes a folder take no new file. Root writes through permission bits, so for root the
    folder refuses files as a read-only mount does: an OSError from the file system, both where
    a folder is checked (a temporary file in it) and where a file is saved (the rename into it)."""
    locked = []
    temporary, replace = tempfile.TemporaryFile, os.replace

    def refused(path) -> bool:
        return path is not None and Path(path).resolve() in locked

    def temporary_file(*args, dir=None, **kwargs):
        if refused(dir):
            raise OSError(errno.EROFS, "Read-only file system")
        return temporary(*args, dir=dir, **kwargs)

    def replacing(src, dst, **kwargs):
        if refused(Path(dst).parent):
            raise OSError(errno.EROFS, "Read-only file system")
        return replace(src, dst, **kwargs)

    def lock(folder: Path) -> None:
        folder.chmod(0o500)
        locked.append(folder.resolve())
        try:
            (folder / ".probe").touch()
        except OSError:
            return
        (folder / ".probe").unlink()
        monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
        monkeypatch.setattr(os, "replace", replacing)
    yield lock
    for folder in locked:
        folder.chmod(0o700)


def test_the_default_cdf_plot_s_folder_is_checked_before_scoring(rr, tmp_path, read_only, capsys, monkeypatch):
    """measured=DIR/x.parquet in a read-only DIR, no out=: scored, then an OSError from the
    plot's save, and the scores never printed."""
    folder = tmp_path / "read-only"
    path = write_measurements(rr[rr.layout_id == ONE_RANK], folder / "x.parquet")
    read_only(folder)
    scored = []
    monkeypatch.setattr("predictor.analyses.validate.validate", lambda *a, **k: scored.append(a) or validate(*a, **k))
    assert main(["validate", f"measured={path}", "hardware=local-cpu"]) == 2
    err = capsys.readouterr().err
    assert f"out={folder / 'x.cdf.png'}: cannot write in {folder}" in err and "out= was not given" in err
    assert "Traceback" not in err and not scored
    with pytest.raises(PrismError, match="out= was not given, and the figure goes beside .*give out=PATH.png"):
        default_plot_path(path, ".cdf.png", "out")


def test_calibrate_checks_the_model_set_s_folder_before_fitting(rr, tmp_path, read_only, capsys, monkeypatch):
    """A read-only models_dir: fitted for ~6 s, then an OSError from save_calibration."""
    measured = write_measurements(rr[rr.layout_id.isin(TINY)], tmp_path / "m.parquet")
    folder = tmp_path / "models" / "local-cpu"  # the set's folder, where its manifest is rewritten
    shutil.copytree(models_dir() / "local-cpu", folder)
    before = (folder / "manifest.json").read_bytes()
    read_only(folder)
    monkeypatch.setattr(calibrate, "fit_calibration", lambda *a, **k: pytest.fail("fitted before the check"))
    assert main(["calibrate", f"measured={measured}", "hardware=local-cpu", f"models_dir={folder.parent}"]) == 2
    err = capsys.readouterr().err
    assert "models_dir=" in err and f"cannot write in {folder}" in err and "Traceback" not in err
    assert (folder / "manifest.json").read_bytes() == before


def test_train_s_save_says_which_set_and_calibration_it_replaced(tmp_path):
    """A 44-model set and its calibration were replaced by a 1-model set without a word."""
    hw = load_hardware("local-cpu")
    directory = tmp_path / "models" / hw.name
    shutil.copytree(models_dir() / hw.name, directory)
    shipped = ModelSet.load(directory, hw)
    shipped.save_calibration(directory, Calibration(1.12, 3.0, 40.0, layouts=16))
    key = sorted(shipped.models)[0]
    one = ModelSet(hw, shipped.quantiles, {key: shipped.models[key]}, shipped.manifest)
    one.save(directory)
    created, samples = shipped.manifest["created"][:16].replace("T", " "), shipped.manifest["samples"]
    assert one.replaced == (f"replaced the set of {len(shipped.models)} models in {directory}, trained {created} UTC "
                            f"on {samples['rows']:,} sample rows (hash {samples['hash']}), by these 1; its "
                            f"calibration (compute_scale 1.12, "
                            f"op_overhead_us 3, tp_overhead_us 40, fitted on 16 layouts) is dropped with it: run prism "
                            f"calibrate measured=FILE hardware=local-cpu models_dir={directory.parent} again")
    assert ModelSet.load(directory, hw).calibration is None and len(ModelSet.load(directory, hw).models) == 1
    one.save(tmp_path / "elsewhere" / hw.name)
    assert one.replaced is None  # nothing was there


@pytest.fixture(scope="module")
def gpu_rows():
    rows = pd.read_csv(ROOT / "data" / "e2e" / "e2e_training_visible.csv")
    return pd.concat([rows[rows.gpu.str.startswith("A100")].head(2), rows[rows.gpu == "H100"].head(1)])


def test_predict_batch_refuses_a_models_dir_with_none_of_the_table_s_hardware(gpu_rows, tmp_path):
    """models_dir=M of local-cpu models alone, a table of A100 and H100 runs: 185 rows of errors
    written over 179 predicted ones."""
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    gpu_rows.to_csv(src, index=False)
    cpu_only = tmp_path / "cpu-models"
    shutil.copytree(models_dir() / "local-cpu", cpu_only / "local-cpu")
    with pytest.raises(PrismError, match=f"models_dir={cpu_only}: holds models of local-cpu, and none of the table's "
                                         f"hardware \\(a100-sxm4-80gb, h100-sxm\\): every row would fail") as exc:
        predict_batch(src, out, draws=20, models_root=cpu_only)
    assert exc.value.field == "models_dir" and not out.exists()


def test_a_finished_output_of_other_settings_is_refused_not_replaced(gpu_rows, tmp_path):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    gpu_rows.to_csv(src, index=False)
    assert predict_batch(src, out, draws=20).predicted == 3
    finished = out.read_bytes()
    a100 = tmp_path / "a100-models"
    shutil.copytree(models_dir() / "a100-sxm4-80gb", a100 / "a100-sxm4-80gb")
    with pytest.raises(PrismError, match=f"out={out}: holds 3 row\\(s\\) of this table predicted with no models_dir, "
                                         f"where this run has models_dir={a100}, which this run would replace; write "
                                         f"to another out=, or delete {out}") as exc:
        predict_batch(src, out, draws=20, models_root=a100)
    assert exc.value.field == "out"
    with pytest.raises(PrismError, match="predicted with other settings than this run's draws=21, seed=0, no "
                                         "models_dir"):
        predict_batch(src, out, draws=21)
    assert out.read_bytes() == finished
    assert predict_batch(src, out, draws=20).resumed == 3  # the same settings resume, as before
