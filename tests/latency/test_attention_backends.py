"""The attention kernel a call runs (predictor.latency.attention_backends): cuDNN's on a
model of FlashAttention-2's microbenchmarks, and which rows run which."""
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from predictor.core.ops import Call
from predictor.core.profiles import load_hardware
from predictor.data.published import row_workload
from predictor.latency.adjustments.attention_kernel import CUDNN_OVER_FLASH, cudnn_over_flash
from predictor.latency.artifacts import ModelSet
from predictor.latency.lookup import Source, call_quantiles
from predictor.workload.layers import attention_ops


def test_the_ratio_table_is_the_h100_measurement():
    runs = pd.read_csv(ROOT / "measurements" / "h100-attention-backends.csv")
    ms = runs.pivot_table(index="seq", columns="backend", values=["fwd_ms", "bwd_ms"])
    for seq, (fwd, bwd) in CUDNN_OVER_FLASH.items():
        assert fwd == pytest.approx(ms.fwd_ms.cudnn[seq] / ms.fwd_ms.flash[seq], abs=5e-4)
        assert bwd == pytest.approx(ms.bwd_ms.cudnn[seq] / ms.bwd_ms.flash[seq], abs=5e-4)
    # between two measured lengths in log2, the nearest one's beyond them
    assert cudnn_over_flash("fwd", [1448, 512, 1 << 20]) == pytest.approx(
        [(0.557 + 0.528) / 2, 0.557, 0.579], abs=2e-3)


def _attention(kernel: str, seq: int) -> list[Call]:
    fwd = attention_ops(1, 16, 1, seq, seq, 128, kernel)[0]
    return [fwd, fwd.scaled(1, "bwd")]


def test_cudnn_calls_are_flashattention_data_times_the_measured_ratio():
    hw = load_hardware("h100-sxm")
    models = ModelSet.load(ROOT / "models" / "h100-sxm", hw)
    flash, flash_ev = call_quantiles(_attention("flash", 8192), models, hw, "bfloat16")
    cudnn, cudnn_ev = call_quantiles(_attention("cudnn", 8192), models, hw, "bfloat16")
    np.testing.assert_allclose(cudnn / flash, [[0.522] * flash.shape[1], [0.664] * flash.shape[1]], rtol=1e-9)
    assert all(e.source is Source.MODEL and "cuDNN" in e.text for e in cudnn_ev)
    assert not any("cuDNN" in e.text for e in flash_ev)
    # a roofline prior is the same for either kernel: nothing measured to convert
    b200 = load_hardware("b200")
    prior = [call_quantiles(_attention(k, 8192), None, b200, "bfloat16")[0] for k in ("flash", "cudnn")]
    np.testing.assert_array_equal(*prior)


def _moe_row(**cells) -> dict:
    from predictor.core.profiles import DATA_DIR
    runs = pd.read_csv(DATA_DIR / "e2e" / "e2e_moe_blackwell_visible.csv", dtype=str, keep_default_na=False)
    return runs[runs.set_id == "modelzoo_qwen3_h100_longctx"].iloc[0].to_dict() | cells


def test_megatron_core_runs_cudnn_on_hopper_and_later_only():
    hopper = row_workload(_moe_row(), {})
    assert hopper.parallel.attention == "cudnn" and any("attention cudnn" in n for n in hopper.assumed)
    ampere = row_workload(_moe_row(gpu="A100 80GB"), {})
    assert ampere.parallel.attention == "flash"
    titan = row_workload(_moe_row(framework="torchtitan"), {})
    assert titan.parallel.attention == "flash"
    legacy = row_workload(_moe_row(framework="Megatron-LM (2021)"), {})
    assert legacy.parallel.attention == "unfused"


def test_auto_is_the_frameworks_kernel_and_predict_says_which():
    from predictor.analyses.predict import predict
    from predictor.core.profiles import load_model
    from predictor.core.specs import ParallelConfig

    model, layout = load_model("llama3-8b"), ParallelConfig(tp=8, global_batch_size=8)
    auto = predict(model, load_hardware("h100-sxm"), layout, draws=200)
    flash = predict(model, load_hardware("h100-sxm"), ParallelConfig(tp=8, global_batch_size=8, attention="flash"),
                    draws=200)
    assert any("parallel.attention=auto: cudnn" in n for n in auto.notes)
    assert auto.step_time_s["p50"] < flash.step_time_s["p50"]  # cuDNN's kernel is the faster
    legacy = predict(model, load_hardware("h100-sxm"), layout, draws=200, framework="megatron-lm")
    assert any("auto: unfused" in n for n in legacy.notes)
    ampere = predict(model, load_hardware("a100-sxm4-80gb"), layout, draws=200)
    assert not any("parallel.attention" in n for n in ampere.notes)  # FlashAttention-2: nothing to say


def test_the_triton_ratio_is_the_published_a100_benchmark():
    from predictor.core.profiles import DATA_DIR
    from predictor.latency.adjustments.attention_kernel import triton_over_flash
    bench = pd.read_csv(DATA_DIR / "microbench" / "op_flashattention_tflops.csv", dtype=str)
    a100 = bench[bench.gpu.str.startswith("A100") & (bench.causal == "yes") & (bench.head_dim == "128")]
    at = {(r.implementation, int(r.seqlen)): float(r.tflops) for r in a100.itertuples() if r.tflops != "OOM"}
    want = at[("FlashAttention-2", 2048)] / at[("FlashAttention Triton", 2048)]  # 155 / 68
    assert triton_over_flash(True, 128, 2048)[0] == pytest.approx(want)
    # the nearest published head dimension; the nearest length beyond the published ones
    assert triton_over_flash(True, 112, 2048)[0] == pytest.approx(want)
    assert triton_over_flash(True, 128, 1 << 20)[0] == pytest.approx(
        at[("FlashAttention-2", 16384)] / at[("FlashAttention Triton", 16384)])


def test_triton_calls_are_flashattention_data_times_the_published_ratio():
    from predictor.latency.adjustments.attention_kernel import triton_over_flash
    hw = load_hardware("a100-sxm4-80gb")
    models = ModelSet.load(ROOT / "models" / "a100-sxm4-80gb", hw)
    flash, _ = call_quantiles(_attention("flash", 4096), models, hw, "bfloat16")
    triton, evidence = call_quantiles(_attention("flash_triton", 4096), models, hw, "bfloat16")
    np.testing.assert_allclose(triton / flash, triton_over_flash(True, 128, 4096)[0], rtol=1e-9)
    assert all("Triton/FA2 on A100" in e.text for e in evidence)


def test_a_row_saying_attn_impl_triton_runs_the_triton_kernel():
    from predictor.core.profiles import DATA_DIR
    from predictor.data.llmfoundry import llmfoundry_runs
    row = llmfoundry_runs(DATA_DIR / "e2e").iloc[0].to_dict()
    job = row_workload(row, {})
    assert job.parallel.attention == "flash_triton" and any("attn_impl triton" in n for n in job.assumed)
    plain = row_workload(dict(row, notes="H100 80GB BF16"), {})
    assert plain.parallel.attention != "flash_triton"  # the framework's own kernel on that GPU
