"""Mixture-of-Experts: configs, layout rules, decomposition, memory, FLOPs, rows, search."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor.analyses.search import enumerate_layouts
from predictor.core.errors import PrismError
from predictor.core.layout import validate_layout
from predictor.core.mesh import Mesh
from predictor.core.ops import flops
from predictor.core.profiles import DATA_DIR, load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.data.published import row_workload
from predictor.workload.decompose import OVERLAPPED_EP, decompose
from predictor.workload.flops import model_flops_per_step
from predictor.workload.layers import (
    active_parameters,
    dispatch_bytes,
    layer_ops,
    mlp_ops,
    moe_layers,
    parameter_count,
    routing_imbalance,
    stage_layers,
)
from predictor.workload.memory import memory_per_gpu

HW = load_hardware("h100-sxm")
QWEN = load_model("qwen3-235b-a22b")
#: A Qwen3-235B layout of the Megatron MoE model zoo (H100 table): TP2 PP8 EP32, 256 GPUs.
ZOO = ParallelConfig(dp=16, tp=2, pp=8, ep=32, sequence_parallel=True, global_batch_size=256,
                     recompute="selective", sharding="distributed_optimizer")

# Published totals (the models' cards): Mixtral 8x7B 46.7B (arXiv 2401.04088 sec. 2: 47B, 13B
# active), DeepSeek-V3 671B / 37B active (arXiv 2412.19437), Qwen3 235B / 22B and 30.5B / 3.3B
# (arXiv 2505.09388 Table 2), Llama 4 Scout 109B / 17B (Meta's card; the text model is ~2%
# less), Grok-1 314B (xai-org/grok-1 README), gpt-oss-120b 116.8B (model card Table 1), Qwen3-Coder
# 480B / 35B active (the Qwen/Qwen3-Coder-480B-A35B-Instruct card); and registry entries whose
# published totals the dense table of tests/app/test_config.py does not hold: LLaMA arXiv 2302.13971
# Table 2 (6.7B, 13.0B, 32.5B, 65.2B), GPT-NeoX-20B 20,554,567,680 (arXiv 2204.06745; its model card),
# Megatron-LM arXiv 1909.08053 Tables 1-2 (8.3B), Gemma 7B arXiv 2403.08295 Table 2 (786,825,216
# embedding + 7,751,248,896 non-embedding), Mistral Large 2 123B (the Mistral-Large-Instruct-2407
# card). PRISM counts no linear biases (NeoX's and Megatron's add under 0.1%).
TOTALS = {"mixtral-8x7b": (46.7, 12.9), "deepseek-v3": (671, 37), "qwen3-235b-a22b": (235, 22),
          "qwen3-30b-a3b": (30.5, 3.3), "llama4-scout": (109, 17), "grok-1": (314, None),
          "gpt-oss-120b": (116.8, None), "mixtral-8x22b": (141, 39), "qwen3-coder-480b-a35b": (480, 35),
          "llama-7b": (6.7, None), "llama-13b": (13.0, None), "llama-33b": (32.5, None), "llama-65b": (65.2, None),
          "gpt-neox-20b": (20.55, None), "megatron-gpt2-8.3b": (8.3, None), "gemma-7b": (8.54, None),
          "mistral-large-2": (123, None)}


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_configs_match_the_published_parameter_counts(name):
    model = load_model(name)
    total, active = TOTALS[name]
    assert parameter_count(model) / 1e9 == pytest.approx(total, rel=0.03)
    if active:
        assert active_parameters(model) / 1e9 == pytest.approx(active, rel=0.05)


def test_dense_paths_ignore_every_moe_setting():
    """num_experts = 0: the MoE fields of the model and of the layout change no call."""
    dense = load_model("llama3-8b")
    par = ParallelConfig(dp=2, tp=2, pp=2, cp=2, sequence_parallel=True, recompute="selective",
                         sharding="distributed_optimizer", global_batch_size=16)
    moe_knobs = replace(par, moe_dispatcher="flex", moe_capacity_factor=1.25, moe_force_balance=True,
                        overlap_ep_comm=True)
    decorated = replace(dense, top_k=2, moe_ffn_hidden_size=1024, shared_expert_ffn_hidden_size=512,
                        moe_layer_freq=2, first_dense_layers=1, router_score="sigmoid", moe_balancing="aux_free")
    base = decompose(dense, par, HW)
    for model, layout in ((decorated, par), (dense, moe_knobs), (decorated, moe_knobs)):
        other = decompose(model, layout, HW)
        assert [(s.forward, s.backward, s.p2p, s.step) for s in other.stages] == \
               [(s.forward, s.backward, s.p2p, s.step) for s in base.stages]
    assert moe_layers(dense) == [False] * dense.num_layers
    assert [st.moe for st in stage_layers(dense, replace(par, pp=4))] == [0, 0, 0, 0]
    assert memory_per_gpu(decorated, par).total == memory_per_gpu(dense, par).total
    assert model_flops_per_step(decorated, 4096, 4096) == model_flops_per_step(dense, 4096, 4096)


def test_a_dense_layer_is_its_attention_block_and_its_ffn():
    dense = load_model("llama3-8b")
    whole = layer_ops(dense, 1, 4096, 2, 1, True)
    assert whole == layer_ops(dense, 1, 4096, 2, 1, True, ffn=False) + mlp_ops(dense, 4096, dense.ffn_hidden_size // 2)
    assert [c.op for c in whole[-3:]] == ["gemm", "swiglu", "gemm"]


def test_layout_errors_name_the_field():
    with pytest.raises(PrismError, match="does not divide model.num_experts=128") as exc:
        validate_layout(QWEN, replace(ZOO, ep=3, dp=48, global_batch_size=480), 768)
    assert exc.value.field == "parallel.ep"
    with pytest.raises(PrismError, match="beyond the tp·cp·dp") as exc:
        validate_layout(QWEN, replace(ZOO, ep=64), 256)
    assert exc.value.field == "parallel.ep"
    with pytest.raises(PrismError, match="model.top_k=9") as exc:
        replace(load_model("mixtral-8x7b"), top_k=9)
    assert exc.value.field == "model.top_k"
    with pytest.raises(PrismError, match="no experts") as exc:
        validate_layout(load_model("llama3-8b"), ParallelConfig(dp=8, ep=8, global_batch_size=8))
    assert exc.value.field == "parallel.ep"
    with pytest.raises(PrismError) as exc:
        validate_layout(QWEN, replace(ZOO, sequence_parallel=False))
    assert exc.value.field == "parallel.sequence_parallel"


def test_expert_mesh_follows_megatron_core():
    """The experts' mesh spans tp·cp·dp: expert_dp = tp·cp·dp / (ep·etp); ep ranks are etp apart."""
    mesh = Mesh.of(ZOO, 8)
    assert mesh.expert_dp == 16 * 2 // 32 == 1
    assert mesh.topology("ep") == (8, 4)  # 32 consecutive ranks: 4 nodes of 8
    mesh = Mesh.of(replace(ZOO, ep=8, etp=2), 8)
    assert mesh.expert_dp == 2 and mesh.stride("ep") == 2 and mesh.stride("expert_dp") == 16


