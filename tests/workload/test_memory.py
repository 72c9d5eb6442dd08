"""The per-GPU memory model against published numbers and hand-computed formulas."""
from dataclasses import replace

import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.layout import layers_per_stage, validate_layout
from predictor.core.profiles import load_model, section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.workload.layers import layer_parameters, parameter_count
from predictor.workload.memory import (
    GiB,
    MemoryBreakdown,
    in_flight_microbatches,
    layer_activation_bytes,
    memory_per_gpu,
    memory_per_stage,
    model_state_bytes,
    padded_vocab,
    stage_parameters,
)


def gpt(h: int, a: int, layers: int, vocab: int = 51200, seq: int = 2048) -> ModelConfig:
    """A GPT-3-style layer as Korthikanti et al. model it: MHA, ffn = 4h, GeLU, dropout."""
    return ModelConfig(name=f"gpt-h{h}", family="gpt", num_layers=layers, hidden_size=h, num_heads=a,
                       num_kv_heads=a, head_dim=h // a, ffn_hidden_size=4 * h, vocab_size=vocab,
                       seq_length=seq, activation="gelu", norm="layernorm", position="learned",
                       tied_embeddings=True)


# Korthikanti et al. 2022 (arXiv 2205.05198) Table 3: heads, hidden, layers (all at t = 8, s = 2048).
KORTHIKANTI = {"22B": (64, 6144, 48), "175B": (96, 12288, 96), "530B": (128, 20480, 105),
               "1T": (160, 25600, 128)}


@pytest.fixture(scope="module")
def h100():
    return section(load_config(["hardware=h100-sxm"]), "hardware", HardwareConfig)


# ------------------------------------------------------------------ activations (Korthikanti)

