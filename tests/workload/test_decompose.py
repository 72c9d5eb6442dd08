"""The decomposition of a training step: FLOPs, collectives and placement."""
from dataclasses import replace

import numpy as np
import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.mesh import group_topology
from predictor.core.ops import FFN_ROLE, TP_FFN, TP_ROLES, Call, flops
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.latency.lookup import call_quantiles
from predictor.workload.decompose import PIPELINE_SPLITS, USERBUFFER_SMS, decompose
from predictor.workload.flops import model_flops_per_step


def _workload(*overrides, model="gpt3-13b", hardware="a100-sxm4-80gb"):
    cfg = load_config([f"model={model}", f"hardware={hardware}", *overrides])
    m, p = section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig)
    return decompose(m, p, section(cfg, "hardware", HardwareConfig))


def _step_flops(w, matmul_only=True):
    """Total FLOPs of one step over all GPUs."""
    per_replica = 0.0
    for stage in w.stages:
        for call in stage.forward + stage.backward:
            if call.role in ("compute", FFN_ROLE) and (not matmul_only or call.op in ("gemm", "attention", "bmm")):
                per_replica += call.count * flops(call.op, call.pass_, call.shape_dict)
    p = w.parallel
    return per_replica * w.micro_batches * p.dp * p.tp * p.cp


def _palm_flops(w):
    """6N per token for the weights' matmuls plus causal attention, PaLM appendix B
    (12·L·H·Q·T counts full attention; causal does half)."""
    return model_flops_per_step(w.model, w.tokens_per_step, w.seq)


@pytest.mark.parametrize("layout", [
    ("parallel.tp=1", "parallel.pp=1", "parallel.dp=1", "parallel.global_batch_size=4"),
    ("parallel.tp=8", "parallel.pp=4", "parallel.dp=2", "parallel.global_batch_size=64"),
    ("parallel.tp=4", "parallel.pp=2", "parallel.dp=2", "parallel.cp=2", "parallel.global_batch_size=16",
     "parallel.sequence_parallel=true"),
])
def test_matmul_flops_match_six_n_per_token(layout):
    w = _workload(*layout)
    # the vocabulary is padded to a multiple of 128·tp, so allow a little more
    assert _step_flops(w) == pytest.approx(_palm_flops(w), rel=0.02)


def test_full_recompute_adds_one_forward():
    base = _workload("parallel.tp=2", "parallel.global_batch_size=2")
    full = _workload("parallel.tp=2", "parallel.global_batch_size=2", "parallel.recompute=full")
    layers_fwd = sum(c.count * flops(c.op, c.pass_, c.shape_dict) for c in base.stages[0].forward
                     if c.role in ("compute", FFN_ROLE) and c.op in ("gemm", "attention") and c.count > 1)
    assert _step_flops(full) - _step_flops(base) == pytest.approx(layers_fwd * 2 * 2, rel=1e-6)


