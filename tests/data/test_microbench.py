"""Published microbenchmarks as the middle evidence tier (issue 7): import, train, compose."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor.app.config import load_config
from predictor.core.ops import Call
from predictor.core.profiles import DATA_DIR, load_hardware, load_model, section
from predictor.core.specs import ParallelConfig, RegressorConfig
from predictor.data.importers.microbench import GEMM_PAST_PEAK, import_microbench
from predictor.data.published import row_precision
from predictor.data.store import read_samples
from predictor.engine.compose import compose
from predictor.latency.artifacts import TIERS, evidence_tier, train, trained_models
from predictor.latency.lookup import Source, call_quantiles
from predictor.workload.decompose import decompose

MICROBENCH = DATA_DIR / "microbench"


@pytest.fixture(scope="module")
def h100_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("microbench")
    report = import_microbench(MICROBENCH, "h100-sxm", out)
    return report, read_samples(report.run_file)


def test_import_maps_every_source_and_counts_what_it_leaves_out(h100_rows):
    report, rows = h100_rows
    assert {"gemm/fwd", "gemm/bwd", "bmm/fwd", "attention/fwd", "attention/bwd", "all_reduce/step"} <= set(report.rows)
    # H100's fp8 rows, every one: some run past the peak (the data README flags them)
    assert report.left_out[GEMM_PAST_PEAK] == 3 * 125  # 125 shapes at batch 1, 2 and 4 (their backward rows go too)
    assert set(rows[rows.op == "gemm"].dtype) == {"bfloat16", "tfloat32"}
    assert set(rows.origin.str.split(":").str[0]) == {"microbench"}
    coll = rows[rows.op.isin(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])]
    assert (coll.nodes == 1).all() and (coll.ranks_per_node == coll.group_size).all()


def test_gemm_backward_is_the_two_gradient_gemms(h100_rows):
    _, rows = h100_rows
    g = rows[(rows.op == "gemm") & (rows.dtype == "bfloat16")].set_index(["pass", "m", "n", "k"]).latency_us
    m, n, k = 1024, 4096, 256
    assert g["bwd", m, n, k] == pytest.approx(g["fwd", m, k, n] + g["fwd", k, n, m])


def test_attention_latency_follows_the_published_rate(h100_rows):
    _, rows = h100_rows
    a = rows[(rows.op == "attention") & (rows["pass"] == "fwd") & (rows.seq_q == 8192) & (rows.head_dim == 128)
             & (rows.causal == True)]  # noqa: E712  (a pandas mask)
    # FlashAttention-2 on H100, causal, head dim 128, seq 8192, batch 2, 16 heads: 333 TFLOP/s forward
    flops = 4 * 2 * 16 * 8192 ** 2 * 128 * 0.5
    assert a.latency_us.iloc[0] == pytest.approx(flops / 333e12 * 1e6)


@pytest.fixture(scope="module")
def h100_models(h100_rows):
    _, rows = h100_rows
    rows = rows[rows.op.isin(["gemm", "all_reduce"])]
    return train(rows, load_hardware("h100-sxm"), section(load_config([]), "regressor", RegressorConfig), n_jobs=1)


def test_models_say_they_rest_on_microbenchmarks_inside_one_node(h100_models):
    assert evidence_tier(h100_models) == TIERS[1]
    assert h100_models.manifest["collective_scope"] == "intra-node"
    hw = load_hardware("h100-sxm")
    calls = [Call("all_reduce", "step", (("group_size", 8), ("message_bytes", 2 ** 26)), 1, "tp", 8, 1),
             Call("all_reduce", "step", (("group_size", 16), ("message_bytes", 2 ** 26)), 1, "dp", 8, 2)]
    _, evidence = call_quantiles(calls, h100_models, hw, "bfloat16")
    assert [e.source for e in evidence] == [Source.MODEL, Source.NETWORK_PRIOR]
    assert [e.text for e in evidence] == ["models/h100-sxm", f"network prior ({hw.network.name})"]


def test_no_gemm_beyond_the_table_beats_the_fastest_measured(h100_rows, h100_models):
    """The table stops at 4096 (the fastest bf16 GEMM: 780 TFLOP/s); the trees' sum once put an
    8192-cubed backward at 872. The median is held at the best share of the peak measured."""
    _, rows = h100_rows
    g = rows[(rows.op == "gemm") & (rows.dtype == "bfloat16")]
    fastest = (2 * g.m * g.n * g.k * np.where(g["pass"] == "bwd", 2, 1) / g.latency_us).max() * 1e6
    assert h100_models.models[("gemm", "bwd")].info["compute_ceiling"]["bfloat16"] == pytest.approx(
        fastest / load_hardware("h100-sxm").peak("bfloat16"))
    big = {"m": [8192, 16384], "n": [8192, 12288], "k": [8192, 4096]}
    for pass_, times in (("fwd", 1), ("bwd", 2)):
        q = h100_models.query("gemm", pass_, pd.DataFrame({**big, "dtype": ["bfloat16"] * 2}))
        rate = 2 * np.prod(list(big.values()), axis=0) * times / q["q0.5"].to_numpy() * 1e6
        assert (rate <= fastest * (1 + 1e-9)).all()
        assert (np.diff(q.to_numpy(), axis=1) >= 0).all()  # the spread is kept, in order


def test_h200_borrows_the_h100_models_on_its_own_floor():
    h200 = load_hardware("h200")
    models = trained_models(h200)
    assert models is not None and models.hw is h200
    assert evidence_tier(models) == f"{TIERS[1]} of h100-sxm (same compute die)"


def test_no_models_means_every_call_rests_on_the_spec_prior():
    """Without models the whole step rests on the prior: it is the spec-only tier, and the
    prior share (a feature of the predictive uncertainty) is all of it."""
    hw = load_hardware("h100-sxm")
    model, par = load_model("llama3-8b"), ParallelConfig(dp=8, tp=1, global_batch_size=32)
    work = decompose(model, par, hw, 8)
    assert evidence_tier(None) == TIERS[2]
    assert compose(work, None, draws=200).prior_share == pytest.approx(1.0)
    assert compose(work, trained_models(hw), draws=200).prior_share < 0.5


def test_float8_linears_and_overlaps_shorten_the_step():
    hw, model = load_hardware("h100-sxm"), load_model("llama3-70b")
    models = trained_models(hw)
    par = ParallelConfig(dp=32, tp=8, pp=1, micro_batch_size=1, global_batch_size=256, sequence_parallel=True,
                         sharding="distributed_optimizer", overlap_param_gather=False)

    def median(p, h=hw):
        return float(compose(decompose(model, p, h, 256), models, draws=300).quantile(0.5))

    base = median(par)
    assert median(par, replace(hw, gemm_dtype="float8")) < base
    assert median(replace(par, overlap_tp_comm=True)) < base
    assert median(replace(par, overlap_param_gather=True)) < base


@pytest.mark.parametrize("text, framework, expected", [
    ("fp8 (float8 linears)", "torchtitan", ("bfloat16", "float8")),
    ("bf16", "torchtitan", ("bfloat16", "bfloat16")),
    ("fp16 mixed", "Megatron-LM", ("float16", "float16")),
    (np.nan, "Megatron-LM via HF Accelerate MegatronLMPlugin", ("float32", "float32")),
    (np.nan, "Megatron-LM", ("bfloat16", "bfloat16")),
])
def test_row_precision(text, framework, expected):
    assert row_precision(text, framework) == expected


def test_unknown_hardware_is_named():
    from predictor.core.errors import PrismError
    with pytest.raises(PrismError, match="hardware=a100-sxm4-80gb"):
        import_microbench(MICROBENCH, "a100-sxm4-80gb", "unused")


def test_cli_imports_each_named_hardware(tmp_path, capsys):
    import json

    from predictor.app.cli import main
    assert main(["import-microbench", str(MICROBENCH), f"out={tmp_path}", "hardware=b200", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r["hardware"] for r in reports] == ["b200"] and (tmp_path / "microbench-b200.parquet").exists()
    assert main(["import-microbench", str(MICROBENCH), "hardware=b200"]) == 2
    assert "out=DIR is required" in capsys.readouterr().err


def _copy(tmp_path, edit=None):
    """A copy of data/microbench in ``tmp_path``/microbench; ``edit(name, frame)`` returns
    the frame each table is written back as."""
    folder = tmp_path / "microbench"
    folder.mkdir()
    for path in MICROBENCH.glob("*.csv"):
        frame = pd.read_csv(path)
        (edit(path.name, frame) if edit else frame).to_csv(folder / path.name, index=False)
    return folder


def test_tables_cut_to_their_headers_write_no_run(tmp_path, capsys):
    from predictor.app.cli import main
    from predictor.core.errors import PrismError
    folder = _copy(tmp_path, lambda name, frame: frame.head(0))
    with pytest.raises(PrismError, match="no rows for hardware=b200 .*only their headers; nothing written") as err:
        import_microbench(folder, "b200", tmp_path / "out")
    assert err.value.field == str(folder)
    assert main(["import-microbench", str(folder), f"out={tmp_path / 'out'}"]) == 2
    assert "no rows for hardware=h100-sxm" in capsys.readouterr().err
    assert not list(tmp_path.glob("out/*.parquet"))


def test_a_hardware_without_rows_of_its_own_is_named_with_its_keys(tmp_path):
    from predictor.core.errors import PrismError
    folder = _copy(tmp_path, lambda name, frame: frame[frame.device_key != "sm_100_B200"] if "device_key" in frame
                   else frame)
    with pytest.raises(PrismError, match=r"no rows for hardware=b200 .*none of their \d+ rows .*keys sm_100_B200"):
        import_microbench(folder, "b200", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_every_row_left_out_is_counted_by_reason(tmp_path):
    """20 B200 GEMM rows given m=0 and 20 a negative latency: each costs its forward row,
    and the backward rows that needed it, and the report counts each one."""
    def damage(name, frame):
        if name == "op_gemm_xla_perf_table.csv":
            rows = frame.index[(frame.device_key == "sm_100_B200") & (frame.dtype == "bf16xbf16->bf16")]
            frame.loc[rows[:20], "m"] = 0
            frame.loc[rows[20:40], "time_us_derived"] = -1.0
        return frame

    clean = import_microbench(MICROBENCH, "b200", tmp_path / "clean")
    damaged = import_microbench(_copy(tmp_path, damage), "b200", tmp_path / "damaged")
    # the shipped table's GEMMs of a dtype outside the vocabulary (mixed e4m3 x e5m2 fp8), counted
    assert list(clean.left_out) == [next(k for k in clean.left_out if k.startswith("gemm dtype outside"))]
    assert sum(damaged.rows.values()) + sum(damaged.left_out.values()) - sum(clean.left_out.values()) == \
        sum(clean.rows.values())
    assert damaged.left_out["shape not positive (a size missing, 0 or below)"] == 20
    assert damaged.left_out["latency missing or not a positive number"] == 20
    assert damaged.left_out["gemm backward: its forward or a gradient GEMM (m, k, n / k, n, m) left out"] > 40
    rows = read_samples(damaged.run_file)
    assert (rows.latency_us > 0).all() and (rows.loc[rows.op == "gemm", ["m", "n", "k"]] > 0).all(axis=None)


def test_a_repeated_gemm_shape_is_counted_not_a_crash(tmp_path):
    def repeat(name, frame):
        if name == "op_gemm_xla_perf_table.csv":
            return pd.concat([frame, frame[frame.device_key == "sm_100_B200"].head(2)])
        return frame

    report = import_microbench(_copy(tmp_path, repeat), "b200", tmp_path / "out")
    assert {k: v for k, v in report.left_out.items() if not k.startswith("gemm dtype outside")} == {
        "gemm shape repeated in the table (its first row kept)": 2}
