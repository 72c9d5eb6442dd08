"""A training step as operator calls: per pipeline stage, per micro-batch, per step.

docs/method.md, Composer step 1. Compute ops come from :func:`predictor.workload.layers.layer_ops`
(TP splits heads and the FFN, CP splits the sequence); this module adds what
parallelism costs, following Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053;
Narayanan et al. 2021, arXiv 2104.04473; Korthikanti et al. 2022, arXiv 2205.05198):

- TP: per layer, two all-reduces of the ``[tokens, hidden]`` activation in the forward
  and two in the backward; with sequence parallelism each becomes an all-gather plus a
  reduce-scatter of the same tensor.
- CP: each layer's keys and values are gathered from the ``cp`` ranks in the forward
  and their gradients reduce-scattered in the backward.
- PP: one activation ``[tokens, hidden]`` sent forward and one gradient sent back per
  micro-batch and stage boundary (divided by tp with sequence parallelism).
- DP: the stage's gradients reduced once per step in buckets (all-reduce; reduce-scatter
  plus a parameter all-gather with a sharded optimizer); ZeRO-3/FSDP also gather each
  layer's weights before its forward and backward.
- Recompute: ``full`` runs each layer's forward again in its backward; ``selective``
  only the attention core, or the modules ``parallel.recompute_modules`` names
  (Megatron-Core ``--recompute-modules``).
- EP (Mixture-of-Experts layers, :func:`~predictor.workload.layers.moe_op_groups`): the
  router, permutations, grouped-GEMM experts and shared experts of each MoE layer; the
  tokens' all-to-all dispatch and combine over the ep group (forward, and again in the
  backward); the experts' gradients reduced, and their optimizer step sharded, over the
  expert-data-parallel group of Megatron-Core's expert mesh (tp·cp·dp/(ep·etp) ranks).
- TP overlap in Megatron-Core (``--tp-comm-overlap``, Transformer Engine's userbuffers):
  the row-parallel layers' forward GEMMs and the column-parallel layers' backward GEMMs
  share the GPU with their overlapped collectives' kernels (:func:`userbuffer_sms`).
- Host: each pass's framework calls as host ops (:mod:`predictor.workload.host`), in
  the pass's list beside the device calls; on a synchronous host (a CPU) the backward's
  as one call, the one ``backward()`` that enters the autograd engine once.

Group sizes, rank order and each group's placement on nodes come from the layout's
:class:`~predictor.core.mesh.Mesh`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from predictor.core.errors import PrismError
from predictor.core.framework import FrameworkSpec, load_framework, reference_framework
from predictor.core.layout import validate_layout, with_default_batch
from predictor.core.mesh import Mesh
from predictor.core.ops import DTYPE_BYTES, OPS, TP_FFN, Call
from predictor.core.precision import LOW_PRECISION_OPS, OUTPUT_ROLE, call_dtype
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.workload.host import (
    TP_REDUCTIONS,
    hook_calls,
    host_calls,
    host_family,
    one_dispatch,
    recomputed_pairs,
)
from predictor.workload.layers import (
    dispatch_bytes,
    layer_ops,
    mlp_ops,
    moe_op_groups,
    parameter_tensors,
    routed_tokens,
    routing_imbalance,
    stage_layers,
)
from predictor.workload.memory import (
    WEIGHT_BYTES,
    padded_vocab,
    stage_expert_parameters,
    stage_parameters,
)

#: The role of expert-parallel collectives that run under the other micro-batch's compute
#: (Megatron-Core --overlap-moe-expert-parallel-comm, "1F1B A2A overlap"): the composer
#: counts them like overlapped TP collectives, only where the pass's compute leaves them exposed.
OVERLAPPED_EP = "ep_overlapped"
#: SMs Transformer Engine's userbuffers take from an overlapped GEMM: its default for the
#: "pipeline" (proj and fc2 forward, with their reduce-scatter) and "bulk" (qkv and fc1
#: dgrad and wgrad) methods is ``num_sm`` = 16 with ``set_sm_margin``, so the GEMM runs
#: on the GPU's other SMs; "ring_exchange" (qkv and fc1 forward, proj and fc2 dgrad) uses
#: copy engines and one SM, no margin (transformer_engine/pytorch/module/base.py,
#: ``initialize_ub``: ``get_default_config``; Megatron-Core turns bulk dgrad and wgrad and
#: the reduce-scatter overlap on with --tp-comm-overlap).
USERBUFFER_SMS = 16
#: Pieces a "pipeline" userbuffers overlap splits its GEMM and reduce-scatter into (proj and
#: fc2 forward): ``num_splits`` 4 (``get_default_config`` in ``initialize_ub``, as above).
#: A "ring_exchange" overlap (qkv and fc1 forward) runs its GEMM in tp pieces, one per rank's
#: shard (``num_splits`` = tp_size).
PIPELINE_SPLITS = 4
#: Megatron's DDP bucket: 40 M parameters, or 1 M per data-parallel rank where more (its
#: ``bucket_size`` default: ``max(40000000, 1000000 * dp_group.size())``, "larger DP sizes need
#: larger buckets to ensure collectives do not become latency-bound",
#: megatron/core/distributed/distributed_data_parallel.py and distributed_data_parallel_config.py;
#: the dp·cp group's size in its training loop, megatron/training/models/dist_utils.py).
BUCKET_PARAMS = 40_000_000
BUCKET_PARAMS_PER_RANK = 1_000_000


def bucket_params(group: int) -> int:
    """Parameters of one DP bucket when ``group`` ranks reduce the gradients (:data:`BUCKET_PARAMS`)."""
    return max(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * group)


@dataclass
class StageWork:
    """What one pipeline stage does: per micro-batch forward and backward, once per step."""

    stage: int
    layers: int
    forward: list[Call] = field(default_factory=list)
    backward: list[Call] = field(default_factory=list)
    p2p: Call | None = None  # the activation sent to the next stage (the gradient comes back alike)
    step: list[Call] = field(default_factory=list)


@dataclass
class Workload:
    model: ModelConfig
    parallel: ParallelConfig
    hardware: HardwareConfig
    mesh: Mesh
    seq: int
    micro_batches: int
    stages: list[StageWork]

    @property
    def gpus(self) -> int:
        return self.mesh.world_size

    @property
    def tokens_per_step(self) -> int:
        return self.parallel.global_batch_size * self.seq


@functools.lru_cache(maxsize=1 << 16)
def _collective(op: str, message: float, group: int, count: int, role: str, topo) -> Call:
    """One Call object per distinct collective: a search makes the same ones thousands of times."""
    return Call.of(op, "step", {"message_bytes": int(message), "group_size": group}, count, role, topo)


def _moe_collectives(model, par, seq, mesh: Mesh, layers: int, act_bytes: int) -> list[Call]:
    """The forward collectives of ``layers`` MoE layers for one micro-batch, following
    Megatron-Core's token dispatchers: ``alltoall`` gathers the per-expert token counts, and
    it and ``flex`` (DeepEP, HybridEP) exchange the permuted tokens over the ep group in an
    all-to-all (:func:`~predictor.workload.layers.dispatch_bytes`), all-gather them over etp,
    and reverse both after the experts; ``allgather`` gathers every token of the ep·etp
    group and reduce-scatters the outputs. Without ep or etp the tokens never leave the GPU."""
    mbs, ep, etp = par.micro_batch_size, par.ep, par.etp
    fwd: list[Call] = []
    t_r = routed_tokens(model, par, mbs, seq)
    h = model.hidden_size
    ep_topo, etp_topo = mesh.topology("ep"), mesh.topology("etp")
    moved = dispatch_bytes(model, par, t_r, ep_topo, act_bytes)
    if ep * etp > 1 and par.moe_dispatcher == "allgather":
        gathered = ep * etp * t_r * h * act_bytes
        group, topo = ep * etp, ep_topo if ep > 1 else etp_topo
        fwd += [_collective("all_gather", gathered, group, layers, "ep", topo),
                _collective("reduce_scatter", gathered, group, layers, "ep", topo)]
    else:
        if ep > 1:
            if par.moe_dispatcher == "alltoall":  # DeepEP/HybridEP fuse the layout exchange into their kernels
                counts = ep * etp * model.num_experts * 8  # int64 tokens per expert, from every rank
                fwd.append(_collective("all_gather", counts, ep * etp, layers, "ep_counts", ep_topo))
            fwd.append(_collective("all_to_all", moved, ep, 2 * layers, "ep", ep_topo))
        if etp > 1:
            received = t_r * model.top_k * h * act_bytes * routing_imbalance(model, par, t_r) * etp
            fwd += [_collective("all_gather", received, etp, layers, "ep", etp_topo),
                    _collective("reduce_scatter", received, etp, layers, "ep", etp_topo)]
    return fwd


def _layer_calls(model, par, seq, tp_topo, cp_topo, layers: int, moe: int = 0,
                 mesh: Mesh | None = None, sm_margin: int = 0, act_bytes: int = 2,
                 early_stop: bool = False, windowed: int = 0) -> tuple[list[Call], list[Call]]:
    """Forward and backward calls of ``layers`` transformer layers, ``moe`` of them
    Mixture-of-Experts layers (:func:`_moe_calls`) and ``windowed`` of them attending within
    a sliding window (:func:`_windowed`), for one micro-batch; ``sm_margin``:
    :func:`userbuffer_sms`; ``act_bytes``: an activation element's bytes, which the
    collectives move (:func:`activation_bytes`); ``early_stop``: full recompute stops
    where each block's saved tensors are rebuilt (:func:`_early_stopped`)."""
    mbs, tp, cp = par.micro_batch_size, par.tp, par.cp
    if moe:
        dense = layers - moe
        dense_calls = [c.scaled(dense) for c in layer_ops(model, mbs, seq, tp, cp, par.sequence_parallel,
                                                          par.attention)] if dense else []
        attn = [c.scaled(moe) for c in layer_ops(model, mbs, seq, tp, cp, par.sequence_parallel, par.attention,
                                                 ffn=False)]
        groups = {name: [c.scaled(moe) for c in calls]
                  for name, calls in moe_op_groups(model, par, mbs, seq).items()}
        compute = dense_calls + attn + [c for calls in groups.values() for c in calls]
        linears = dense_calls + attn
        alike = [dense_calls, compute[len(dense_calls):]]  # a dense layer's calls, a MoE layer's
        fwd = list(compute)
        bwd = [c.scaled(1, "bwd") for c in compute]
        # TP collectives: a dense layer's two (attention, FFN), a MoE layer's attention's and,
        # with shared experts, theirs (the routed experts' tokens are already sequence-split).
        tp_sides = {"tp": layers, TP_FFN: dense + moe * (model.shared_expert_ffn_hidden_size > 0)}
        ep_calls = _moe_collectives(model, par, seq, mesh, moe, act_bytes)
        modules = _modules(model, dense_calls, attn, groups, ep_calls, dense, mbs * seq // cp, tp) \
            if par.recompute_modules else {}
    else:
        compute = layer_ops(model, mbs, seq, tp, cp, par.sequence_parallel, par.attention)
        linears = compute
        fwd = [c.scaled(layers) for c in compute]
        alike = [list(fwd)]  # fwd gains the collectives below
        bwd = [c.scaled(layers, "bwd") for c in compute]
        tp_sides, ep_calls = {"tp": layers, TP_FFN: layers}, []
        modules = _modules(model, fwd, [], {}, [], layers, mbs * seq // cp, tp) if par.recompute_modules else {}
    activation = mbs * seq // cp * model.hidden_size * act_bytes
    if tp > 1:  # each side's (attention, FFN) apart: each overlaps its own GEMMs
        ops = ("all_gather", "reduce_scatter") if par.sequence_parallel else ("all_reduce",)
        tp_fwd = [_collective(op, activation, tp, n, side, tp_topo) for side, n in tp_sides.items() if n for op in ops]
        fwd += _pipelined_tail(tp_fwd, tp_topo) if sm_margin else tp_fwd
        bwd += tp_fwd  # the backward mirrors each collective with its conjugate of equal size
    if cp > 1:
        kv = 2 * mbs * seq * max(model.num_kv_heads // tp, 1) * model.head_dim * act_bytes
        fwd.append(_collective("all_gather", kv, cp, layers, "cp", cp_topo))
        bwd.append(_collective("reduce_scatter", kv, cp, layers, "cp", cp_topo))
    if ep_calls:  # the backward exchanges the gradients alike (the token counts are reused)
        if par.overlap_ep_comm:
            ep_calls = [replace(c, role=OVERLAPPED_EP) if c.role == "ep" else c for c in ep_calls]
        fwd += ep_calls
        bwd += [c for c in ep_calls if c.role != "ep_counts"]
    if par.recompute == "full":  # every forward call, the layer's collectives included, runs again
        bwd += _early_stopped(fwd, model, mbs * seq // cp, tp, layers) if early_stop and not moe else fwd
    elif par.recompute == "per_op":  # its policy saves no collective's output: they run again too
        bwd += _per_op_recomputed(model, par.tp, alike) + [c for c in fwd if OPS[c.op].collective]
    elif par.recompute == "selective" and par.recompute_modules:
        bwd += [c for name in par.recompute_modules.split(",") for c in modules.get(name.strip(), [])]
    elif par.recompute == "selective":
        bwd += [c for c in fwd if c.op in ("attention", "bmm", "softmax")]
    if sm_margin:
        shapes = {c.shape for c in linears if c.op == "gemm"}
        fwd, bwd = (_margined(calls, shapes, model.hidden_size, sm_margin) for calls in (fwd, bwd))
        fwd = _in_pieces(fwd, shapes, model.hidden_size, tp)
    if windowed:
        fwd, bwd = (_windowed(calls, model.attention_window, windowed, layers) for calls in (fwd, bwd))
    return fwd, bwd


def _windowed(calls: list[Call], window: int, windowed: int, layers: int) -> list[Call]:
    """``calls`` with ``windowed`` of every ``layers`` fused attention calls attending within
    a sliding ``window`` of keys: FlashAttention, cuDNN and FlexAttention skip the key blocks
    outside it (Transformer Engine's ``window_size``), so a query block reads about ``window``
    keys: priced as non-causal attention over ``window`` keys, 4·b·h·s·window·d FLOPs. The
    unfused path computes every score and masks them: it keeps its full shape. Recomputed
    calls split alike (a selective or full recompute re-runs the layers it saved from)."""
    out = []
    for c in calls:
        s = c.shape_dict
        if c.op != "attention" or window >= s["seq_kv"]:
            out.append(c)
            continue
        local = round(c.count * windowed / layers)
        if c.count > local:
            out.append(replace(c, count=c.count - local))
        if local:
            out.append(Call(c.op, c.pass_, tuple(sorted({**s, "seq_kv": window, "causal": False}.items())), local,
                            c.role, c.ranks_per_node, c.nodes))
    return out


def _graphed(calls: list[Call], pass_: str, layers: int) -> list[Call]:
    """A pass's calls with its layers captured in CUDA graphs (Megatron-Core's
    ``--cuda-graph-impl`` local or transformer_engine: one graph a layer and pass, replayed by
    one launch; ``torch.cuda.graphs``): the host issues no kernel, framework call or
    collective of theirs, only the replays, one ``dispatch`` launch a layer."""
    return [c for c in calls if c.role != "host"] + [
        Call.of("dispatch", pass_, {"launches": max(1, layers)}, role="host")]


def _pipelined_tail(tp_fwd: list[Call], topo) -> list[Call]:
    """The forward's TP collectives under Transformer Engine's userbuffers: the
    reduce-scatter after proj and fc2 runs in :data:`PIPELINE_SPLITS` pieces, each under the
    next piece's GEMM, so the last piece's transfer has no GEMM left to hide under: it is a
    collective of its own (role ``tp``'s exposed kin, ``tp_tail``), the rest overlapped. The
    all-gathers before qkv and fc1 (ring exchange) begin on the local shard and hide whole."""
    out = []
    for c in tp_fwd:
        if c.op != "reduce_scatter":
            out.append(c)
            continue
        size, group = c.shape_dict["message_bytes"], c.shape_dict["group_size"]
        piece = size // PIPELINE_SPLITS
        out += [_collective("reduce_scatter", size - piece, group, c.count, c.role, topo),
                _collective("reduce_scatter", piece, group, c.count, "tp_tail", topo)]
    return out


def _in_pieces(calls: list[Call], linears: set[tuple], hidden: int, tp: int) -> list[Call]:
    """The forward's TP linears as userbuffers run them (``initialize_ub``'s defaults): a
    column-parallel GEMM (k = hidden: qkv, fc1) under a ring exchange in tp pieces of m/tp
    rows, a row-parallel one (n = hidden: proj, fc2) under the pipelined reduce-scatter in
    :data:`PIPELINE_SPLITS` pieces; each piece is priced at its own shape, where a GEMM of
    fewer rows runs less efficiently. (The backward's dgrad ring exchanges are priced whole:
    its calls are dgrad and wgrad together.)"""
    out = []
    for c in calls:
        s = c.shape_dict
        plain = c.op == "gemm" and tuple(kv for kv in c.shape if kv[0] != "sm_margin") in linears
        pieces = (tp if s.get("k") == hidden else PIPELINE_SPLITS if s.get("n") == hidden else 1) if plain else 1
        if pieces == 1 or s["m"] % pieces:
            out.append(c)
            continue
        out.append(Call(c.op, c.pass_, tuple(sorted({**s, "m": s["m"] // pieces}.items())), c.count * pieces,
                        c.role, c.ranks_per_node, c.nodes))
    return out


def _early_stopped(fwd: list[Call], model: ModelConfig, tokens: int, tp: int, layers: int) -> list[Call]:
    """The forward calls of ``layers`` dense blocks that torch's non-reentrant checkpoint runs
    again: with early stop (``torch.utils.checkpoint``, on unless
    ``set_checkpoint_early_stop(False)``) the recomputation ends once every tensor the block
    saved is rebuilt, so each block's FFN down projection (it saves its input and weight,
    both there before it runs), the TP reduction after it and the residual add that ends the
    block are not run again (a traced ``x @ w1 -> relu -> @ w2 -> + x`` block re-runs the
    first matmul and the relu alone, torch 2.13)."""
    down = mlp_ops(model, tokens, model.ffn_hidden_size // tp)[-1].shape
    out = []
    for c in fwd:
        tail = ((c.op == "gemm" and c.shape == down) or c.op == "residual_add"
                or (c.role == TP_FFN and c.op in TP_REDUCTIONS))
        if not tail:
            out.append(c)
        elif c.count > layers:  # a block's other calls of that shape still run
            out.append(Call(c.op, c.pass_, c.shape, c.count - layers, c.role, c.ranks_per_node, c.nodes))
    return out


def _margined(calls: list[Call], linears: set[tuple], hidden: int, sm_margin: int) -> list[Call]:
    """``calls`` with the GEMMs that run beside a userbuffers collective on fewer SMs marked
    by their ``sm_margin`` (a shape key the lookup reads, not a feature): of the layers'
    TP linears (shapes ``linears``), a row-parallel forward (n = hidden: attention output,
    FFN down) and a column-parallel backward (k = hidden: QKV, FFN up)."""
    def margined(c: Call) -> bool:
        if c.op != "gemm" or c.shape not in linears:
            return False
        s = c.shape_dict
        return s["n"] == hidden if c.pass_ == "fwd" else s["k"] == hidden
    return [c.keyed("sm_margin", sm_margin) if margined(c) else c for c in calls]


def neighbours(gpus: int, hw: HardwareConfig) -> int:
    """The other ranks computing on a rank's host beside it: on a synchronous host (a CPU,
    where the host is the device and its ranks share its caches and memory) the job's ranks
    on a node but one; 0 on a GPU (each rank computes on a device of its own)."""
    return 0 if hw.host.asynchronous else min(gpus, hw.node.gpus_per_node) - 1


def _beside(calls: list[Call], others: int) -> list[Call]:
    """``calls`` with every one but the collectives marked as run beside ``others`` ranks
    (``co_runners``: a shape key the lookup reads, not a feature;
    :mod:`predictor.latency.adjustments.co_run`)."""
    return [c if OPS[c.op].collective else c.keyed("co_runners", others) for c in calls]


def userbuffer_sms(par: ParallelConfig, framework: str | None, hw: HardwareConfig) -> int:
    """The SMs an overlapped TP collective holds beside its GEMM: :data:`USERBUFFER_SMS` for
    a framework whose spec runs Transformer Engine's userbuffers (``userbuffers``: Megatron-Core)
    with ``overlap_tp_comm`` (userbuffers need sequence parallelism) on a GPU; 0 elsewhere
    (torchtitan's async TP is not Transformer Engine's)."""
    on = (par.overlap_tp_comm and par.tp > 1 and par.sequence_parallel and hw.device.sms
          and load_framework(framework).userbuffers)
    if on and hw.device.sms <= USERBUFFER_SMS:  # the GEMM would run on no SM at all: an infinite step
        raise PrismError(f"hardware.device.sms={hw.device.sms}: parallel.overlap_tp_comm's collectives hold "
                         f"{USERBUFFER_SMS} SMs beside each GEMM, leaving it none of this GPU's; give its real SM "
                         f"count (132 on an H100 SXM)", field="hardware.device.sms")
    return USERBUFFER_SMS if on else 0


def _per_op_recomputed(model, tp: int, layers: list[list[Call]]) -> list[Call]:
    """The forward calls torchtitan's per-op selective activation checkpointing runs again
    in the backward (``selective_ac_option='op'``: ``_apply_ac_to_transformer_block`` in
    torchtitan/models/llama3/parallelize.py, and its Llama 3 8B train config). Its policy
    saves the outputs of ``aten.mm`` but every second one, counted per layer in the order
    they run, and of the attention core (SDPA); every other op of the layer runs again:
    norms, RoPE, activations, residual adds, the router and the experts' grouped GEMMs
    (not ``aten.mm``). ``layers``: the compute calls of alike layers in the order they
    run, each list of one kind; PRISM's fused projections (QKV, SwiGLU's gate and up of the
    FFN and of the shared experts) run in torchtitan as separate mms (wq, wk, wv; w1, w3),
    split here in that order."""
    heads, kv = model.num_heads // tp, max(model.num_kv_heads // tp, 1)
    qkv = [heads * model.head_dim, kv * model.head_dim, kv * model.head_dim]
    gate_up = {2 * (width // tp) for width in (model.ffn_hidden_size, model.shared_expert_ffn_hidden_size)
               if width} if model.activation == "swiglu" else set()
    out = []
    for calls in layers:
        mm = 0
        for c in calls:
            if c.op == "attention":
                continue
            if c.op != "gemm":
                out.append(c)
                continue
            s = c.shape_dict
            if s["k"] == model.hidden_size and s["n"] == sum(qkv) and not model.kv_lora_rank:
                widths = qkv
            elif s["k"] == model.hidden_size and s["n"] in gate_up:
                widths = [s["n"] // 2] * 2  # gate (w1) and up (w3)
            else:
                widths = [s["n"]]
            for width in widths:
                mm += 1
                if mm % 2 == 0:
                    out.append(c if len(widths) == 1 else Call.of("gemm", "fwd", {**s, "n": width}, c.count))
    return out


#: What a layer's calls do not depend on: the layout's data- and pipeline-parallel sizes,
#: schedule, batch and sharding (a search decomposes thousands of layouts alike in the rest).
_NOT_IN_LAYERS = ("dp", "pp", "vpp", "schedule", "global_batch_size", "sharding", "overlap_grad_reduce",
                  "overlap_param_gather", "overlap_tp_comm", "loss_fusion")
_LAYER_CACHE: dict[tuple, tuple[list[Call], list[Call]]] = {}


def _layer_key(model, par, seq, tp_topo, cp_topo, sm_margin: int, act_bytes: int, early_stop: bool) -> tuple:
    """What :func:`_layer_calls` reads of a workload but the stage's layer counts and mesh."""
    return (tuple(vars(model).values()), tuple(v for k, v in vars(par).items() if k not in _NOT_IN_LAYERS),
            seq, tp_topo, cp_topo, sm_margin, act_bytes, early_stop)


def _cached_layer_calls(base: tuple, model, par, seq, tp_topo, cp_topo, layers: int, moe: int, mesh: Mesh,
                        sm_margin: int, act_bytes: int, early_stop: bool, windowed: int):
    """:func:`_layer_calls`, remembered across workloads by every value it reads (``base``:
    :func:`_layer_key`, computed once per workload; the same Call objects come back for
    equal inputs, as the composer's stage identity expects)."""
    key = (base, layers, moe, windowed, (mesh.topology("ep"), mesh.topology("etp")) if moe else None)
    if key not in _LAYER_CACHE:
        if len(_LAYER_CACHE) > 4096:
            _LAYER_CACHE.clear()
        _LAYER_CACHE[key] = _layer_calls(model, par, seq, tp_topo, cp_topo, layers, moe, mesh, sm_margin, act_bytes,
                                         early_stop, windowed)
    return _LAYER_CACHE[key]


def _modules(model, dense_calls, attn, groups, ep_calls, dense: int, tokens: int, tp: int) -> dict[str, list[Call]]:
    """The forward calls each of Megatron-Core's ``--recompute-modules`` re-runs in the
    backward (megatron/core/transformer/transformer_config.py ``recompute_modules``):
    core_attn (the attention core), layernorm (the two pre-norms), mlp (the dense layers'
    FFN), moe (a MoE layer's FFN half, its token exchange included), moe_act (the experts'
    activation), shared_experts, mla_up_proj (MLA's query and key-value up projections)."""
    layer = dense_calls + attn
    ffn = {(c.op, c.shape) for c in mlp_ops(model, tokens, model.ffn_hidden_size // tp)}
    mlp = [c for c in dense_calls if (c.op, c.shape) in ffn] if dense else []
    lora = {model.q_lora_rank, model.kv_lora_rank} - {0}
    return {
        "core_attn": [c for c in layer if c.op in ("attention", "bmm", "softmax")],
        "layernorm": [c for c in layer if c.op == model.norm and c.shape_dict.get("hidden") == model.hidden_size],
        "mlp": mlp,
        "moe": [c for calls in groups.values() for c in calls] + [c for c in ep_calls if c.role != "ep_counts"],
        "moe_act": groups.get("moe_act", []),
        "shared_experts": groups.get("shared_experts", []),
        "mla_up_proj": [c for c in layer if c.op == "gemm" and c.shape_dict.get("k") in lora],
    }


def _stage(model, par, stage: StageWork, first: bool, last: bool, params: int, tokens: int, vocab: int,
           dp_group: int, dp_topo, pp_topo, loss: str, act_bytes: int, fp8_weights: int,
           grad_bytes: int, bucket: int, mtp: int = 0) -> StageWork:
    """``stage`` (its layers' calls given) with the ends of the model it holds (``loss``: the
    op of the loss, :func:`loss_op`), its pipeline send and its once-per-step calls: DP
    gradient reduction, ZeRO gathers, optimizer step. The last stage's ``mtp`` multi-token
    prediction modules (their transformer layers among the stage's) each look the shifted
    tokens up in the embedding, norm them and the hidden states, project the two concatenated
    back to the hidden width (``eh_proj``) and end in the final norm, the output layer and
    the loss again (Megatron-Core's MultiTokenPredictionLayer)."""
    h = model.hidden_size
    sp_tokens = tokens // par.tp if par.sequence_parallel else tokens
    head = [Call.of(model.norm, "fwd", {"tokens": sp_tokens, "hidden": h}),
            Call.of("gemm", "fwd", {"m": tokens, "n": vocab, "k": h}, role=OUTPUT_ROLE),
            Call.of(loss, "fwd", {"tokens": tokens, "vocab": vocab})]
    lookup = Call.of("embedding", "fwd", {"tokens": tokens, "hidden": h, "vocab": vocab})
    ends = []
    if first:
        ends.append(lookup)
    if last:
        ends += head
        if mtp:
            ends += [c.scaled(mtp) for c in (lookup, Call.of(model.norm, "fwd", {"tokens": sp_tokens, "hidden": h}, 2),
                                             Call.of("gemm", "fwd", {"m": tokens, "n": h // par.tp, "k": 2 * h}),
                                             *head)]
    stage.forward += ends
    stage.backward += [c.scaled(1, "bwd") for c in ends]
    layers = stage.layers
    if not last:
        sent = tokens * model.hidden_size * act_bytes // (par.tp if par.sequence_parallel else 1)
        stage.p2p = _collective("send_recv", sent, 2, 1, "pp", pp_topo)
    tensors = max(1, round(parameter_tensors(model) * layers / model.num_layers))
    return _data_parallel(par, stage, params, dp_group, dp_topo, layers, tensors, fp8_weights, grad_bytes, bucket)


def _data_parallel(par, stage: StageWork, params: float, group: int, topo, layers: int, tensors: int,
                   fp8_weights: int, grad_bytes: int, bucket: int) -> StageWork:
    """``stage`` with the once-per-step calls of ``params`` parameters (in ``tensors``
    tensors, over ``layers`` layers) whose gradients are reduced over ``group`` ranks: the
    bucketed reduction, the sharded optimizer's gather of the updated weights (ZeRO-1/2 and
    Megatron's distributed optimizer), ZeRO-3/FSDP's per-layer weight gathers in each pass
    instead (their weights stay sharded after the step: the next forward gathers them), and
    the optimizer step, sharded over the group. ``fp8_weights`` of the parameters are gathered
    in one byte each (:func:`fp8_gathered_weights`), the rest in bf16; the gradients are reduced in
    ``grad_bytes`` each (the framework's ``grad_reduce_in_fp32``), in buckets of ``bucket``
    parameters (:func:`bucket_params`)."""
    sharded = par.sharding != "none"
    per_layer = par.sharding in ("zero3", "fsdp")
    if group > 1:
        buckets = max(1, math.ceil(params / bucket))
        grad_op = "reduce_scatter" if sharded else "all_reduce"
        stage.step.append(_collective(grad_op, params / buckets * grad_bytes, group, buckets, "dp", topo))
        if sharded and not per_layer:  # updated bf16 weights gathered back after the sharded step
            gathered = (params - fp8_weights) * WEIGHT_BYTES + fp8_weights
            stage.step.append(_collective("all_gather", gathered / buckets, group, buckets, "dp", topo))
        if per_layer:
            gather = _collective("all_gather", params / max(layers, 1) * WEIGHT_BYTES, group, layers, "dp", topo)
            stage.forward.append(gather)
            stage.backward.append(gather)
    opt_params = params // group if sharded else params
    stage.step.append(Call.of("optimizer_step", "step", {"params": max(opt_params, 1), "tensors": tensors,
                                                         "optimizer": "adamw"}, role="optimizer"))
    return stage


def fp8_gathered_weights(calls: list[Call], spec: FrameworkSpec, hw: HardwareConfig) -> int:
    """The weights among ``calls`` (one stage's backward: there each linear's GEMM is one call
    a layer, where a forward's may run in userbuffers' pieces) that a sharded optimizer gathers in
    fp8: those of the linear layers whose GEMMs run in a one-byte dtype, where the framework's
    fp8 recipe keeps its weights in fp8 (its ``fp8_param_gather``: Megatron-Core's
    --fp8-param-gather, which NeMo's and Megatron-Bridge's bf16_with_fp8_mixed turn on); 0 else."""
    if not spec.fp8_param_gather or not hw.gemm_dtype:
        return 0
    return gemm_weights(calls, "bwd", lambda c: c.op == "gemm" and DTYPE_BYTES[
        call_dtype(c.op, c.role, hw.train_dtype, hw.gemm_dtype, hw.gemm_ops)] == 1)


def gemm_weights(calls: list[Call], pass_: str, keep) -> int:
    """The weights (k·n of each GEMM, times its batch and count) of the calls of ``pass_``
    among ``calls`` that ``keep`` keeps."""
    return sum(c.shape_dict["k"] * c.shape_dict["n"] * c.shape_dict.get("batch", 1) * c.count
               for c in calls if c.pass_ == pass_ and keep(c))


def _expert_step(model, par, stage: StageWork, moe: int, experts: int, mesh: Mesh,
                 grad_bytes: int, bucket: int) -> StageWork:
    """``stage`` with its routed experts' once-per-step calls (Megatron-Core,
    :func:`_data_parallel`): over the expert-data-parallel group (tp·cp·dp/(ep·etp) ranks,
    not the dense layers' dp·cp), fc1 and fc2 of each local expert as tensors."""
    tensors = 2 * model.num_experts // par.ep * moe
    return _data_parallel(par, stage, experts, mesh.expert_dp, mesh.topology("expert_dp"), moe, tensors, 0,
                          grad_bytes, bucket)


def _master_weights(stage: StageWork, params: int, micro_batches: int) -> StageWork:
    """``stage`` with eager mixed precision's work on its fp32 weights (``torch.autocast``,
    as torchtitan trains without FSDP and PRISM's reference workload on CUDA): every forward
    (a recomputed one too) casts the linear layers' weights to the compute dtype, every
    backward casts their gradients back to fp32, and each micro-batch after the first adds
    its gradients into ``.grad``. Traced on an H200 (``llama3-8b``, two layers, four
    micro-batches, torch 2.11): 22.4 ms of casts and 15.4 ms of element-wise kernels in a
    115 ms step. Megatron keeps bf16 weights and accumulates in the weight-gradient GEMM
    (gradient-accumulation fusion); FSDP2 casts its shards around its gathers: neither pays this."""
    def weights(calls: list[Call]) -> int:
        return gemm_weights(calls, "fwd", lambda c: c.op in ("gemm", "grouped_gemm"))

    cast, recast = weights(stage.forward), weights(stage.backward)
    if cast:
        stage.forward.append(Call.of("master_weights", "fwd", {"params": cast}))
        stage.backward.append(Call.of("master_weights", "bwd", {"params": cast}))
    if recast:
        stage.backward.append(Call.of("master_weights", "fwd", {"params": recast}))
    if micro_batches > 1:  # in the later backwards, counted once per step with the optimizer's device work
        stage.step.append(Call.of("grad_accumulate", "step", {"params": max(params, 1)}, micro_batches - 1,
                                  role="optimizer"))
    return stage


def _quantize_calls(calls: list[Call], hw: HardwareConfig) -> list[Call]:
    """The casts of the low-precision GEMMs among ``calls`` (``hardware.gemm_dtype`` under one
    byte an element): each forward GEMM's activation [m, k] and each backward GEMM's output
    gradient [m, n], scaled and cast per call (Transformer Engine and torchao quantize the
    inputs of every fp8/fp4 GEMM). The weights are cast once per step and kept across
    micro-batches (Transformer Engine's ``is_first_microbatch``): not counted."""
    out = []
    for c in calls:
        if c.op not in LOW_PRECISION_OPS:
            continue
        dtype = call_dtype(c.op, c.role, hw.train_dtype, hw.gemm_dtype, hw.gemm_ops)
        if DTYPE_BYTES[dtype] >= DTYPE_BYTES[hw.train_dtype]:
            continue
        s = c.shape_dict
        rows = s["m"] * s.get("batch", 1)
        out.append(Call.of("quantize", c.pass_, {"tokens": rows, "hidden": s["k"] if c.pass_ == "fwd" else s["n"]},
                           c.count))
    return out


def attention_kernel(attention: str, framework: str | None, hw: HardwareConfig) -> str:
    """``parallel.attention`` as the job runs it. ``auto`` is the framework's own kernel on
    ``hw``, as its spec's ``attention`` names it per compute capability (None: the default
    framework): unfused for Megatron-LM before Core; Transformer Engine's for Megatron-Core,
    which is cuDNN's on compute capability 9.0 and later
    (:mod:`predictor.latency.adjustments.attention_kernel`); FlashAttention-2 otherwise (torch SDPA's
    choice changes with a version PRISM is not told)."""
    if attention in ("cudnn", "flash_triton") and hw.device.kind != "gpu":
        what = "cuDNN's fused attention" if attention == "cudnn" else "FlashAttention's Triton kernel"
        raise PrismError(f"parallel.attention={attention}: {what} runs on NVIDIA GPUs, and hardware="
                         f"{hw.name} is a {hw.device.kind.upper()}; use auto, flash (SDPA's) or unfused",
                         field="parallel.attention")
    if attention != "auto":
        return attention
    return load_framework(framework).attention_kernel(hw.device.compute_capability)


def __getattr__(name: str):
    """``REFERENCE_FRAMEWORK``: the framework of PRISM's reference workload
    (:mod:`sampling.reference`; :func:`predictor.core.framework.reference_framework`)."""
    if name == "REFERENCE_FRAMEWORK":
        return reference_framework().name
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def activation_bytes(hw: HardwareConfig) -> int:
    """Bytes of one activation element, what tensor-, context-, expert- and pipeline-parallel
    collectives move: the training precision's (bf16 or fp16 on a GPU, 2; a CPU's float32, 4,
    whose tp=2 all-reduces were priced at half their 393 KB for the reference's `small`). An
    fp8 recipe's GEMMs leave the activations between them in the training precision."""
    return int(DTYPE_BYTES[hw.train_dtype])


def loss_op(spec: FrameworkSpec, asynchronous: bool, fused: bool) -> str:
    """The loss's op under framework ``spec``: its ``loss_kernel`` on an asynchronous device
    (Megatron's own fp32 vocabulary-parallel cross entropy) unless ``fused``
    (``parallel.loss_fusion``), else torch's ``F.cross_entropy`` (eager frameworks, PRISM's
    reference model on a CPU), the one-pass kernel a fused loss stands closest to."""
    return spec.loss_kernel if asynchronous and not fused else "cross_entropy"


def vocab_multiple(framework: str | None) -> int:
    """What the vocabulary is padded to a multiple of (times tp), the spec's ``vocab.multiple``:
    Megatron's --make-vocab-size-divisible-by (128) by default; an eager framework (torchtitan,
    Hugging Face, PRISM's reference workload) keeps the tokenizer's size, GPT-2's odd 50,257
    included, whose output-layer GEMMs then run cuBLAS's unaligned kernels
    (:data:`~predictor.latency.features.UNALIGNED_PEAK_SHARE`)."""
    return load_framework(framework).vocab_multiple


def check_whole_nodes(gpus: int, hw: HardwareConfig) -> None:
    """A job of several nodes holds whole ones: refuse ``gpus`` that leave a part of one."""
    per_node = hw.node.gpus_per_node
    if gpus > per_node and gpus % per_node:
        nodes, rest = divmod(gpus, per_node)
        raise PrismError(f"gpus={gpus}: not a whole number of nodes of {per_node} GPUs (hardware.node.gpus_per_node "
                         f"of {hw.name}): {nodes} node{'s' * (nodes > 1)} and {rest} GPU{'s' * (rest > 1)} of another; "
                         f"choose a multiple of {per_node}, or at most {per_node} GPUs", field="gpus")


def decompose(model: ModelConfig, par: ParallelConfig, hw: HardwareConfig, gpus: int | None = None,
              seq: int | None = None, framework: str | None = None) -> Workload:
    """The operator calls of one training step of ``model`` laid out as ``par`` on ``hw``;
    ``framework`` (a family of ``predict``'s ``framework``) picks the host calls' table."""
    seq = seq or model.seq_length
    par = with_default_batch(par)
    if par.cuda_graphs and hw.device.kind != "gpu":
        raise PrismError(f"parallel.cuda_graphs=true: CUDA graphs replay kernels on an NVIDIA GPU, and hardware="
                         f"{hw.name} is a {hw.device.kind.upper()}; set parallel.cuda_graphs=false",
                         field="parallel.cuda_graphs")
    kernel = attention_kernel(par.attention, framework, hw)
    if kernel != par.attention:
        par = replace(par, attention=kernel)
    spec = load_framework(framework)
    recompute = spec.recompute(par.recompute)[0]
    if recompute != par.recompute:  # a copy only where the framework reads it otherwise: a search decomposes thousands
        par = replace(par, recompute=recompute)
    gpus = gpus or par.world_size
    validate_layout(model, par, gpus, seq)
    check_whole_nodes(gpus, hw)
    per_node = hw.node.gpus_per_node
    mesh = Mesh.of(par, per_node, hw.node.nvlink_domain)
    tp_topo, cp_topo, pp_topo = (mesh.topology(axis) for axis in ("tp", "cp", "pp"))
    dp_group, dp_topo = mesh.grad_group, mesh.grad_topology
    bucket = bucket_params(dp_group)  # one size for the dense and the expert buffers: DDP sizes it by dp·cp
    micro_batches = par.global_batch_size // (par.micro_batch_size * par.dp)
    tokens = par.micro_batch_size * seq // par.cp
    multiple = spec.vocab_multiple
    # the frameworks split the vocabulary over tp (Megatron's vocab-parallel layers, torchtitan's
    # ColwiseParallel head); PRISM's reference keeps its embedding, final norm and head whole on
    # every TP rank (sampling/reference.py), whose head GEMMs were priced at half their width
    shards = par.tp if spec.vocab_parallel else 1
    vocab = padded_vocab(model.vocab_size, shards, multiple) // shards
    params_per_stage = stage_parameters(model, par, multiple, shards)  # one GPU's TP shard of each stage
    family = host_family(framework, hw.host.asynchronous)
    experts_per_stage = stage_expert_parameters(model, par)
    sm_margin = userbuffer_sms(par, framework, hw)
    others = neighbours(gpus, hw)
    act_bytes = activation_bytes(hw)
    # PRISM's reference checkpoints each block with torch's non-reentrant wrapper, early stop on
    # (sampling/model.py); Megatron's reentrant CheckpointFunction re-runs the whole forward, and
    # torchtitan's wrapper takes early stop from its config: they re-run every call
    early_stop = spec.checkpoint_early_stop
    layer_key = _layer_key(model, par, seq, tp_topo, cp_topo, sm_margin, act_bytes, early_stop)
    built: dict[tuple, StageWork] = {}  # stages alike in layers, position and parameters make the same calls
    stages = []
    for i, st_layers in enumerate(stage_layers(model, par)):  # MoE and windowed counts 0 where the model has none
        first, last = i == 0, i == par.pp - 1
        layers, moe, windowed = st_layers.layers, st_layers.moe, st_layers.windowed
        key = (st_layers, first, last, params_per_stage[i])
        if key not in built:
            layer = _cached_layer_calls(layer_key, model, par, seq, tp_topo, cp_topo, layers, moe, mesh, sm_margin,
                                        act_bytes, early_stop, windowed)
            fwd, bwd = (list(calls) for calls in layer)  # copies: the ends are appended below
            st = _stage(model, par, StageWork(i, layers, fwd, bwd), first, last, params_per_stage[i],
                        tokens, vocab, dp_group, dp_topo, pp_topo, loss_op(spec, hw.host.asynchronous, par.loss_fusion),
                        act_bytes, fp8_gathered_weights(bwd, spec, hw), spec.grad_bytes, bucket, st_layers.mtp)
            if moe:
                st = _expert_step(model, par, st, moe, experts_per_stage[i], mesh, spec.grad_bytes, bucket)
            if spec.master_weights and hw.host.asynchronous and par.sharding not in ("zero3", "fsdp"):
                st = _master_weights(st, params_per_stage[i] + experts_per_stage[i], micro_batches)
            st.forward += _quantize_calls(st.forward, hw)
            st.backward += _quantize_calls(st.backward, hw)
            forward_host = host_calls(st.forward, "fwd", family, hw.host.asynchronous)
            st.forward += forward_host
            st.backward += recomputed_pairs(host_calls(st.backward, "bwd", family, hw.host.asynchronous), forward_host)
            tensors = sum(c.shape_dict["tensors"] for c in st.step if c.op == "optimizer_step")
            st.backward += hook_calls(tensors, dp_group)
            # a pass's framework calls as one (a recomputed forward's: one more inside the backward)
            st.forward = one_dispatch(st.forward, "fwd")
            st.backward = one_dispatch(one_dispatch(st.backward, "bwd"), "fwd")
            if par.cuda_graphs:
                st.forward, st.backward = (_graphed(calls, p, layers) for calls, p in ((st.forward, "fwd"),
                                                                                       (st.backward, "bwd")))
            elif par.recompute == "full":  # checkpointing's own host time, each layer a block
                st.forward.append(Call.of("checkpoint", "fwd", {"blocks": layers}, role="host"))
                st.backward.append(Call.of("checkpoint", "bwd", {"blocks": layers}, role="host"))
            if others:
                st.forward, st.backward, st.step = (_beside(calls, others) for calls in (st.forward, st.backward,
                                                                                        st.step))
            built[key] = st
        twin = built[key]
        stages.append(StageWork(i, layers, list(twin.forward), list(twin.backward), twin.p2p, list(twin.step)))
    return Workload(model, par, hw, mesh, seq, micro_batches, stages)