def test_per_op_recompute_reruns_every_second_projection_and_the_cheap_ops():
    """torchtitan's per-op policy on Llama 3 8B: of the mms wq, wk, wv, wo, w1, w3, w2 it
    reruns wk, wo and w3, and every op but the mms and the attention core."""
    job = ("parallel.tp=2", "parallel.global_batch_size=2")
    base = _workload(*job, model="llama3-8b")
    per_op = _workload(*job, "parallel.recompute=per_op", model="llama3-8b")
    m, tokens = base.model, 8192
    h, kv, ffn, layers = m.hidden_size, m.num_kv_heads * m.head_dim // 2, m.ffn_hidden_size // 2, m.num_layers
    reruns = 2 * tokens * h * (kv + h // 2 + ffn) * layers  # wk, wo (its k is h/tp), w3 on one TP rank
    extra = [c for c in per_op.stages[0].backward if c.pass_ == "fwd" and c.role in ("compute", FFN_ROLE)]
    assert sum(c.count * flops(c.op, c.pass_, c.shape_dict) for c in extra if c.op == "gemm") == reruns
    assert not any(c.op == "attention" for c in extra)
    assert {c.op for c in extra} - {"gemm"} == {"rmsnorm", "residual_add", "rope", "swiglu"}
    assert _workload(*job, "parallel.recompute=selective", model="llama3-8b").stages[0].backward != \
        per_op.stages[0].backward


def test_tensor_parallel_collectives_per_layer():
    plain = _workload("parallel.tp=8", "parallel.global_batch_size=8")
    sp = _workload("parallel.tp=8", "parallel.global_batch_size=8", "parallel.sequence_parallel=true")
    layers = plain.model.num_layers
    ar = [c for c in plain.stages[0].forward if c.role in TP_ROLES]
    # one per layer for the attention, one for the FFN: each side overlaps its own GEMMs
    assert [(c.op, c.role, c.count) for c in ar] == [("all_reduce", "tp", layers), ("all_reduce", TP_FFN, layers)]
    assert ar[0].shape_dict == {"group_size": 8, "message_bytes": 2048 * 5120 * 2}
    assert ar[0].ranks_per_node == 8 and ar[0].nodes == 1
    assert sorted(c.op for c in sp.stages[0].forward if c.role == "tp") == ["all_gather", "reduce_scatter"]
    assert sorted(c.op for c in sp.stages[0].forward if c.role == TP_FFN) == ["all_gather", "reduce_scatter"]


def test_data_parallel_reduction_and_placement():
    w = _workload("parallel.tp=8", "parallel.pp=2", "parallel.dp=4", "parallel.global_batch_size=32")
    [grads, opt] = [c for c in w.stages[0].step if c.role != "host"]
    assert grads.op == "all_reduce" and grads.role == "dp" and grads.nodes == 4  # tp fills each node
    assert opt.op == "optimizer_step"
    sharded = _workload("parallel.tp=8", "parallel.pp=2", "parallel.dp=4", "parallel.global_batch_size=32",
                        "parallel.sharding=distributed_optimizer")
    ops = [c.op for c in sharded.stages[0].step if c.role != "host"]
    assert ops == ["reduce_scatter", "all_gather", "optimizer_step"]
    assert sharded.stages[0].step[2].shape_dict["params"] * 4 == pytest.approx(opt.shape_dict["params"], rel=1e-6)
    assert w.stages[0].p2p.nodes == 2 and w.stages[-1].p2p is None


@pytest.mark.parametrize("dp, bucket", [(4, 40_000_000), (40, 40_000_000), (256, 256_000_000)])
def test_gradients_are_reduced_in_megatron_s_buckets(dp, bucket):
    """40 M parameters a bucket, or 1 M per data-parallel rank where more (Megatron-Core's
    bucket_size default): a large data-parallel group reduces in fewer, larger buckets."""
    import math
    w = _workload("parallel.tp=8", f"parallel.dp={dp}", "parallel.sharding=distributed_optimizer")
    grads = next(c for c in w.stages[0].step if c.op == "reduce_scatter")
    params = next(c for c in w.stages[0].step if c.op == "optimizer_step").shape_dict["params"] * dp
    assert grads.count == math.ceil(params / bucket)
    assert grads.shape_dict["message_bytes"] == pytest.approx(params / grads.count * 4, rel=1e-3)


def test_group_topology_follows_megatron_rank_order():
    assert group_topology(8, 1, 8) == (8, 1)     # tp inside a node
    assert group_topology(4, 2, 8) == (4, 1)     # cp=4 after tp=2: one node
    assert group_topology(16, 8, 8) == (1, 16)   # dp after a full node of tp
    assert group_topology(4, 4, 8) == (2, 2)


def test_invalid_layouts_name_the_field():
    with pytest.raises(PrismError, match="tp"):
        _workload("parallel.tp=3")
    with pytest.raises(PrismError, match="pp"):
        _workload("parallel.pp=200")


def test_fsdp_gathers_weights_per_layer_and_not_again_after_the_step():
    """ZeRO-3/FSDP keeps its weights sharded after the optimizer step; each forward and
    backward gathers them layer by layer, so the step has no gather of its own."""
    base = ("parallel.dp=8", "parallel.global_batch_size=8")
    fsdp = _workload(*base, "parallel.sharding=fsdp")
    zero1 = _workload(*base, "parallel.sharding=zero1")
    assert [c.op for c in fsdp.stages[0].step if c.role == "dp"] == ["reduce_scatter"]
    assert [c.op for c in zero1.stages[0].step if c.role == "dp"] == ["reduce_scatter", "all_gather"]
    gathers = [c for c in fsdp.stages[0].forward if c.role == "dp"]
    assert [(c.op, c.count) for c in gathers] == [("all_gather", fsdp.model.num_layers)]
    assert gathers == [c for c in fsdp.stages[0].backward if c.role == "dp"]


def test_eager_mixed_precision_casts_the_linear_weights_and_accumulates_gradients():
    """torch.autocast keeps fp32 weights (decompose._master_weights): each forward casts the
    linear layers' weights, each backward their gradients, a recomputed forward casts again,
    and each micro-batch after the first adds its gradients into .grad. Megatron (bf16
    weights, fused accumulation), FSDP (casts around its gathers) and a CPU do none of it."""
    cfg = load_config(["model=llama3-8b", "model.num_layers=2", "hardware=h100-sxm"])
    model, hw = section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig)
    par = ParallelConfig(global_batch_size=4)
    stage = decompose(model, par, hw, framework="eager").stages[0]
    linear = sum(c.shape_dict["k"] * c.shape_dict["n"] * c.count for c in stage.forward if c.op == "gemm")
    h, f, heads = model.hidden_size, model.ffn_hidden_size, model.num_heads + 2 * model.num_kv_heads
    per_layer = h * heads * model.head_dim + model.num_heads * model.head_dim * h + 3 * h * f  # qkv, out, SwiGLU
    assert linear == 2 * per_layer + h * model.vocab_size  # two layers and the head
    (cast,) = [c for c in stage.forward if c.op == "master_weights"]
    (back,) = [c for c in stage.backward if c.op == "master_weights"]
    assert (cast.pass_, back.pass_) == ("fwd", "bwd")
    assert cast.shape_dict["params"] == back.shape_dict["params"] == linear
    (accumulate,) = [c for c in stage.step if c.op == "grad_accumulate"]
    assert accumulate.count == 3 and accumulate.shape_dict["params"] > linear  # the embedding and norms too
    recomputed = decompose(model, ParallelConfig(global_batch_size=1, recompute="full"), hw, framework="eager")
    casts = sorted(c.pass_ for c in recomputed.stages[0].backward if c.op == "master_weights")
    assert casts == ["bwd", "fwd"] and not [c for c in recomputed.stages[0].step if c.op == "grad_accumulate"]
    cpu = section(load_config(["hardware=local-cpu"]), "hardware", HardwareConfig)
    for work in (decompose(model, par, hw), decompose(model, par, cpu, framework="eager"),
                 decompose(model, ParallelConfig(dp=2, sharding="fsdp", global_batch_size=8), hw, 2,
                           framework="eager")):
        calls = [c for st in work.stages for c in st.forward + st.backward + st.step]
        assert not [c for c in calls if c.op in ("master_weights", "grad_accumulate")]



