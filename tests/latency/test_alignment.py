"""Unaligned matrix products (predictor.latency.features.unaligned) and the vocabulary an
eager framework keeps unpadded (predictor.workload.decompose.vocab_multiple): what made a
gpt3-1.3b step on an H100 40% slower than its aligned GEMMs would run."""
import dataclasses
import gzip
import json

import numpy as np
import pytest
from conftest import ROOT

from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.latency.features import UNALIGNED_PEAK_SHARE, compute_floor_us, unaligned
from predictor.workload.decompose import decompose


def _gemm(n: int, k: int = 2048, dtype: str = "bfloat16") -> dict:
    return {"m": np.array([1023]), "n": np.array([n]), "k": np.array([k]), "dtype": np.array([dtype])}


def test_an_odd_leading_dimension_runs_at_the_unaligned_share_on_a_gpu_only():
    h100, cpu = load_hardware("h100-sxm"), load_hardware("local-cpu")
    aligned, odd = (compute_floor_us("gemm", "fwd", _gemm(n), h100)[0] for n in (50304, 50257))
    assert odd / aligned == pytest.approx(50257 / 50304 / UNALIGNED_PEAK_SHARE)
    # the rows (tokens) never lead; fp32 runs CUDA cores either way; a CPU has no such kernels
    assert not unaligned(_gemm(50304), np.array(["bfloat16"]))[0]
    assert not unaligned(_gemm(50257, dtype="float32"), np.array(["float32"]))[0]
    on_cpu = [compute_floor_us("gemm", "fwd", _gemm(n), cpu)[0] for n in (50304, 50257)]
    assert on_cpu[1] / on_cpu[0] == pytest.approx(50257 / 50304)
    # an fp8 element is one byte whatever its block scales add: 576 = 36 x 16 is aligned
    assert not unaligned(_gemm(576, dtype="mxfp8"), np.array(["mxfp8"]))[0]
    assert unaligned(_gemm(584, dtype="mxfp8"), np.array(["mxfp8"]))[0]


def test_the_share_is_the_traced_unaligned_kernels():
    trace = json.load(gzip.open(ROOT / "measurements" / "h100-gpt3-1.3b-step-trace.json.gz"))
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and "align1" in e["name"]]
    assert len(kernels) == 12  # the output layer's forward and two backward GEMMs, 4 micro-batches
    flops = 2 * 1024 * 2048 * 50257  # seq 1024 tokens, hidden 2048, GPT-2's vocabulary
    seconds = np.array([e["dur"] for e in kernels]) * 1e-6
    peak = load_hardware("h100-sxm").peak("bfloat16")
    share = flops / seconds / peak
    assert share.min() > 0.10 and share.max() < 0.15
    assert UNALIGNED_PEAK_SHARE == pytest.approx(len(kernels) * flops / seconds.sum() / peak, abs=5e-4)


def test_megatron_pads_the_vocabulary_and_an_eager_framework_does_not():
    model = dataclasses.replace(load_model("gpt3-1.3b"), num_layers=2, seq_length=1024)
    heads = {fw: {c.shape_dict["n"] for c in decompose(model, ParallelConfig(global_batch_size=1),
                                                         load_hardware("h100-sxm"), framework=fw).stages[0].forward
                  if c.op == "gemm" and c.shape_dict["n"] > 50000} for fw in ("megatron-core", "torchtitan")}
    assert heads == {"megatron-core": {50304}, "torchtitan": {50257}}
