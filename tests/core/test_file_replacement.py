"""Probe 6, writes: a file or model folder that cannot be replaced is found out before the
work (measuring, training), a final write that still fails keeps what was made, and models
refused for a hardware.* setting on the command line say so rather than blame the profile."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.data.measurements import read_measurements, write_measurements
from predictor.latency import artifacts
from predictor.latency.artifacts import MANIFEST, whole_folder
from tests.conftest import ROOT

MEASURED = ROOT / "measurements" / "local-cpu-suite.parquet"


@contextmanager
def immutable(path):
    """``path`` made immutable (chattr +i) for the block; skips where chattr cannot."""
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _measured(tmp_path):
    path = tmp_path / "measured.parquet"
    frame = read_measurements(MEASURED)
    write_measurements(frame[frame.layout_id == frame.layout_id.iloc[0]], path)
    return path


def _refuse(monkeypatch, what: str, locked):
    """``os.<what>`` (replace, rename) refused where it would move or replace ``locked``, as
    for an immutable file or folder."""
    real = getattr(os, what)

    def refused(src, dst, **kwargs):
        if locked in (Path(src), Path(dst)):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(src, dst, **kwargs)
    monkeypatch.setattr(os, what, refused)


def test_measure_refuses_an_out_file_it_cannot_replace_before_measuring(tmp_path, capsys, monkeypatch):
    out = _measured(tmp_path)
    monkeypatch.setattr("sampling.measure.run_torchrun", lambda *a, **k: pytest.fail("measured into a locked file"))
    with immutable(out):
        assert main(["measure", "model=tiny", "hardware=local-cpu", f"out={out}", "--json"]) == 2
    captured = capsys.readouterr()
    assert f"out={out}: exists and cannot be replaced" in captured.err and "Traceback" not in captured.err
    assert json.loads(captured.out)["field"] == "out"


def test_measure_refuses_another_user_s_file_in_a_sticky_folder(tmp_path, capsys, monkeypatch):
    """Writable bits or not, a sticky folder (/tmp) lets only the file's owner rename over it."""
    out = _measured(tmp_path)
    tmp_path.chmod(0o1777)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(out).st_uid + 4242)
    monkeypatch.setattr("sampling.measure.run_torchrun", lambda *a, **k: pytest.fail("measured into a locked file"))
    assert main(["measure", "model=tiny", "hardware=local-cpu", f"out={out}"]) == 2
    assert "exists and cannot be replaced (another user's file in a sticky folder)" in capsys.readouterr().err


def test_a_measurement_whose_final_rename_fails_is_kept_and_named(tmp_path, monkeypatch):
    out = _measured(tmp_path)
    frame = read_measurements(MEASURED)
    new = frame[frame.layout_id == frame.layout_id.unique()[1]]
    _refuse(monkeypatch, "replace", out)
    with pytest.raises(PrismError, match=f"{out}: cannot be replaced .*kept in .*mv ") as exc:
        write_measurements(new, out)
    kept = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(kept) == 1 and str(kept[0]) in str(exc.value)
    assert set(read_measurements(kept[0]).layout_id) == set(frame.layout_id.unique()[:2])  # old and new steps


def test_train_refuses_a_models_folder_it_cannot_replace_before_training(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "m" / "local-cpu"
    shutil.copytree(ROOT / "models" / "local-cpu", folder)
    monkeypatch.setattr(artifacts, "train", lambda *a, **k: pytest.fail("trained into a locked folder"))
    with immutable(folder):
        code = main(["train", f"samples={ROOT / 'samples' / 'local-cpu'}", "hardware=local-cpu",
                     f"models_dir={folder.parent}"])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot write in {folder}" in err and "Traceback" not in err


def test_a_model_set_whose_swap_fails_is_one_error_and_the_old_set_stays(tmp_path, monkeypatch):
    folder = tmp_path / "local-cpu"
    shutil.copytree(ROOT / "models" / "local-cpu", folder)
    before = sorted(p.name for p in folder.iterdir())
    _refuse(monkeypatch, "rename", folder)
    with pytest.raises(PrismError, match=f"{folder}: cannot be replaced .*the set there is kept") as exc:
        with whole_folder(folder) as tmp:
            (tmp / MANIFEST).write_text("{}")
    assert exc.value.field == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == before and [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_models_refused_for_a_command_line_setting_name_it_not_the_profile(tmp_path, capsys):
    shutil.copytree(ROOT / "models" / "local-cpu", tmp_path / "local-cpu")
    assert main(["predict", f"models_dir={tmp_path}", "hardware=local-cpu", "model=tiny",
                 "hardware.peak_flops.float32=1.82e12"]) == 2
    err = capsys.readouterr().err
    assert "hardware.peak_flops.float32=1.82e+12 (the profile: 1.82e+11)" in err
    assert "drop them from the command line, or retrain" in err and "yaml changed" not in err