def _margined(work):
    return [c for st in work.stages for c in st.forward + st.backward if "sm_margin" in c.shape_dict]


def test_userbuffers_take_sms_from_the_gemms_beside_their_collectives():
    """Megatron-Core's --tp-comm-overlap (Transformer Engine's pipeline and bulk methods) runs
    the row-parallel forward GEMMs and the column-parallel backward GEMMs on 132 - 16 SMs."""
    layout = ("parallel.tp=8", "parallel.sequence_parallel=true", "parallel.dp=1", "parallel.pp=1")
    work = _workload(*layout, "parallel.overlap_tp_comm=true", hardware="h100-sxm")
    hidden, layers = work.model.hidden_size, work.model.num_layers
    fwd = [c for c in _margined(work) if c.pass_ == "fwd"]
    bwd = [c for c in _margined(work) if c.pass_ == "bwd"]
    # proj, fc2: each in the pipeline's 4 pieces of m/4 rows
    assert sum(c.count for c in fwd) == 2 * layers * PIPELINE_SPLITS and all(c.shape_dict["n"] == hidden for c in fwd)
    assert sum(c.count for c in bwd) == 2 * layers and all(c.shape_dict["k"] == hidden for c in bwd)  # qkv, fc1
    assert not _margined(_workload(*layout, hardware="h100-sxm"))  # no overlap
    m, p, hw = work.model, work.parallel, work.hardware
    assert not _margined(decompose(m, p, hw, framework="torchtitan"))  # async TP is not userbuffers
    assert not _margined(decompose(m, replace(p, sequence_parallel=False), hw))  # userbuffers need SP
    plain = tuple(kv for kv in fwd[0].shape if kv[0] != "sm_margin")
    q, _ = call_quantiles([Call("gemm", "fwd", plain), Call("gemm", "fwd", fwd[0].shape)], None, hw, "bfloat16")
    np.testing.assert_allclose(q[1] / q[0], 132 / (132 - USERBUFFER_SMS))