def test_moe_decomposition():
    par = replace(ZOO, moe_force_balance=True)
    work = decompose(QWEN, par, HW)
    fwd = work.stages[0].forward
    experts = [c for c in fwd if c.op == "grouped_gemm"]
    assert len(experts) == 2
    tokens = 4096 // 2  # the sequence-parallel shard routes its own tokens
    up = experts[0].shape_dict
    assert up["batch"] == 128 // 32 and up["n"] == 2 * 1536 and up["k"] == 4096
    balanced = tokens * 8 / 4
    assert balanced <= up["m"] <= 1.05 * balanced  # forced balance: only sampling noise
    assert experts[0].count == 11  # 94 layers in 32 chunks of 3 slots, the embedding's one on stage 0
    a2a = [c for c in fwd if c.op == "all_to_all"]
    assert len(a2a) == 1 and a2a[0].role == "ep" and a2a[0].count == 2 * 11
    assert a2a[0].shape_dict["group_size"] == 32 and (a2a[0].ranks_per_node, a2a[0].nodes) == (8, 4)
    assert {c.op for c in fwd} >= {"router", "permute", "unpermute"}
    # no dense FFN: every layer is MoE
    assert not [c for c in fwd if c.op == "gemm" and c.shape_dict["n"] == 2 * QWEN.ffn_hidden_size // 2]
    # expert_dp = 1: no expert gradient reduction; two optimizer steps (dense, experts)
    assert [c.op for c in work.stages[0].step if c.role == "optimizer"] == ["optimizer_step"] * 2
    overlapped = decompose(QWEN, replace(par, overlap_ep_comm=True), HW)
    assert {c.role for c in overlapped.stages[0].forward if c.op == "all_to_all"} == {OVERLAPPED_EP}


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex", "allgather"])
def test_each_dispatcher_rearranges_the_tokens_as_megatron_core_does(dispatcher):
    """megatron/core/transformer/moe/token_dispatcher.py: the all-to-all dispatcher permutes its
    tokens (top_k copies each) before the exchange and sorts the received chunks by local expert
    after it, then reverses both; DeepEP and HybridEP (flex) take the tokens unpermuted and permute
    what arrives; the all-gather dispatcher permutes once, with no chunks to sort."""
    par = replace(ZOO, moe_force_balance=True, moe_dispatcher=dispatcher)
    fwd = decompose(QWEN, par, HW).stages[0].forward
    shapes = [(c.op, c.shape_dict["tokens"], c.shape_dict["top_k"]) for c in fwd if c.op in ("permute", "unpermute")]
    rows = next(c for c in fwd if c.op == "grouped_gemm").shape_dict
    arrived = rows["batch"] * rows["m"]  # the rows this rank's experts take
    tokens = 4096 // 2  # the sequence-parallel shard's tokens
    expected = {"alltoall": [("permute", tokens, 8), ("permute", arrived, 1), ("permute", arrived, 1),
                             ("unpermute", tokens, 8)],
                "flex": [("permute", arrived, 1), ("unpermute", arrived, 1)],
                "allgather": [("permute", tokens, 8), ("unpermute", tokens, 8)]}[dispatcher]
    assert shapes == expected


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    par = replace(ZOO, ep=8)  # expert_dp = 16·2/8 = 4
    step = decompose(QWEN, par, HW).stages[0].step
    groups = sorted({c.shape_dict["group_size"] for c in step if c.role == "dp"})
    assert groups == [4, 16]


def test_first_dense_layers_and_mla():
    dsv3 = load_model("deepseek-v3")
    par = ParallelConfig(dp=32, pp=8, ep=32, global_batch_size=256, sharding="distributed_optimizer")
    assert [st.moe for st in stage_layers(dsv3, par)][:2] == [5, 8]  # 61 layers: 8 on stage 0, its first 3 dense
    work = decompose(dsv3, par, HW)
    fwd0 = work.stages[0].forward
    dense_up = [c for c in fwd0 if c.op == "gemm" and c.shape_dict["n"] == 2 * 18432]
    assert dense_up and dense_up[0].count == 3
    assert not [c for c in work.stages[1].forward if c.op == "gemm" and c.shape_dict["n"] == 2 * 18432]
    # MLA: the query and key-value down projections, their norms, a core of (128 + 64 + 128) / 2 wide heads
    assert any(c.op == "gemm" and c.shape_dict["n"] == 1536 for c in fwd0)
    assert any(c.op == "gemm" and c.shape_dict["n"] == 512 + 64 for c in fwd0)
    assert {c.shape_dict["head_dim"] for c in fwd0 if c.op == "attention"} == {160}


def test_memory_shards_experts_over_ep_and_expert_dp():
    small_ep = memory_per_gpu(QWEN, replace(ZOO, ep=8))
    large_ep = memory_per_gpu(QWEN, ZOO)
    assert large_ep.weights < small_ep.weights  # 4 experts a GPU instead of 16
    assert large_ep.parameters < small_ep.parameters


def test_moe_flops_count_the_active_experts():
    """Megatron-Core's count for Qwen3-235B (the model zoo's FLOPs per step, notes of the
    published rows: 1.2418e18 at gbs 2048 x 4096, causal attention halved)."""
    assert model_flops_per_step(QWEN, 2048 * 4096, 4096) == pytest.approx(1.2418e18, rel=0.01)


def test_grouped_gemm_costs_its_experts_gemms():
    shape = {"batch": 4, "m": 1000, "n": 3072, "k": 4096}
    one = {"m": 1000, "n": 3072, "k": 4096}
    for pass_ in ("fwd", "bwd"):
        assert flops("grouped_gemm", pass_, shape) == 4 * flops("gemm", pass_, one)
    assert flops("router", "fwd", {"tokens": 10, "hidden": 8, "experts": 4, "top_k": 2}) > 2 * 10 * 8 * 4


def test_routing_imbalance():
    t = 2048
    forced = routing_imbalance(QWEN, replace(ZOO, moe_force_balance=True), t)
    aux = routing_imbalance(QWEN, ZOO, t)
    aux_free = routing_imbalance(replace(QWEN, moe_balancing="aux_free"), ZOO, t)
    assert 1 < forced < aux_free < aux
    assert routing_imbalance(QWEN, replace(ZOO, moe_capacity_factor=1.1), t) == pytest.approx(min(aux, 1.1))
    assert routing_imbalance(QWEN, replace(ZOO, ep=1, dp=16), t) == 1.0
    # DeepEP sends a token once per node holding one of its experts: fewer bytes than alltoall
    topo = (8, 4)
    assert dispatch_bytes(QWEN, replace(ZOO, moe_dispatcher="flex"), t, topo) < dispatch_bytes(QWEN, ZOO, t, topo)


def test_published_moe_rows_read_their_expert_columns():
    table = pd.read_csv(DATA_DIR / "e2e" / "e2e_moe_blackwell_visible.csv")
    profiles: dict = {}
    job = row_workload(table.iloc[3], profiles)  # Qwen3-235B on H100, TP2 PP8 EP32
    m, p = job.model, job.parallel
    assert (m.num_experts, m.top_k, m.moe_ffn_hidden_size, m.head_dim) == (128, 8, 1536, 128)
    assert (p.ep, p.etp, p.moe_dispatcher) == (32, 1, "flex")
    dsv3 = row_workload(table.iloc[2], profiles).model
    assert (dsv3.first_dense_layers, dsv3.shared_expert_ffn_hidden_size, dsv3.kv_lora_rank) == (3, 2048, 512)
    with pytest.raises(PrismError) as exc:
        row_workload(table.iloc[8], profiles)  # Qwen3-Next: linear attention
    assert exc.value.field == "model"


def test_search_enumerates_ep_for_moe_models_only():
    moe = {p.ep for p in enumerate_layouts(QWEN, 256, 8, 512)}
    assert {1, 8, 32, 128} <= moe
    assert {p.ep for p in enumerate_layouts(load_model("llama3-8b"), 64, 8, 256)} == {1}


def test_trace_importer_reads_grouped_gemms():
    from predictor.data.importers.trace import FORWARD

    read = FORWARD["aten::_grouped_mm"]
    assert read("aten::_grouped_mm", {"Input Dims": [[4096, 512], [8, 512, 1024], [8]]}) == \
        ("grouped_gemm", {"batch": 8, "m": 512, "n": 1024, "k": 512})
    assert read("aten::_grouped_mm", {"Input Dims": [[4096, 256], [8, 512, 1024]]}) is None


def test_overlapped_deepep_all_to_alls_slow_the_compute_under_them():
    """Under --overlap-moe-expert-parallel-comm the all-to-alls hide under another micro-batch's
    compute, but DeepEP's kernels hold 20 of the H100's 132 SMs meanwhile: the pass costs
    max(M, C + 20/132·M), not max(M, C). NCCL's all-to-all (SM count not modelled) and an
    unoverlapped layout keep the plain rules."""
    from predictor.engine.stages import FORWARD_WORK, Part, StagePlan, draw_stage_sums, ep_sm_share, stage_times
    from predictor.latency.artifacts import trained_models
    from predictor.latency.lookup import QuantileCache

    flex = replace(ZOO, moe_dispatcher="flex", overlap_ep_comm=True)
    assert ep_sm_share(flex, HW) == pytest.approx(20 / 132)
    assert ep_sm_share(replace(flex, moe_dispatcher="alltoall"), HW) == 0.0
    assert ep_sm_share(replace(flex, overlap_ep_comm=False), HW) == 0.0
    assert ep_sm_share(flex, load_hardware("local-cpu")) == 0.0  # no SMs to share
    models = trained_models(HW)
    inside = replace(flex, ep=8)  # the all-to-alls on NVLink
    works = [decompose(QWEN, p, HW) for p in (inside, replace(inside, moe_dispatcher="alltoall"))]
    plan = StagePlan.of(works)
    sums = draw_stage_sums(plan, models, QuantileCache(models, HW), 1, np.random.default_rng(0))
    t = stage_times(plan, sums.nominal[..., None], sums.buckets, slice(None), 1.0, 1.0)
    rows = plan.starts  # each layout's first stage
    for row, share in zip(rows, (20 / 132, 0.0)):
        kind = plan.kind[row]
        comp, ep = sums.nominal[list(FORWARD_WORK), kind].sum(), sums.nominal[Part.FORWARD_EP_OVERLAPPED, kind]
        exposed = t.forward_comm[row, 0] - sums.nominal[Part.FORWARD_COMM, kind]
        assert 0 < ep < comp  # inside a node the compute covers them: the slowdown is all they cost
        assert exposed == pytest.approx(share * ep)
