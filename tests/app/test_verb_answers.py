"""Probe 6: runs sampled at different thread counts, what prism samples counts, compare at a GEMM
precision some cards lack, and --json on Ctrl-C."""
from __future__ import annotations

import json

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


def test_compare_of_every_profile_at_a_gemm_precision_leaves_out_the_cards_without_it(capsys):
    """hardware.gemm_dtype=fp8 over the default profiles failed on the A100, the first of them,
    telling the user to choose another precision; the cards that have it are compared."""
    assert main(["compare", "model=llama3-8b", "gpus=64", "parallel.tp=8", "hardware.gemm_dtype=fp8", "--json"]) == 0
    out = capsys.readouterr()
    shown = [r["hardware"] for r in json.loads(out.out)["results"]]
    assert not any(name.startswith("a100") for name in shown) and {"h100-sxm", "b200"} <= set(shown)
    assert "left out a100-sxm4-40gb, a100-sxm4-80gb" in out.err
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