def test_the_loss_is_megatrons_unfused_fp32_one_unless_fused_or_eager():
    work = _workload("parallel.tp=2", hardware="h100-sxm")
    m, p, hw = work.model, work.parallel, work.hardware

    def losses(w):
        return {c.op for st in w.stages for c in st.forward + st.backward if "cross_entropy" in c.op}
    assert losses(work) == {"vocab_parallel_cross_entropy"}
    assert losses(decompose(m, replace(p, loss_fusion=True), hw)) == {"cross_entropy"}
    assert losses(decompose(m, p, hw, framework="torchtitan")) == {"cross_entropy"}


def test_collectives_move_activations_in_the_training_precision():
    """A CPU trains in float32: small's tp=2 all-reduces move 393 KB, not bf16's 196 KB."""
    from predictor.core.profiles import load_hardware, load_model
    sizes = {}
    for name in ("local-cpu", "h100-sxm"):
        work = decompose(load_model("small"), ParallelConfig(tp=2, pp=2, global_batch_size=8), load_hardware(name), 4)
        stage = work.stages[0]
        sizes[name] = ({c.shape_dict["message_bytes"] for c in stage.forward if c.op == "all_reduce"},
                       stage.p2p.shape_dict["message_bytes"])
    assert sizes["local-cpu"] == ({256 * 384 * 4}, 256 * 384 * 4)
    assert sizes["h100-sxm"] == ({256 * 384 * 2}, 256 * 384 * 2)


def test_the_reference_keeps_its_head_whole_under_tp():
    """sampling/reference.py parallelizes the blocks only: its embedding and head run the whole
    vocabulary on every tp rank, where the frameworks split it."""
    from predictor.core.profiles import load_hardware, load_model
    from predictor.workload.decompose import REFERENCE_FRAMEWORK
    model, hw, par = load_model("small"), load_hardware("local-cpu"), ParallelConfig(tp=2)
    for framework, vocab in ((REFERENCE_FRAMEWORK, 4096), (None, 2048), ("torchtitan", 2048)):
        stage = decompose(model, par, hw, 2, framework=framework).stages[0]
        head = [c for c in stage.forward if c.op == "gemm" and c.role not in ("compute", FFN_ROLE)]
        assert [c.shape_dict["n"] for c in head] == [vocab], framework
        assert {c.shape_dict["vocab"] for c in stage.forward if c.op in ("embedding", "cross_entropy")} == {vocab}


def _counts(calls, op, pass_=None, role=None):
    return sum(c.count for c in calls if c.op == op and (pass_ is None or c.pass_ == pass_)
               and (role is None or c.role == role))


