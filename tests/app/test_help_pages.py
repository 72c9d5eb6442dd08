"""Probe 6: faults a new user met, each with the command that showed it.

compare's --show-config, the help pages' MoE and GEMM-precision settings, a price given on
the command line, and prism samples of an empty store (a run file copied into the store and a
blank nccl-tests time: tests/data/test_store_and_table_faults.py).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import fields

import pytest

from predictor.app.cli import VERBS, main
from predictor.core.specs import HardwareConfig, ParallelConfig
from predictor.data import store

# -- 1. compare --show-config shows the profiles compare runs ----------------------------------

def test_compare_show_config_shows_each_profile_it_runs_not_the_default(capsys):
    """It printed conf/config.yaml's default hardware (local-cpu), which compare never runs."""
    job = ["compare", "model=tiny", "hardware=[h100-sxm,b200]", "gpus=8", "hardware.power_w=500", "--show-config"]
    with pytest.raises(SystemExit) as done:
        main(job)
    text = capsys.readouterr().out
    assert done.value.code == 0
    assert "# hardware: conf/hardware/h100-sxm.yaml" in text and "# hardware: conf/hardware/b200.yaml" in text
    assert "conf/hardware/local-cpu.yaml" not in text
    assert "# prism compare: profile 2 of 2, hardware=b200" in text
    assert text.count("power_w: 500") == 2  # the overrides apply to every profile, as they run
    with pytest.raises(SystemExit):
        main([*job, "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert [c["hardware"]["name"] for c in shown] == ["h100-sxm", "b200"]


# -- 2. the help pages teach expert parallelism and the GEMMs' precision ----------------------

@pytest.mark.parametrize("verb", ["predict", "search", "variability", "compare"])
def test_help_teaches_parallel_ep_and_hardware_gemm_dtype(verb, capsys):
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "parallel.ep=" in text and "hardware.gemm_dtype=" in text
    assert "ep" in {f.name for f in fields(ParallelConfig)}  # the keys the help names are the specs' own
    assert "gemm_dtype" in {f.name for f in fields(HardwareConfig)}


def test_the_predict_examples_of_ep_and_gemm_dtype_run(capsys):
    examples = [e for e in VERBS["predict"]["examples"] if "parallel.ep=" in e or "hardware.gemm_dtype=" in e]
    assert len(examples) == 2
    for example in examples:
        argv = shlex.split(example, comments=True)[1:]
        assert main(argv) == 0, capsys.readouterr().err


# -- 3. a price given is the user's, not an indicative quote ----------------------------------

def _cost_note(capsys, *extra) -> str:
    assert main(["compare", "model=tiny", "hardware=[h100-sxm,b200]", "gpus=8", *extra, "--json"]) == 0
    [note] = [n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith("cost =")]
    return note


def test_a_price_given_on_the_command_line_is_not_called_indicative(capsys):
    assert "indicative on-demand prices, see conf/hardware" in _cost_note(capsys)
    given = _cost_note(capsys, "hardware.price_per_gpu_hour=1.5")
    assert "the price you gave for h100-sxm, b200" in given and "indicative on-demand" not in given


# -- 6. prism samples of a store without samples is an error ----------------------------------

def test_samples_of_an_empty_store_exits_2_with_the_advice_on_stderr(tmp_path, capsys):
    assert main(["samples", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"prism samples: error: {tmp_path}: no samples; {store.no_runs(tmp_path)}" in err
    assert main(["samples", str(tmp_path), "--json"]) == 2
    assert store.no_runs(tmp_path) in json.loads(capsys.readouterr().out)["error"]
