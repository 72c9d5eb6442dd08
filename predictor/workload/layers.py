"""Which operators, at which shapes, one training step of a model runs.

``layer_ops`` lists one transformer layer's compute ops with their tensor-parallel
sharded shapes (Megatron-LM's column/row split: TP divides heads and the FFN width,
Shoeybi et al. 2019, arXiv 1909.08053); :func:`predictor.workload.decompose.decompose`
builds the whole step on them (the embedding, output head, loss, optimizer step and
collectives are its own), and sampling plans take their targets from that step.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from predictor.core.layout import layers_per_stage
from predictor.core.ops import FFN_ROLE, Call
from predictor.core.specs import ModelConfig, ParallelConfig


def _attention_parameters(model: ModelConfig, tp: int) -> tuple[int, int]:
    """(TP-sharded, replicated) attention weights of one layer on one TP rank. Multi-head
    latent attention (DeepSeek-V2, arXiv 2405.04434 sec. 2.1; Megatron-Core
    ``MLASelfAttention``): the down projections (and their norms) are replicated over TP,
    the up projections and the output projection split by heads."""
    h, hd = model.hidden_size, model.head_dim
    heads = model.num_heads // tp
    if model.kv_lora_rank:
        rope, v, q_rank, kv_rank = model.qk_rope_head_dim, model.v_head_dim or hd, model.q_lora_rank, model.kv_lora_rank
        q_up = (q_rank or h) * heads * (hd + rope)
        sharded = q_up + kv_rank * heads * (hd + v) + heads * v * h
        replicated = (h * q_rank + q_rank if q_rank else 0) + h * (kv_rank + rope) + kv_rank
        return sharded, replicated
    kv = model.num_kv_heads // tp if model.num_kv_heads >= tp else 1  # replicated KV head
    return h * (heads + 2 * kv) * hd + heads * hd * h, 0


def _mlp_parameters(model: ModelConfig, width: int) -> int:
    return (3 if model.activation == "swiglu" else 2) * model.hidden_size * width


def layer_parameters(model: ModelConfig, tp: int = 1, moe: bool = False) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one transformer layer on one TP rank: the
    matmul weights (attention and FFN) and the two norms; no linear biases. ``moe``: a
    Mixture-of-Experts layer, whose FFN is its shared experts (TP-split like a dense FFN)
    and its router (replicated); its routed experts are :func:`expert_parameters`."""
    h = model.hidden_size
    attn, attn_replicated = _attention_parameters(model, tp)
    norm = 2 * h * (2 if model.norm == "layernorm" else 1)
    if moe:
        mlp = _mlp_parameters(model, model.shared_expert_ffn_hidden_size // tp)
        return attn + mlp, norm + attn_replicated + h * model.num_experts  # router: h x experts
    mlp = _mlp_parameters(model, model.ffn_hidden_size // tp)
    return attn + mlp, norm + attn_replicated


def moe_ffn(model: ModelConfig) -> int:
    """One routed expert's FFN width (``moe_ffn_hidden_size``, else ``ffn_hidden_size``)."""
    return model.moe_ffn_hidden_size or model.ffn_hidden_size


def expert_parameters(model: ModelConfig, ep: int = 1, etp: int = 1) -> int:
    """Routed-expert weights of one MoE layer on one GPU: its num_experts/ep experts, each
    split etp ways (Megatron-Core's grouped MLP: fc1 and fc2 per expert)."""
    return model.num_experts // ep * _mlp_parameters(model, moe_ffn(model) // etp)


def moe_layers(model: ModelConfig) -> list[bool]:
    """Which layers are Mixture-of-Experts layers: none for a dense model; else every
    ``moe_layer_freq``-th layer (Megatron-Core ``--moe-layer-freq N``: layer i if
    i % N == 0) after the ``first_dense_layers`` dense ones (DeepSeek-V3's first 3)."""
    if not model.num_experts:
        return [False] * model.num_layers
    return list(_pattern(model.num_layers, model.first_dense_layers, model.moe_layer_freq))


@functools.lru_cache(maxsize=256)
def _pattern(layers: int, first_dense: int, freq: int) -> tuple[bool, ...]:
    return tuple(i >= first_dense and i % freq == 0 for i in range(layers))


def windowed_layers(model: ModelConfig) -> list[bool]:
    """Which layers attend within a sliding window (:attr:`ModelConfig.attention_window`):
    none without one; else every layer but each ``global_attention_every``-th (layer i
    where (i + 1) % N == 0: gpt-oss's odd layers, Gemma 3's sixth)."""
    return list(_windowed_pattern(model.num_layers, bool(model.attention_window), model.global_attention_every))


@functools.lru_cache(maxsize=256)
def _windowed_pattern(layers: int, window: bool, every: int) -> tuple[bool, ...]:
    return tuple(window and not (every and (i + 1) % every == 0) for i in range(layers))


@dataclass(frozen=True)
class StageLayers:
    """The transformer layers one pipeline stage runs: how many, how many of them are MoE
    layers and how many attend within a sliding window; the last stage's include the
    multi-token prediction modules' (``mtp``), each one more layer of the model's last kind."""

    layers: int
    moe: int
    windowed: int
    mtp: int = 0


def stage_layers(model: ModelConfig, par: ParallelConfig) -> list[StageLayers]:
    """Each pipeline stage's :class:`StageLayers`. The ``parallel.mtp_layers`` multi-token
    prediction modules follow the decoder's layers on the last stage, each taking a layer's
    slot in the split (:func:`~predictor.core.layout.layers_per_stage`), as the recipes'
    pipeline layouts place them (Megatron-Bridge's DeepSeek-V3 layouts: ``[... "decoder" * 5,
    "mtp", "loss"]`` last); their transformer layer is built as the decoder's last
    (Megatron-Core's MTP block spec: a MoE layer in DeepSeek-V3), without a window. (A search
    decomposes thousands of layouts: remembered by the values it reads.)"""
    moe = (model.first_dense_layers, model.moe_layer_freq) if model.num_experts else None
    return list(_stage_layers(model.num_layers, moe, bool(model.attention_window), model.global_attention_every,
                              par.pp, par.vpp, par.mtp_layers))


@functools.lru_cache(maxsize=1024)
def _stage_layers(layers: int, moe: tuple[int, int] | None, window: bool, every: int, pp: int, vpp: int,
                  mtp: int) -> tuple[StageLayers, ...]:
    kinds = _pattern(layers, *moe) if moe else (False,) * layers
    kinds += kinds[-1:] * mtp
    windowed = _windowed_pattern(layers, window, every) + (False,) * mtp
    out, start = [], 0
    for n in layers_per_stage(layers + mtp, pp, vpp):
        out.append(StageLayers(n, sum(kinds[start:start + n]), sum(windowed[start:start + n])))
        start += n
    if mtp:
        out[-1] = replace(out[-1], mtp=mtp)
    return tuple(out)


def parameter_count(model: ModelConfig) -> int:
    """Trainable parameters: weights, norm gains (and LayerNorm biases); no linear biases."""
    h = model.hidden_size
    embeddings = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    positions = model.seq_length * h if model.position == "learned" else 0
    final_norm = h * (2 if model.norm == "layernorm" else 1)
    moe = sum(moe_layers(model))
    layers = (model.num_layers - moe) * sum(layer_parameters(model))
    if moe:
        layers += moe * (sum(layer_parameters(model, moe=True)) + expert_parameters(model))
    return layers + embeddings + positions + final_norm


def active_parameters(model: ModelConfig) -> int:
    """Parameters a token passes through: :func:`parameter_count` with top_k of the routed
    experts per MoE layer (DeepSeek-V3's 37B of 671B)."""
    moe = sum(moe_layers(model))
    unused = model.num_experts - model.top_k
    return parameter_count(model) - moe * unused * _mlp_parameters(model, moe_ffn(model)) if moe else \
        parameter_count(model)


def parameter_tensors(model: ModelConfig) -> int:
    """Parameter tensors (weights, norm gains and biases) outside the routed experts: the
    dense optimizer step's launch count. A MoE layer has its router and its shared experts'
    two instead of the FFN's two; its routed experts (two weights per expert in
    Megatron-Core's TEGroupedLinear) are counted with their own step."""
    norm = 2 if model.norm == "layernorm" else 1
    layer = 4 + 2 * norm  # qkv, out, up, down + two norms
    embeddings = 1 + (model.position == "learned") + (not model.tied_embeddings)
    moe = sum(moe_layers(model))
    if not moe:
        return model.num_layers * layer + embeddings + norm
    moe_layer = 2 + 2 * norm + 1 + 2 * (model.shared_expert_ffn_hidden_size > 0)
    return (model.num_layers - moe) * layer + moe * moe_layer + embeddings + norm


def attention_ops(micro_batch: int, heads: int, kv: int, seq_q: int, seq_kv: int, head_dim: int,
                  kernel: str = "flash") -> list[Call]:
    """The attention core: one fused kernel (FlashAttention-2 or SDPA's flash backend;
    cuDNN's or FlashAttention's Triton one, named in the call as its ``backend``:
    :mod:`predictor.latency.adjustments.attention_kernel`), or Megatron's unfused path before
    them: QK^T (baddbmm), the fused scale-mask-softmax, and PV (bmm)."""
    if kernel in ("flash", "cudnn", "flash_triton"):
        shape = {"batch": micro_batch, "heads": heads, "kv_heads": kv, "seq_q": seq_q, "seq_kv": seq_kv,
                 "head_dim": head_dim, "causal": True}
        return [Call.of("attention", "fwd", shape if kernel == "flash" else dict(shape, backend=kernel))]
    bh = micro_batch * heads  # grouped K/V are expanded to every query head first
    return [Call.of("bmm", "fwd", {"batch": bh, "m": seq_q, "n": seq_kv, "k": head_dim}),
            Call.of("softmax", "fwd", {"batch": micro_batch, "heads": heads, "seq_q": seq_q, "seq_kv": seq_kv,
                              "causal": True}),
            Call.of("bmm", "fwd", {"batch": bh, "m": seq_q, "n": head_dim, "k": seq_kv})]


def layer_ops(model: ModelConfig, micro_batch: int, seq: int, tp: int = 1, cp: int = 1,
              sequence_parallel: bool = False, attention: str = "flash", ffn: bool = True) -> list[Call]:
    """The compute ops of one transformer layer for one micro-batch.

    With context parallelism each rank holds ``seq / cp`` tokens and attends to the
    whole sequence's keys and values (gathered or passed round a ring). Sequence
    parallelism splits the norms and residual adds along the sequence over tp.
    """
    h, hd = model.hidden_size, model.head_dim
    heads, kv = model.num_heads // tp, max(model.num_kv_heads // tp, 1)
    with_ffn, ffn = ffn, model.ffn_hidden_size // tp
    t = micro_batch * seq // cp
    t_sp = t // tp if sequence_parallel else t
    norm = model.norm
    if model.kv_lora_rank:
        ops = _mla_ops(model, micro_batch, seq, t, t_sp, tp, cp, attention)
        return ops + mlp_ops(model, t, ffn) if with_ffn else ops
    ops = [
        Call.of(norm, "fwd", {"tokens": t_sp, "hidden": h}, 2),
        Call.of("gemm", "fwd", {"m": t, "n": (heads + 2 * kv) * hd, "k": h}),  # QKV
        *attention_ops(micro_batch, heads, kv, seq // cp, seq, hd, attention),
        Call.of("gemm", "fwd", {"m": t, "n": h, "k": heads * hd}),  # attention output
        Call.of("residual_add", "fwd", {"tokens": t_sp, "hidden": h}, 2),
    ]
    if model.position == "rope":
        ops.append(Call.of("rope", "fwd", {"tokens": t, "heads": heads, "head_dim": hd}))
        ops.append(Call.of("rope", "fwd", {"tokens": t, "heads": kv, "head_dim": hd}))
    if not with_ffn:  # a Mixture-of-Experts layer: moe_ops adds its router, experts and shared experts
        return ops
    return ops + mlp_ops(model, t, ffn)


def mlp_ops(model: ModelConfig, tokens: int, width: int) -> list[Call]:
    """A feed-forward block of ``width`` (one TP shard) over ``tokens``: up (gate and up
    for SwiGLU), the activation, down."""
    h, t = model.hidden_size, tokens
    up = 2 * width if model.activation == "swiglu" else width
    return [Call.of("gemm", "fwd", {"m": t, "n": up, "k": h}, role=FFN_ROLE),
            Call.of(model.activation, "fwd", {"tokens": t, "hidden": width}),
            Call.of("gemm", "fwd", {"m": t, "n": h, "k": width}, role=FFN_ROLE)]  # FFN down


def _mla_ops(model: ModelConfig, micro_batch: int, seq: int, t: int, t_sp: int, tp: int, cp: int,
             attention: str) -> list[Call]:
    """The attention block of a multi-head latent attention layer (DeepSeek-V2, arXiv
    2405.04434 sec. 2.1; Megatron-Core ``MLASelfAttention``): replicated down projections of
    the query (q_lora_rank) and of the keys and values (kv_lora_rank, plus the shared RoPE
    key), their RMSNorms, TP-split up projections, the attention core over query/key heads
    of head_dim + qk_rope_head_dim and value heads of v_head_dim, and the output projection.
    The core runs as one fused kernel whose head width is the mean of the two (its FLOPs
    are 2·(d_qk + d_v) per score, exactly what that width gives)."""
    h, hd, rope = model.hidden_size, model.head_dim, model.qk_rope_head_dim
    v, heads, q_rank, kv_rank = model.v_head_dim or hd, model.num_heads // tp, model.q_lora_rank, model.kv_lora_rank
    ops = [Call.of(model.norm, "fwd", {"tokens": t_sp, "hidden": h}, 2)]
    if q_rank:
        ops += [Call.of("gemm", "fwd", {"m": t, "n": q_rank, "k": h}),
                Call.of("rmsnorm", "fwd", {"tokens": t, "hidden": q_rank})]
    ops += [Call.of("gemm", "fwd", {"m": t, "n": heads * (hd + rope), "k": q_rank or h}),  # query up
            Call.of("gemm", "fwd", {"m": t, "n": kv_rank + rope, "k": h}),  # KV down + RoPE key
            Call.of("rmsnorm", "fwd", {"tokens": t, "hidden": kv_rank}),
            Call.of("gemm", "fwd", {"m": t, "n": heads * (hd + v), "k": kv_rank}),  # KV up
            *attention_ops(micro_batch, heads, heads, seq // cp, seq, (hd + rope + v) // 2, attention),
            Call.of("gemm", "fwd", {"m": t, "n": h, "k": heads * v}),  # output projection
            Call.of("residual_add", "fwd", {"tokens": t_sp, "hidden": h}, 2),
            Call.of("rope", "fwd", {"tokens": t, "heads": heads, "head_dim": rope}),
            Call.of("rope", "fwd", {"tokens": t, "heads": 1, "head_dim": rope})]
    return ops


#: Largest expert load over the mean, minus one ("MaxVio_global"), by balancing strategy:
#: Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts",
#: arXiv 2408.15664, Table 2 (1B model): auxiliary loss 0.72, loss-free (bias) 0.04. No
#: balancing has no published figure: taken as the auxiliary loss's (a lower bound).
MAX_VIOLATION = {"aux_loss": 0.72, "aux_free": 0.04, "none": 0.72}


def routed_tokens(model: ModelConfig, par: ParallelConfig, micro_batch: int, seq: int) -> int:
    """Tokens one GPU routes per MoE layer and micro-batch: its seq/cp tokens, split tp
    ways by sequence parallelism (Megatron's MoE input is the sequence-parallel shard)."""
    t = micro_batch * seq // par.cp
    return t // par.tp if par.sequence_parallel and par.tp > 1 else t


def routing_imbalance(model: ModelConfig, par: ParallelConfig, tokens: int) -> float:
    """The median load of the busiest expert-parallel rank over the mean (>= 1): the
    slowest rank sets the pace of the all-to-all and of the layer.

    A rank holds num_experts/ep experts and, on average, ``tokens``·top_k·etp token-expert
    assignments. Its load's relative spread has two parts: multinomial sampling of the
    assignments among ep ranks, sqrt((1 - 1/ep) / n) (all that is left under Megatron's
    forced balancing, which routes uniformly at random), and the router's own skew: a
    per-expert spread MAX_VIOLATION / sqrt(2 ln E) (the expected maximum of E normal
    loads sits sqrt(2 ln E) spreads above the mean), averaged over the rank's E/ep experts.
    The busiest of ep ranks sits sqrt(2 ln ep) spreads above the mean. A capacity factor
    caps the load (tokens above it are dropped). One expert-parallel rank: no skew
    between ranks (every assignment is local)."""
    ep, experts = par.ep, model.num_experts
    if ep <= 1 or not experts:
        return 1.0
    n = max(tokens * model.top_k * par.etp, 1)
    sampling = math.sqrt((1 - 1 / ep) / n)
    skew = 0.0 if par.moe_force_balance else (
        MAX_VIOLATION[model.moe_balancing] / math.sqrt(2 * math.log(experts)) * math.sqrt(ep / experts))
    factor = 1 + math.hypot(sampling, skew) * math.sqrt(2 * math.log(ep))
    return min(factor, par.moe_capacity_factor) if par.moe_capacity_factor else factor


def _untouched(experts: int, group: int, top_k: int) -> float:
    """Probability that top_k distinct experts out of ``experts`` all miss one group of
    ``group`` experts: C(experts - group, top_k) / C(experts, top_k)."""
    if experts - group < top_k:
        return 0.0
    return math.comb(experts - group, top_k) / math.comb(experts, top_k)


def dispatch_bytes(model: ModelConfig, par: ParallelConfig, tokens: int, topology: tuple[int, int],
                   act_bytes: int = 2) -> float:
    """Bytes one GPU's token dispatch (and, alike, combine) puts in an all-to-all over the ep
    group placed as ``topology`` (ranks per node, nodes), sized at the busiest rank's load
    (:func:`routing_imbalance`). ``alltoall`` (Megatron-Core's MoEAlltoAllTokenDispatcher)
    sends each token once per chosen expert: tokens·top_k hidden vectors. ``flex`` (DeepEP,
    HybridEP: Megatron-Core's MoEFlexTokenDispatcher) sends a token once per node holding
    one of its experts over RDMA and forwards it over NVLink (DeepSeek-V3, arXiv 2412.19437
    sec. 3.2.2): with top_k distinct experts drawn among E, a node of E/nodes experts is
    missed with probability C(E - E/nodes, k)/C(E, k). Its cross-node bytes are written as
    the all-to-all buffer that would move them (the buffer's (n - r)/n leaves the node).
    ``act_bytes``: an activation element's (bf16's 2 by default)."""
    per_node, nodes = topology
    n, k, experts = par.ep, model.top_k, model.num_experts
    vector = model.hidden_size * act_bytes * routing_imbalance(model, par, tokens)
    if par.moe_dispatcher != "flex" or n <= 1:
        return tokens * k * vector
    if nodes > 1:
        remote = (nodes - 1) * (1 - _untouched(experts, experts // nodes, k))
        return tokens * vector * remote * n / max(n - per_node, 1)
    remote = (n - 1) * (1 - _untouched(experts, experts // n, k))  # one copy per other rank
    return tokens * vector * remote * n / (n - 1)


def moe_ops(model: ModelConfig, par: ParallelConfig, micro_batch: int, seq: int) -> list[Call]:
    """The compute ops of one MoE layer's FFN for one micro-batch on one GPU: the calls of
    :func:`moe_op_groups`, in order."""
    return [c for calls in moe_op_groups(model, par, micro_batch, seq).values() for c in calls]


def moe_op_groups(model: ModelConfig, par: ParallelConfig, micro_batch: int,
                  seq: int) -> dict[str, list[Call]]:
    """The compute ops of one MoE layer's FFN for one micro-batch on one GPU (Megatron-Core
    ``MoELayer``), by part: ``router`` (gate GEMM, scores, top-k); ``dispatch``, the token
    rearrangement around the exchange, as each dispatcher does it (:func:`_rearrangement`);
    ``experts``, two grouped GEMMs over num_experts/ep experts of tokens·top_k·etp/
    (num_experts/ep) tokens each, times :func:`routing_imbalance`, around ``moe_act``, their
    activation; ``combine``, the dispatch's reverse; ``shared_experts``, a TP-split dense FFN
    over every token."""
    h, k, ep, etp = model.hidden_size, model.top_k, par.ep, par.etp
    local = model.num_experts // ep
    t_r = routed_tokens(model, par, micro_batch, seq)
    assigned = t_r * k * etp * routing_imbalance(model, par, t_r)
    per_expert = max(1, math.ceil(assigned / local))
    width = moe_ffn(model) // etp
    up = 2 * width if model.activation == "swiglu" else width
    dispatch, combine = _rearrangement(par, t_r, h, k, local, local * per_expert)
    shared = model.shared_expert_ffn_hidden_size
    return {
        "router": [Call.of("router", "fwd", {"tokens": t_r, "hidden": h, "experts": model.num_experts, "top_k": k})],
        "dispatch": dispatch,
        "experts": [Call.of("grouped_gemm", "fwd", {"batch": local, "m": per_expert, "n": up, "k": h})],
        "moe_act": [Call.of(model.activation, "fwd", {"tokens": local * per_expert, "hidden": width})],
        "experts_down": [Call.of("grouped_gemm", "fwd", {"batch": local, "m": per_expert, "n": h, "k": width})],
        "combine": combine,
        "shared_experts": mlp_ops(model, micro_batch * seq // par.cp, shared // par.tp) if shared else [],
    }


def _rearrangement(par: ParallelConfig, tokens: int, hidden: int, top_k: int, local: int,
                   rows: int) -> tuple[list[Call], list[Call]]:
    """The token rearrangement of one MoE layer's dispatch and of its combine, as Megatron-Core's
    dispatchers do it (megatron/core/transformer/moe/token_dispatcher.py): ``alltoall`` permutes
    its ``tokens`` by expert, top_k copies each, before the exchange, sorts the received chunks
    by local expert after it where a rank holds several (``sort_chunks_by_idxs``), and reverses
    both in the combine, whose unpermutation sums the top_k outputs. ``flex`` (DeepEP, HybridEP)
    hands the tokens to its fused dispatch unpermuted and permutes the ``rows`` that arrive
    (``get_permuted_hidden_states_by_experts``), unpermuting them before its fused combine
    (HybridEP does it inside its kernels, at the same bytes)."""
    if par.moe_dispatcher == "flex" and par.ep > 1:
        return ([Call.of("permute", "fwd", {"tokens": rows, "hidden": hidden, "top_k": 1})],
                [Call.of("unpermute", "fwd", {"tokens": rows, "hidden": hidden, "top_k": 1})])
    sort = [Call.of("permute", "fwd", {"tokens": rows, "hidden": hidden, "top_k": 1})] \
        if local > 1 and par.ep > 1 and par.moe_dispatcher == "alltoall" else []
    return ([Call.of("permute", "fwd", {"tokens": tokens, "hidden": hidden, "top_k": top_k}), *sort],
            [*sort, Call.of("unpermute", "fwd", {"tokens": tokens, "hidden": hidden, "top_k": top_k})])