@pytest.mark.parametrize("hardware", ["local-cpu", "h100-sxm"])
def test_the_reference_s_recompute_stops_where_a_block_s_saved_tensors_are_rebuilt(hardware):
    """torch's non-reentrant checkpoint (early stop on) does not re-run a block's FFN down
    projection, the TP reduction after it or its closing residual add; Megatron's reentrant one
    and torchtitan's re-run the whole forward."""
    from predictor.core.profiles import load_hardware, load_model
    from predictor.workload.decompose import REFERENCE_FRAMEWORK
    model, hw = load_model("small"), load_hardware(hardware)
    layers, down = model.num_layers, {"m": 256, "n": model.hidden_size, "k": model.ffn_hidden_size // 2}
    for framework, rerun in ((REFERENCE_FRAMEWORK, 0), ("torchtitan", 1), ("megatron-core", 1)):
        plain, full = (decompose(model, ParallelConfig(tp=2, recompute=r), hw, 2, framework=framework).stages[0]
                       for r in ("none", "full"))
        recomputed_down = sum(c.count for c in full.backward if c.op == "gemm" and c.pass_ == "fwd"
                              and {k: c.shape_dict[k] for k in down} == down)
        assert recomputed_down == rerun * layers, framework
        # the attention's reduction always runs again, the FFN's where the whole forward does
        assert _counts(full.backward, "all_reduce", role="tp") - _counts(plain.backward, "all_reduce", role="tp") == (
            layers), framework
        assert (_counts(full.backward, "all_reduce", role=TP_FFN) - _counts(plain.backward, "all_reduce", role=TP_FFN)
                == rerun * layers), framework
        assert _counts(full.backward, "residual_add", "fwd") == (1 + rerun) * layers, framework
        # what runs before the tail runs again in every framework: the up projection and the attention
        assert _counts(full.backward, "attention", "fwd") == layers


def test_a_recomputed_forward_s_dtensor_pairs_are_priced_as_forward_pairs():
    """The recomputed forward's TP reductions sit in the backward; their DTensor pairs are forward
    pairs (on an H100 281 us, not the backward's 574)."""
    from predictor.core.profiles import load_hardware, load_model
    from predictor.workload.decompose import REFERENCE_FRAMEWORK
    model, hw = load_model("small"), load_hardware("h100-sxm")
    for framework, recomputed_pairs in (("torchtitan", 2), (REFERENCE_FRAMEWORK, 1)):
        plain, full = (decompose(model, ParallelConfig(tp=2, recompute=r), hw, 2, framework=framework).stages[0]
                       for r in ("none", "full"))
        layers = model.num_layers
        assert _counts(plain.forward, "dtensor", "fwd") == _counts(plain.backward, "dtensor", "bwd") == 2 * layers
        assert _counts(full.backward, "dtensor", "bwd") == 2 * layers, framework
        assert _counts(full.backward, "dtensor", "fwd") == recomputed_pairs * layers, framework
    megatron = decompose(model, ParallelConfig(tp=2, recompute="full"), hw, 2, framework="megatron-core").stages[0]
    assert not _counts(megatron.backward, "dtensor")


def test_gradients_are_reduced_over_the_context_and_data_ranks_of_a_node():
    # cp=2 inside a node of 8: the dp·cp group's 16 ranks fill 8 a node (2 nodes), not dp's 4 a node
    w = _workload("parallel.cp=2", "parallel.dp=8", "parallel.global_batch_size=8", "parallel.sequence_parallel=false",
                  model="llama3-8b", hardware="h100-sxm")
    [grads] = [c for c in w.stages[0].step if c.role == "dp"]
    assert grads.shape_dict["group_size"] == 16 and (grads.ranks_per_node, grads.nodes) == (8, 2)


@pytest.mark.parametrize("framework, one_byte", [("nemo", True), ("megatron-bridge", True), ("megatron-core", False)])
def test_fp8_recipes_gather_their_linear_weights_in_one_byte(framework, one_byte):
    def gathered(*overrides):
        cfg = load_config(["model=llama3-8b", "hardware=h100-sxm", "parallel.dp=8", "parallel.global_batch_size=8",
                           "parallel.sharding=distributed_optimizer", *overrides])
        m, p = section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig)
        w = decompose(m, p, section(cfg, "hardware", HardwareConfig), framework=framework)
        [gather] = [c for c in w.stages[0].step if c.op == "all_gather"]
        return gather.shape_dict["message_bytes"] * gather.count

    bf16, fp8 = gathered(), gathered("hardware.gemm_dtype=fp8")
    assert (fp8 < bf16) is one_byte
    if one_byte:  # the linear layers' weights (6.98 B of Llama 3 8B's 8.03 B) in one byte, the rest in two
        assert fp8 / bf16 == pytest.approx((8.03 - 6.98 / 2) / 8.03, abs=0.02)


@pytest.mark.parametrize("framework, grad_bytes", [("megatron-bridge", 2), ("megatron-core", 4), ("megatron-lm", 4)])
def test_gradients_reduced_in_the_frameworks_dtype(framework, grad_bytes):
    """Megatron-Bridge's performance recipes reduce gradients in bf16 (grad_reduce_in_fp32=False);
    Megatron-LM reduces a bf16 run's in fp32. The buffer holding them is as wide."""
    from predictor.core.framework import load_framework
    from predictor.workload.memory import memory_per_gpu

    cfg = load_config(["model=llama3-8b", "hardware=h100-sxm", "parallel.dp=8", "parallel.global_batch_size=8",
                       "parallel.sharding=distributed_optimizer"])
    m, p = section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig)
    w = decompose(m, p, section(cfg, "hardware", HardwareConfig), framework=framework)
    [grads] = [c for c in w.stages[0].step if c.op == "reduce_scatter"]
    params = sum(c.shape_dict["params"] for c in w.stages[0].step if c.op == "optimizer_step") * 8
    assert grads.shape_dict["message_bytes"] * grads.count / params == pytest.approx(grad_bytes, rel=0.01)
    spec = load_framework(framework)
    assert spec.grad_bytes == grad_bytes
    assert memory_per_gpu(m, p, grad_bytes=spec.grad_bytes).gradients == pytest.approx(
        memory_per_gpu(m, p).gradients * grad_bytes / 4)


