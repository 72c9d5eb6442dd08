"""What selective recompute's modules free in memory, and the note for a module the model lacks (probe 7)."""
from __future__ import annotations

import pytest

from predictor.analyses.predict import predict
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.workload.memory import layer_activation_bytes, memory_per_gpu


def _layer(model, recompute: str, modules: str = "", flash: bool = False) -> float:
    return layer_activation_bytes(model, model.seq_length, 1, 8, False, recompute, flash, 1, None, modules)


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-13b"])
def test_each_recomputed_module_frees_what_it_recomputes(name):
    """Listing only layernorm once freed the attention scores too (core_attn, Megatron's
    default), while the step time recomputed nothing of them."""
    m = load_model(name)
    none, default = _layer(m, "none"), _layer(m, "selective")
    assert _layer(m, "selective", "core_attn") == default < none
    s, h, heads, ffn = m.seq_length, m.hidden_size, m.num_heads / 8, m.ffn_hidden_size / 8
    assert none - _layer(m, "selective", "layernorm") == pytest.approx(s * 4 * h)  # the QKV and FFN inputs
    per_width = 6 if m.activation == "swiglu" else 4
    assert none - _layer(m, "selective", "mlp") == pytest.approx(s * per_width * ffn)
    more = default - _layer(m, "selective", "core_attn,layernorm,mlp")
    assert more == pytest.approx(s * 4 * h + s * per_width * ffn)
    assert none - default == pytest.approx((5 if m.family == "gpt" else 2) * heads * s * s)
    # modules of Mixture-of-Experts layers free nothing in a dense model's layers
    assert _layer(m, "selective", "moe,moe_act,shared_experts") == none


def test_moe_modules_take_their_share_off_a_moe_layer():
    m = load_model("qwen3-30b-a3b")
    total = {mods: memory_per_gpu(m, ParallelConfig(ep=8, dp=8, global_batch_size=64, recompute="selective",
                                                   recompute_modules=mods)).activations
             for mods in ("core_attn", "core_attn,moe_act", "core_attn,moe")}
    assert total["core_attn,moe"] < total["core_attn,moe_act"] < total["core_attn"]


def test_a_module_the_model_lacks_is_noted_not_claimed():
    kw = dict(model=load_model("llama3-8b"), hardware=load_hardware("h100-sxm"), draws=50)
    base = predict(layout=ParallelConfig(tp=8, dp=8), **kw)
    moe = predict(layout=ParallelConfig(tp=8, dp=8, recompute="selective", recompute_modules="moe"), **kw)
    assert moe.step_time_s["p50"] == pytest.approx(base.step_time_s["p50"], rel=0.02)
    assert moe.memory_gib["activations"] == pytest.approx(base.memory_gib["activations"])
    note = next(n for n in moe.notes if "recompute_modules" in n)
    assert "no moe to recompute" in note and "does count" not in note
