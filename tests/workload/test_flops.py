"""One FLOP count (predictor.workload.flops) against the published formulas it stands for."""
import pytest

from predictor.core.profiles import load_model
from predictor.core.specs import ModelConfig
from predictor.workload.flops import model_flops_per_step

GPT = ModelConfig(name="gpt-18.4b", family="gpt", num_layers=40, hidden_size=6144, num_heads=48, num_kv_heads=48,
                  head_dim=128, ffn_hidden_size=4 * 6144, vocab_size=51200, seq_length=2048, activation="gelu",
                  norm="layernorm", position="learned", tied_embeddings=True)
B, S = 1024, 2048


def test_megatron_count_is_the_non_causal_count_without_recompute():
    """72·B·s·L·h²·(1 + s/6h + V/12Lh): Megatron-LM's count for GPT."""
    L, h, V = GPT.num_layers, GPT.hidden_size, GPT.vocab_size
    megatron = 72 * B * S * L * h ** 2 * (1 + S / (6 * h) + V / (12 * L * h))
    assert model_flops_per_step(GPT, B * S, S, causal=False) == pytest.approx(megatron, rel=1e-12)


def test_narayanan_eq3_counts_the_layers_forward_again_under_full_recompute():
    """96·B·s·L·h²·(1 + s/6h + V/16Lh), arXiv 2104.04473 eq. 3: the output head is not recomputed."""
    L, h, V = GPT.num_layers, GPT.hidden_size, GPT.vocab_size
    eq3 = 96 * B * S * L * h ** 2 * (1 + S / (6 * h) + V / (16 * L * h))
    assert model_flops_per_step(GPT, B * S, S, causal=False, full_recompute=True) == pytest.approx(eq3, rel=1e-12)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "llama3-8b", "llama3-405b"])
def test_model_flops_are_palm_6n_plus_causal_attention(name):
    """PaLM appendix B: 6N + 12·L·h·s per token, the attention term halved for a causal mask."""
    m = load_model(name)
    h, L, s = m.hidden_size, m.num_layers, m.seq_length
    q, kv, f = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden_size
    matmul_weights = L * (2 * h * q + 2 * h * kv + (3 if m.activation == "swiglu" else 2) * h * f) + m.vocab_size * h
    assert model_flops_per_step(m, 7 * s, s) == pytest.approx(7 * s * (6 * matmul_weights + 6 * L * h * s), rel=1e-12)


@pytest.mark.parametrize("name", ["llama3-70b", "llama3-405b", "llama2-7b"])
def test_gqa_and_swiglu_count_as_megatron_core_counts_them(name):
    """megatron/training/training.py ``num_floating_point_operations`` (dense, no MoE):
    12·B·s·L·h²·((1 + g/n + s/h)·q/h + (f/h)·(3/2 if SwiGLU)) + 6·B·s·V·h."""
    m = load_model(name)
    h, L, s, n, g = m.hidden_size, m.num_layers, m.seq_length, m.num_heads, m.num_kv_heads
    q = n * m.head_dim
    gated = 1.5 if m.activation == "swiglu" else 1.0
    core = 12 * B * s * L * h * h * ((1 + g / n + s / h) * q / h + m.ffn_hidden_size / h * gated
                                     + m.vocab_size / (2 * L * h))
    assert model_flops_per_step(m, B * s, s, causal=False) == pytest.approx(core, rel=1e-12)


def test_a_causal_mask_halves_only_the_attention_term():
    full, causal = (model_flops_per_step(GPT, B * S, S, causal=c) for c in (False, True))
    attention = 3 * GPT.num_layers * 4 * S * GPT.hidden_size * B * S
    assert full - causal == pytest.approx(attention / 2, rel=1e-12)