def test_userbuffers_run_the_forward_linears_in_pieces_and_leave_the_last_reduce_scatter_piece_exposed():
    """Transformer Engine's initialize_ub defaults: qkv and fc1 forward in tp ring-exchange pieces,
    proj and fc2 forward in 4 pipeline pieces whose last reduce-scatter piece has no GEMM to hide under."""
    layout = ("parallel.tp=8", "parallel.sequence_parallel=true", "parallel.dp=1", "parallel.pp=1",
              "parallel.global_batch_size=4")
    on, off = (_workload(*layout, f"parallel.overlap_tp_comm={v}", hardware="h100-sxm") for v in ("true", "false"))
    hidden, layers = on.model.hidden_size, on.model.num_layers

    def gemms(work):
        return {(c.shape_dict["m"], c.shape_dict["n"], c.shape_dict["k"]): c.count
                for c in work.stages[0].forward if c.op == "gemm" and c.role in ("compute", FFN_ROLE)}

    whole = gemms(off)
    for (m, n, k), count in gemms(on).items():
        pieces = 8 if k == hidden else PIPELINE_SPLITS
        assert whole[(m * pieces, n, k)] * pieces == count  # the same FLOPs, in pieces
    tail = [c for c in on.stages[0].forward if c.role == "tp_tail"]  # the attention's and the FFN's
    rs = [c for c in off.stages[0].forward if c.op == "reduce_scatter" and c.role in TP_ROLES]
    assert {c.op for c in tail} == {"reduce_scatter"} and sum(c.count for c in tail) == sum(c.count for c in rs)
    assert sum(c.count for c in rs) == 2 * layers
    assert tail[0].shape_dict["message_bytes"] == rs[0].shape_dict["message_bytes"] // PIPELINE_SPLITS
    assert not [c for c in on.stages[0].backward if c.role == "tp_tail"]  # the backward's are bulk and ring overlaps


def _attention(calls, pass_="fwd"):
    return {(c.shape_dict["seq_kv"], c.shape_dict["causal"]): c.count for c in calls
            if c.op == "attention" and c.pass_ == pass_}


def test_sliding_window_layers_attend_over_their_window_of_keys():
    """gpt-oss alternates a 128-key window with global layers (its config's layer_types):
    each stage's windowed layers price their attention over 128 keys, the others over the
    whole sequence; the selective recompute re-runs each as it ran."""
    from predictor.workload.layers import stage_layers, windowed_layers
    w = _workload("parallel.pp=4", "parallel.dp=8", "parallel.ep=8", "parallel.recompute=selective",
                  model="gpt-oss-120b", hardware="h100-sxm")
    assert windowed_layers(w.model)[:4] == [True, False, True, False]
    per_stage = [s.windowed for s in stage_layers(w.model, w.parallel)]
    assert per_stage == [5, 4, 5, 4] and sum(per_stage) == 18  # 36 layers of 9 a stage
    for stage, windowed in zip(w.stages, per_stage):
        assert _attention(stage.forward) == {(128, False): windowed, (w.seq, True): stage.layers - windowed}
        recomputed = {k: v for k, v in _attention(stage.backward, "fwd").items()}
        assert recomputed == _attention(stage.forward)
        assert _attention(stage.backward, "bwd") == _attention(stage.forward)


def test_a_window_as_long_as_the_sequence_changes_nothing():
    plain = _workload(model="gpt3-1.3b")
    window = plain.seq
    cfg = load_config(["model=gpt3-1.3b", "hardware=a100-sxm4-80gb", f"+model.attention_window={window}"])
    m = section(cfg, "model", ModelConfig)
    same = decompose(m, section(cfg, "parallel", ParallelConfig), section(cfg, "hardware", HardwareConfig))
    assert same.stages[0].forward == plain.stages[0].forward


