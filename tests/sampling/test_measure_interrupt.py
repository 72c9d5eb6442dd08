"""`prism measure` interrupted (issue 55): it says how many steps it had timed, that none are
kept (a layout is written whole, the file is as it was) and how to measure it again."""
import pytest

pytest.importorskip("torch")

from predictor.app.cli import main  # noqa: E402


def test_an_interrupted_measure_says_what_was_lost_and_how_to_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.parquet"

    def interrupted(*args, progress, **kwargs):
        progress.update(7)  # warm-up and timed steps, as rank 0 reports them
        raise KeyboardInterrupt
    monkeypatch.setattr("sampling.measure.run_torchrun", interrupted)
    assert main(["measure", "model=tiny", "hardware=local-cpu", f"out={out}", "measure.warmup=2",
                 "measure.steps=10"]) == 130
    err = capsys.readouterr().err
    assert "5 of 10 timed steps" in err and "none kept" in err and f"{out}" in err
    assert "run the same command again" in err and "Traceback" not in err
    assert not out.exists()
