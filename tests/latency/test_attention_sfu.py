"""attention_sfu (predictor/latency/adjustments/attention_sfu.py): Blackwell Ultra's doubled
MUFU.EX2 rate prices fused attention where the profile states it, from the per-score shares
of tensor-core and SFU time, and nowhere else; GB300's larger memory reaches the fits verdict."""
import numpy as np
import pytest

from predictor.core.ops import Call
from predictor.core.profiles import load_hardware
from predictor.latency.adjustments import ADJUSTMENTS
from predictor.latency.adjustments.attention_sfu import exp_share
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.latency.pricer import Pricer
from predictor.workload.memory import MemoryBreakdown

SHAPE = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 8192, "seq_kv": 8192, "head_dim": 128, "causal": 1}


def _ratio(hardware: str) -> np.ndarray:
    hw = load_hardware(hardware)
    folder = models_dir() / hardware
    models = ModelSet.load(folder, hw) if folder.is_dir() else None  # b300 borrows b200's: priors here
    calls = [Call.of("attention", p, SHAPE) for p in ("fwd", "bwd")]
    calls.append(Call.of("gemm", "fwd", {"m": 4096, "n": 4096, "k": 4096}))
    q, _ = Pricer(models, hw).price(calls)
    q0, _ = Pricer(models, hw, adjustments=[a for a in ADJUSTMENTS if a.name != "attention_sfu"]).price(calls)
    return q[:, 3] / q0[:, 3]


def test_the_exponential_is_half_the_forward_and_two_sevenths_of_the_backward_at_head_dim_128():
    # forward 4·128 = 512 FLOPs per score at 8,192 per clock: 1/16 clock, as one exp at 16 per clock
    assert exp_share("fwd", 128, 1.0, 16.0) == pytest.approx(0.5)
    assert exp_share("bwd", 128, 1.0, 16.0) == pytest.approx(0.0625 / (1280 / 8192 + 0.0625))


@pytest.mark.parametrize("hardware", ["gb300-nvl72", "b300"])
def test_blackwell_ultra_prices_attention_faster_and_nothing_else(hardware):
    np.testing.assert_allclose(_ratio(hardware), [0.75, 1 - 0.5 * 0.0625 / (1280 / 8192 + 0.0625), 1.0])


@pytest.mark.parametrize("hardware", ["gb200-nvl72", "b200", "h100-sxm"])
def test_blackwell_and_hopper_are_left_alone(hardware):
    np.testing.assert_array_equal(_ratio(hardware), [1.0, 1.0, 1.0])


def test_gb300s_larger_memory_is_the_fits_verdicts():
    need = MemoryBreakdown(stage=0, weights=200 * 2**30, gradients=0.0, optimizer=0.0, activations=0.0,
                           workspace=0.0)  # 200 GiB: over GB200's 186, under GB300's 279
    assert not need.fits(load_hardware("gb200-nvl72")) and need.fits(load_hardware("gb300-nvl72"))