def test_gemma3_s_global_layer_is_every_sixth_and_the_unfused_path_keeps_its_scores():
    from predictor.workload.layers import windowed_layers
    w = _workload("parallel.tp=8", model="gemma3-27b", hardware="h100-sxm")
    assert [i for i, local in enumerate(windowed_layers(w.model)) if not local] == [5, 11, 17, 23, 29, 35, 41, 47,
                                                                                 53, 59]
    full = flops("attention", "fwd", dict(batch=1, heads=4, kv_heads=2, seq_q=w.seq, seq_kv=w.seq, head_dim=128,
                                          causal=True))
    local = flops("attention", "fwd", dict(batch=1, heads=4, kv_heads=2, seq_q=w.seq, seq_kv=1024, head_dim=128,
                                           causal=False))
    assert local / full == pytest.approx(2 * 1024 / w.seq)  # a 1,024-key band against half the square
    unfused = _workload("parallel.tp=8", "parallel.attention=unfused", model="gemma3-27b", hardware="h100-sxm")
    assert {c.shape_dict["seq_kv"] for c in unfused.stages[0].forward if c.op == "softmax"} == {unfused.seq}


def test_a_global_layer_rule_needs_a_window():
    with pytest.raises(PrismError, match="model.global_attention_every=2: .* give the window"):
        section(load_config(["model=gpt3-1.3b", "+model.global_attention_every=2"]), "model", ModelConfig)


def test_multi_token_prediction_modules_run_on_the_last_stage():
    """DeepSeek-V3's one module: a MoE layer in the last stage's slot count, the shifted
    tokens' lookup, two norms, the eh_proj (2h -> h) and the output layer and loss again."""
    from predictor.workload.layers import stage_layers
    plain = _workload("parallel.pp=8", "parallel.dp=32", "parallel.ep=32", model="deepseek-v3", hardware="h100-sxm")
    mtp = _workload("parallel.pp=8", "parallel.dp=32", "parallel.ep=32", "parallel.mtp_layers=1", model="deepseek-v3",
                    hardware="h100-sxm")
    stages = stage_layers(mtp.model, mtp.parallel)
    assert sum(s.layers for s in stages) == 62 and sum(s.moe for s in stages) == 58 + 1
    assert [s.mtp for s in stages] == [0] * 7 + [1]
    h = mtp.model.hidden_size

    def ends(stage):
        return (sum(c.count for c in stage.forward if c.role == "output"),
                sum(c.count for c in stage.forward if c.op == "gemm" and c.shape_dict["k"] == 2 * h),
                sum(c.count for c in stage.forward if c.op == "embedding"))
    assert ends(plain.stages[-1]) == (1, 0, 0) and ends(mtp.stages[-1]) == (2, 1, 1)
    assert ends(mtp.stages[0]) == (0, 0, 1)
    assert mtp.stages[-1].layers == stages[-1].layers


def test_multi_token_prediction_parameters_sit_on_the_last_stage():
    from predictor.workload.memory import stage_expert_parameters, stage_parameters
    cfg = load_config(["model=deepseek-v3", "hardware=h100-sxm", "parallel.pp=8", "parallel.ep=8", "parallel.dp=8"])
    m, p = section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig)
    with_mtp = replace(p, mtp_layers=1)
    from predictor.workload.layers import expert_parameters
    # one more MoE layer's routed experts in all (the split moves a layer off the last stage)
    assert sum(stage_expert_parameters(m, with_mtp)) - sum(stage_expert_parameters(m, p)) == \
        expert_parameters(m, p.ep, p.etp)
    before, after = stage_parameters(m, p), stage_parameters(m, with_mtp)
    eh_proj_and_norms = 2 * m.hidden_size ** 2 + 3 * m.hidden_size
    assert after[-1] > before[-1] + eh_proj_and_norms


@pytest.mark.parametrize("parallel, error", [("parallel.mtp_layers=-1", "parallel.mtp_layers"),
                                             ("parallel.mtp_layers=100", "parallel.mtp_layers=100: more than")])
def test_multi_token_prediction_counts_are_checked(parallel, error):
    with pytest.raises(PrismError, match=error):
        _workload(parallel, model="deepseek-v3", hardware="h100-sxm")