@pytest.mark.parametrize("name", sorted(KORTHIKANTI))
def test_layer_activations_reproduce_korthikanti_table2(name):
    a, h, L = KORTHIKANTI[name]
    m, s, b, t = gpt(h, a, L), 2048, 1, 8
    sbh = s * b * h

    def act(tp, sp, rc):
        return layer_activation_bytes(m, s, b, tp, sp, rc, flash_attention=False)

    assert act(1, False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)
    assert act(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert act(t, True, "none") == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert act(t, False, "selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert act(t, True, "selective") == pytest.approx(sbh * 34 / t, rel=1e-12)
    assert act(t, False, "full") == pytest.approx(2 * sbh, rel=1e-12)
    assert act(t, True, "full") == pytest.approx(2 * sbh / t, rel=1e-12)
    # "reduces activation memory by 5x" (abstract): SP + selective against the TP-only baseline
    ratio = act(t, False, "none") / act(t, True, "selective")
    assert 4.5 < ratio < 6.5
    # ... and each technique alone cuts it roughly in half (Sec. 5, Fig. 7)
    assert 1.4 < act(t, False, "none") / act(t, True, "none") < 2.2
    assert 1.4 < act(t, False, "none") / act(t, False, "selective") < 2.2


def test_gpt3_175b_five_fold_reduction():
    a, h, L = KORTHIKANTI["175B"]
    m = gpt(h, a, L)
    base = layer_activation_bytes(m, 2048, 1, 8, False, "none", flash_attention=False)
    best = layer_activation_bytes(m, 2048, 1, 8, True, "selective", flash_attention=False)
    assert base / best == pytest.approx(23 / 4.25)  # (10 + 3 + 10) / (34/8)


def test_flash_attention_drops_the_score_term_like_selective_recompute():
    m = load_model("gpt3-175b")
    s, b, t = 2048, 1, 8
    flash = layer_activation_bytes(m, s, b, t, True, "none", flash_attention=True)
    selective = layer_activation_bytes(m, s, b, t, True, "selective", flash_attention=False)
    lse = 4 * (m.num_heads / t) * s * b  # FlashAttention's fp32 log-sum-exp
    assert flash == pytest.approx(selective + lse)
    assert layer_activation_bytes(m, s, b, t, True, "none", flash_attention=False) > 2 * flash


def test_gqa_and_swiglu_scale_the_sharded_terms():
    m = load_model("llama3-70b")  # 64 heads, 8 KV heads, ffn 28672, SwiGLU, no dropout
    s, b, t, h = 8192, 1, 8, m.hidden_size
    got = layer_activation_bytes(m, s, b, t, True, "selective", flash_attention=False)
    # norm in 4 + QKV in 2 + FFN in 2 (no dropout masks) / t; Q + context 4h/t; K + V 4h/8/t;
    # SwiGLU fc1 output (2 ffn) and product (ffn), 2 B each
    per_token = 8 * h / t + 4 * h / t + 4 * (h / 8) / t + 6 * m.ffn_hidden_size / t
    assert got == pytest.approx(s * b * per_token)
    # with the GPT layer's accounting (MHA, 4h GeLU, dropout) the same width gives 34/t
    assert layer_activation_bytes(replace(m, num_kv_heads=64, ffn_hidden_size=4 * h, activation="gelu"),
                                  s, b, t, True, "selective", False, dropout=True) == pytest.approx(s * b * h * 34 / t)


def test_context_parallel_divides_the_sequence():
    m = load_model("llama3-70b")
    one = layer_activation_bytes(m, 8192, 1, 8, True, "selective", cp=1)
    two = layer_activation_bytes(m, 8192, 1, 8, True, "selective", cp=2)
    assert two == pytest.approx(one / 2)


def test_first_stage_matches_megatron_theoretical_memory_estimator():
    # megatron/training/theoretical_memory_usage.py compute_activation_memory (SP + selective):
    # (s·b·h·(18 + 4·ffn/h)·L + 8·s·b·p + s·b·h·p) / t on the first stage with p micro-batches in flight
    a, h, L = KORTHIKANTI["175B"]
    m = gpt(h, a, L)
    par = ParallelConfig(dp=8, tp=8, pp=8, sequence_parallel=True, recompute="selective",
                         micro_batch_size=1, global_batch_size=256)  # m = 32 >= p
    s, b, p, t = 2048, 1, 8, 8
    megatron = (s * b * h * (18 + 4 * 4 * h / h) * L + 8 * s * b * p + s * b * h * p) / t
    got = memory_per_gpu(m, par, stage=0, flash_attention=False).activations
    assert got == pytest.approx(megatron, rel=1e-3)
    # Korthikanti Sec. 4.2.3: the first stage holds p micro-batches of L/p layers = sbhL·34/t
    assert got == pytest.approx(s * b * h * L * 34 / t, rel=5e-3)
    # interleaving multiplies the first stage by 1 + (p - 1)/(p·v)
    inter = replace(par, schedule="interleaved", vpp=3)
    got_i = memory_per_gpu(m, inter, stage=0, flash_attention=False).activations
    assert got_i == pytest.approx(got * (1 + (p - 1) / (p * 3)), rel=1e-12)


def test_output_layer_on_last_stage():
    a, h, L = KORTHIKANTI["175B"]
    m = gpt(h, a, L)
    par = ParallelConfig(dp=8, tp=8, pp=8, sequence_parallel=True, recompute="selective",
                         global_batch_size=64)
    s, t, v = 2048, 8, padded_vocab(m.vocab_size, 8)
    last = memory_per_gpu(m, par, stage=7, flash_attention=False)
    layers = layer_activation_bytes(m, s, 1, t, True, "selective", flash_attention=False)
    assert last.in_flight == 1
    # Korthikanti Sec. 4.3: 4·sbh/t·(1 + v/h) for the final norm, the head input and fp32 logits
    assert last.activations == pytest.approx(12 * layers + 4 * s * h / t * (1 + v / h))


# ------------------------------------------------------------------ pipeline schedules

def test_in_flight_microbatches_per_schedule():
    par = ParallelConfig(dp=2, pp=4, micro_batch_size=1, global_batch_size=16)  # m = 8
    assert [in_flight_microbatches(par, i) for i in range(4)] == [4, 3, 2, 1]
    assert [in_flight_microbatches(replace(par, schedule="gpipe"), i) for i in range(4)] == [8] * 4
    few = replace(par, global_batch_size=4)  # m = 2 < pp
    assert [in_flight_microbatches(few, i) for i in range(4)] == [2, 2, 2, 1]
    inter = replace(par, schedule="interleaved", vpp=2)
    assert in_flight_microbatches(inter, 0) == pytest.approx(4 * (1 + 3 / (4 * 2)))
    assert in_flight_microbatches(inter, 3) == 2.5  # (2·0 + (2 - 1)·4 + 1) chunks of half a stage
    # with m == pp Megatron's interleaved schedule runs every forward first: all m in flight
    assert in_flight_microbatches(replace(inter, global_batch_size=8), 0) == 4


def test_stage_none_reports_the_most_loaded_stage():
    m = load_model("llama3-70b")
    par = ParallelConfig(dp=16, tp=8, pp=4, sequence_parallel=True, recompute="selective",
                         global_batch_size=1024)
    stages = memory_per_stage(m, par)
    worst = memory_per_gpu(m, par)
    assert worst.total == max(x.total for x in stages) and worst.stage == 0  # 1F1B: stage 0 holds pp
    assert memory_per_gpu(m, par, stage=3).stage == 3
    with pytest.raises(PrismError, match="stage"):
        memory_per_gpu(m, par, stage=4)


def test_full_recompute_keeps_layer_inputs_plus_one_working_layer():
    m = load_model("llama3-70b")
    par = ParallelConfig(dp=16, tp=8, pp=4, sequence_parallel=True, recompute="full", global_batch_size=1024)
    got = memory_per_gpu(m, par, stage=1)
    s, h, t = 8192, m.hidden_size, 8
    working = layer_activation_bytes(m, s, 1, t, True, "none")
    assert got.activations == pytest.approx(3 * 20 * 2 * s * h / t + working)


# ------------------------------------------------------------------ parameters and model states

def test_layers_per_stage_megatron_rule():
    assert layers_per_stage(80, 4) == [20, 20, 20, 20]
    # two short of an even split: the embedding and the loss take a layer's slot on the
    # first and last stages (Megatron's account-for-embedding/loss-in-pipeline-split; the
    # Llama 3 paper's 126 layers on 16 stages, one fewer on the first and the last)
    assert layers_per_stage(10, 4) == [2, 3, 3, 2]
    assert layers_per_stage(126, 16) == [7] + [8] * 14 + [7]
    assert layers_per_stage(94, 32, vpp=3) == [2] + [3] * 30 + [2]  # 96 chunks of one slot
    assert layers_per_stage(94, 8, vpp=4) == [11] + [12] * 6 + [11]
    assert layers_per_stage(61, 8) == [8] * 5 + [7] * 3  # otherwise the remainder up front
    assert sum(layers_per_stage(105, 35)) == 105
    with pytest.raises(PrismError, match="parallel.pp"):
        layers_per_stage(4, 5)


def test_more_chunks_than_layers_only_with_the_embedding_and_loss_slots():
    qwen3 = load_model("qwen3-235b-a22b")
    validate_layout(qwen3, ParallelConfig(pp=32, vpp=3, schedule="interleaved", dp=4, global_batch_size=512), 128)
    with pytest.raises(PrismError, match="parallel.vpp"):
        validate_layout(qwen3, ParallelConfig(pp=32, vpp=4, schedule="interleaved", dp=4, global_batch_size=512),
                        128)


@pytest.mark.parametrize("name", ["llama3-70b", "gpt3-175b", "llama2-7b", "tiny"])
def test_stage_parameters_add_up_to_the_model(name):
    m = load_model(name)
    assert sum(stage_parameters(m, ParallelConfig(), vocab_multiple=1)) == parameter_count(m)
    pp = min(4, m.num_layers)
    split = stage_parameters(m, ParallelConfig(pp=pp), vocab_multiple=1)
    copy = m.vocab_size * m.hidden_size if m.tied_embeddings else 0  # tied head's copy on the last stage
    assert sum(split) == parameter_count(m) + copy


def test_tensor_parallel_shards_all_but_norms():
    m = load_model("llama3-70b")
    per_gpu = stage_parameters(m, ParallelConfig(tp=8), vocab_multiple=1)[0]
    _, norms = layer_parameters(m, 8)
    replicated = m.num_layers * norms + m.hidden_size  # layer norms + final norm
    assert 8 * per_gpu - parameter_count(m) == 7 * replicated
    assert padded_vocab(128256, 8) == 129024 and padded_vocab(50257, 1) == 50304


def test_zero_paper_figure1():
    # Rajbhandari et al. 2020 (arXiv 1910.02054) Fig. 1: Ψ = 7.5B, N_d = 64, K = 12, 2 + 2 + K bytes
    psi, nd = 7.5e9, 64
    expected = {"none": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for sharding, gb in expected.items():
        total = sum(model_state_bytes(psi, nd, sharding, grad_bytes=2))
        assert round(total / 1e9, 1) == gb, sharding
    assert sum(model_state_bytes(psi, nd, "distributed_optimizer", 2)) == sum(model_state_bytes(psi, nd, "zero1", 2))
    assert sum(model_state_bytes(psi, nd, "fsdp", 2)) == sum(model_state_bytes(psi, nd, "zero3", 2))


def test_megatron_bytes_per_parameter_and_dp_cp_sharding():
    m = load_model("gpt3-175b")
    base = ParallelConfig(dp=8, tp=8, pp=8, global_batch_size=64)
    st = memory_per_gpu(m, base, stage=0)
    assert st.weights + st.gradients + st.optimizer == pytest.approx(18 * st.parameters)  # 2 + 4 + 12
    dist = memory_per_gpu(m, replace(base, sharding="distributed_optimizer"), stage=0)
    assert dist.weights + dist.gradients + dist.optimizer == pytest.approx((6 + 12 / 8) * dist.parameters)
    # the distributed optimizer shards over dp x cp
    cp = memory_per_gpu(m, replace(base, dp=4, cp=2, global_batch_size=32, sharding="distributed_optimizer"), stage=0)
    assert cp.optimizer == pytest.approx(dist.optimizer)
    # zero3 adds two gathered layers to the sharded weights
    z3 = memory_per_gpu(m, replace(base, sharding="zero3"), stage=0)
    layer = sum(layer_parameters(m, 8))
    assert z3.weights == pytest.approx(2 * z3.parameters / 8 + 2 * layer * 2)
    assert z3.gradients == pytest.approx(4 * z3.parameters / 8)


def test_tied_embedding_copy_on_last_stage():
    m = load_model("gpt3-175b")  # tied
    one, many = stage_parameters(m, ParallelConfig(tp=8)), stage_parameters(m, ParallelConfig(tp=8, pp=8))
    embed = padded_vocab(m.vocab_size, 8) // 8 * m.hidden_size
    sharded, norms = layer_parameters(m, 8)
    assert many[-1] == 12 * (sharded + norms) + embed + 2 * m.hidden_size
    assert one[0] == 96 * (sharded + norms) + embed + m.seq_length * m.hidden_size + 2 * m.hidden_size


# ------------------------------------------------------------------ fits / does not fit

def test_llama3_70b_fits_h100_with_tp8_pp4(h100):
    m = load_model("llama3-70b")
    par = ParallelConfig(dp=16, tp=8, pp=4, sequence_parallel=True, recompute="selective",
                         sharding="distributed_optimizer", micro_batch_size=1, global_batch_size=1024)
    validate_layout(m, par, gpus=512)
    mem = memory_per_gpu(m, par)
    assert mem.fits(h100) and 25 < mem.total_gib < 60
    assert mem.total == pytest.approx(mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.workspace)
    assert mem.total_gib == pytest.approx(mem.total / GiB)
    single = memory_per_gpu(m, ParallelConfig(dp=512, micro_batch_size=1, global_batch_size=1024))
    assert not single.fits(h100) and single.total_gib > 1000  # 70.6B x 18 B alone is ~1.2 TiB


def test_breakdown_fits_compares_with_capacity(h100):
    mb = MemoryBreakdown(stage=0, weights=40 * GiB, gradients=0, optimizer=0, activations=38 * GiB,
                         workspace=2 * GiB)
    assert mb.total_gib == 80 and mb.fits(h100)
    assert not replace(mb, workspace=2.5 * GiB).fits(h100)


# ------------------------------------------------------------------ validation

LLAMA = load_model("llama3-70b")  # 64 heads, 8 KV heads, ffn 28672, 80 layers, seq 8192
OK = ParallelConfig(dp=16, tp=8, pp=4, global_batch_size=1024)


@pytest.mark.parametrize("change, field", [
    (dict(tp=3), "parallel.tp"),                       # 64 heads
    (dict(tp=16, dp=8, global_batch_size=1024), None),  # 16 > 8 KV heads: replicated, fine
    (dict(pp=81), "parallel.pp"),
    (dict(global_batch_size=1000), "parallel.global_batch_size"),
    (dict(micro_batch_size=3), "parallel.global_batch_size"),
    (dict(cp=3), "parallel.cp"),
    (dict(sharding="zero4"), "parallel.sharding"),
    (dict(recompute="some"), "parallel.recompute"),
    (dict(schedule="1f1b-magic"), "parallel.schedule"),
    (dict(vpp=2), "parallel.vpp"),
    (dict(schedule="interleaved"), "parallel.schedule"),
    (dict(schedule="interleaved", vpp=40), "parallel.vpp"),
    (dict(dp=0), "parallel.dp"),
    (dict(micro_batch_size=0), "parallel.micro_batch_size"),
])
def test_invalid_layouts_name_the_field(change, field):
    par = replace(OK, **change)
    if field is None:
        validate_layout(LLAMA, par)
        return
    with pytest.raises(PrismError, match=field.replace(".", r"\.")):
        validate_layout(LLAMA, par)
    with pytest.raises(PrismError, match=field.replace(".", r"\.")):
        memory_per_gpu(LLAMA, par)


def test_tp_must_divide_kv_heads_and_ffn():
    kv12 = replace(LLAMA, num_heads=48, num_kv_heads=12)
    with pytest.raises(PrismError, match=r"parallel\.tp=8.*num_kv_heads"):
        validate_layout(kv12, OK)
    odd_ffn = replace(LLAMA, ffn_hidden_size=28676)
    with pytest.raises(PrismError, match=r"parallel\.tp=8.*ffn_hidden_size"):
        validate_layout(odd_ffn, OK)
    with pytest.raises(PrismError, match=r"parallel\.tp=3.*num_heads"):
        validate_layout(LLAMA, replace(OK, tp=3))


def test_gpu_count_must_match_the_layout():
    validate_layout(LLAMA, OK, gpus=512)
    with pytest.raises(PrismError, match=r"gpus=500.*dp·tp·pp·cp.*512"):
        validate_layout(LLAMA, OK, gpus=500)
    with pytest.raises(PrismError, match=r"parallel\.cp"):
        validate_layout(LLAMA, replace(OK, cp=2), seq=8191)
