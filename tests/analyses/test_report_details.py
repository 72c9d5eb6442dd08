"""A fifth new user's probe (2026-11-27) of predict, search, compare and variability."""
from dataclasses import replace

import pytest

from predictor.analyses.compare import compare
from predictor.analyses.predict import predict
from predictor.analyses.search import MAX_TOP, search
from predictor.app.render import format_comparison, format_search
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig


def test_mfu_is_reckoned_against_the_peak_the_gemms_run_at():
    """An nvfp4 Llama 3 405B on GB300 printed MFU 137.5% against bf16's peak."""
    hw = load_hardware("gb300-nvl72")
    fp4 = replace(hw, gemm_dtype="nvfp4")
    fp4.__post_init__()
    par = ParallelConfig(tp=8, pp=8, sequence_parallel=True, micro_batch_size=1, global_batch_size=9216,
                         overlap_tp_comm=True)
    p = predict(load_model("llama3-405b"), fp4, par, 4608, draws=500)
    assert 0 < p.mfu < 1
    assert fp4.mfu_peak == fp4.peak("nvfp4") > hw.mfu_peak == hw.peak(hw.train_dtype)


def test_search_caps_the_layouts_it_composes_in_full():
    with pytest.raises(PrismError, match="--json lists every ranked layout") as err:
        search(load_model("tiny"), load_hardware("h100-sxm"), 8, top=MAX_TOP + 1)
    assert err.value.field == "top"


def test_search_shows_ep_where_layouts_differ_by_it():
    """Mixtral's Pareto rows repeated: the same dp/tp/pp/cp at ep 1 and 8."""
    moe = format_search(search(load_model("tiny-moe"), load_hardware("h100-sxm"), 8, top=3))
    dense = format_search(search(load_model("tiny"), load_hardware("h100-sxm"), 8, top=3))
    header = [line for line in moe.splitlines() if line.lstrip().startswith("rank")][0]
    assert " ep " in header
    assert all(" ep " not in line for line in dense.splitlines() if line.lstrip().startswith("rank"))


def test_reports_show_the_layout_predict_shows():
    par = ParallelConfig(tp=2, pp=4, vpp=2, schedule="interleaved", ep=8, etp=2, moe_dispatcher="flex",
                         sequence_parallel=True, recompute="full")
    c = compare(load_model("mixtral-8x7b"), ["b200", "gb200-nvl72"], par, 64, draws=200)
    line = format_comparison(c).splitlines()[0]
    for setting in ("etp=2", "moe_dispatcher=flex", "vpp=2", "schedule=interleaved", "sequence_parallel=True",
                    "recompute=full"):
        assert setting in line


def test_a_tiny_speed_up_keeps_its_figures():
    c = compare(load_model("tiny"), ["h100-sxm", "local-cpu"], ParallelConfig(), 1, draws=200)
    row = [line for line in format_comparison(c).splitlines() if line.startswith("speed-up")][0]
    assert "0.00x" not in row


def test_settings_a_dense_model_ignores_are_named():
    p = predict(load_model("llama3-8b"), load_hardware("h100-sxm"), ParallelConfig(moe_capacity_factor=1.5), 64,
                draws=200)
    assert any("parallel.moe_capacity_factor=1.5: nothing to do" in n for n in p.notes)


def test_a_float32_run_is_told_its_memory_counts_two_byte_elements():
    hw = load_hardware("h100-sxm")
    p32 = predict(load_model("tiny"), replace(hw, train_dtype="float32"), ParallelConfig(), 1, draws=200)
    assert any("float32" in n and "twice" in n for n in p32.notes)
    assert not any("twice" in n for n in predict(load_model("tiny"), hw, ParallelConfig(), 1, draws=200).notes)


def test_one_node_is_one():
    with pytest.raises(PrismError, match="1 node and 4 GPUs"):
        predict(load_model("llama3-8b"), load_hardware("b200"), ParallelConfig(), 12)
