"""Probe 6, the analyses: compare at a GEMM precision some cards lack and where a power figure
holds the CPU, a tp above the KV heads, and --json on Ctrl-C."""
from __future__ import annotations

import json

from predictor.app.cli import main


def test_compare_of_every_profile_at_a_gemm_precision_leaves_out_the_cards_without_it(capsys):
    """hardware.gemm_dtype=fp8 over the default profiles failed on the A100, the first of them,
    telling the user to choose another precision; the cards that have it are compared."""
    assert main(["compare", "model=llama3-8b", "gpus=64", "parallel.tp=8", "hardware.gemm_dtype=fp8", "--json"]) == 0
    out = capsys.readouterr()
    shown = [r["hardware"] for r in json.loads(out.out)["results"]]
    assert "a100-sxm4-80gb" not in shown and {"h100-sxm", "b200"} <= set(shown)
    assert "left out a100-sxm4-80gb" in out.err
    # named by the user, a card without the precision is still refused
    assert main(["compare", "model=llama3-8b", "gpus=64", "parallel.tp=8", "hardware.gemm_dtype=fp8",
                 "hardware=[a100-sxm4-80gb,h100-sxm]"]) == 2


def test_an_interrupted_verb_still_answers_json_on_stdout(monkeypatch, capsys):
    """prism search --json stopped by Ctrl-C printed nothing on stdout: a script had no JSON to read."""
    import predictor.analyses.search as search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(search, "search", interrupted)
    assert main(["search", "model=tiny", "hardware=local-cpu", "gpus=2", "--json"]) == 130
    assert json.loads(capsys.readouterr().out) == {"error": "interrupted", "field": None}


def test_compare_says_where_a_power_figure_holds_the_cpu(capsys):
    """GH200's power_w is its whole module's (Grace CPU included) where the note said node CPUs
    were excluded from every profile's energy."""
    assert main(["compare", "model=llama3-8b", "gpus=64", "parallel.tp=8", "hardware=[h100-sxm,gh200]", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("gh200: hardware.power_w=1000 W is the whole module's") for n in notes)
    assert not any(n.startswith("h100-sxm: hardware.power_w") for n in notes)


def test_a_tp_above_the_kv_heads_is_priced_with_a_note_that_megatron_refuses_it(capsys):
    """tp=16 on Llama 3 8B's 8 KV heads was predicted without a word under the default
    framework, Megatron-Core, whose TransformerConfig refuses it."""
    assert main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.tp=16", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("parallel.tp=16 exceeds model.num_kv_heads=8" in n and "1, 2, 4, 8" in n for n in notes)
    assert main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.tp=8", "--json"]) == 0
    assert not any("num_kv_heads" in n for n in json.loads(capsys.readouterr().out)["notes"])
