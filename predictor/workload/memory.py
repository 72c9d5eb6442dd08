"""Per-GPU memory of a training layout: model states, activations and a fixed workspace.

``memory_per_gpu(model, par)`` returns a :class:`MemoryBreakdown` (bytes) for the most
loaded pipeline stage; ``memory_per_stage`` gives every stage. ``validate_layout`` rejects
layouts a framework would refuse, naming the field and the fix; the workload
decomposition calls it too.

Model states (Rajbhandari et al. 2020, "ZeRO", arXiv 1910.02054, Sec. 3.1): mixed-precision
Adam keeps bf16 weights (2 B/param), gradients and K = 12 B/param of optimizer state (fp32
master weights, momentum, variance). Gradients are 4 B/param by default: Megatron-LM forces
``accumulate_allreduce_grads_in_fp32`` for bf16 training (``megatron/training/arguments.py``
prints "accumulate and all-reduce gradients in fp32 for bfloat16 data type" unless
``--grad-reduce-in-bf16``) and its own estimator (``megatron/training/theoretical_memory_usage.py``)
counts 18 B/param, or 6 + 12/dp with the distributed optimizer. Pass ``grad_bytes=2`` for the
paper's 2 + 2 + 12 = 16 B. Sharding divides by the size of the data-parallel group *including
context parallelism* (Megatron shards its distributed optimizer over dp x cp; torchtitan's FSDP
mesh folds cp into the shard dimension):

==========================  =========  =========  =========
``parallel.sharding``       weights    gradients  optimizer
==========================  =========  =========  =========
none                        full       full       full
zero1, distributed_optimizer full      full       / (dp.cp)
zero2                       full       / (dp.cp)  / (dp.cp)
zero3, fsdp                 / (dp.cp)  / (dp.cp)  / (dp.cp)
==========================  =========  =========  =========

ZeRO-3/FSDP also hold the gathered (unsharded) weights of the layer being computed and of
the one prefetched next: two layers' TP-sharded bf16 weights are added to ``weights``.

Parameters per GPU: stage ``i`` holds ``layers_per_stage(L, pp, vpp)[i]`` layers; the (vocabulary
parallel) input embedding sits on stage 0, the output head and the final norm on the last
stage; with tied embeddings and pp > 1 Megatron keeps a copy of the embedding on the last
stage (its gradient is all-reduced between the two), with pp == 1 the tied head is the same
tensor. Multi-token prediction modules (``parallel.mtp_layers``) sit on the last stage: each a
transformer layer of the decoder's last kind (:func:`~predictor.workload.layers.stage_layers`),
an ``eh_proj`` (2h -> h) and three norms, with the embedding they read (a copy when pp > 1) and
the output layer's activations once more. TP divides the attention and FFN weights (with fewer
KV heads than tp, each rank keeps one replicated KV head, as ``workload.layer_ops`` assumes)
and the vocabulary (padded, as Megatron does, to a multiple of 128·tp:
``_vocab_size_with_padding`` with the default ``make_vocab_size_divisible_by=128``). Norm gains
and learned position embeddings are replicated. Linear biases are not counted (as ``workload.parameter_count``).

Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", arXiv 2205.05198, Sec. 4 / Table 2, per layer and micro-batch, in bytes, with
s = seq/cp, b = micro-batch, h = hidden, a = heads, t = tp:

* no parallelism                      ``s·b·h·(34 + 5·a·s/h)``
* TP, no SP                           ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``
* TP with SP                          ``s·b·h·(34/t + 5·a·s/(h·t))``
* selective recompute                 drops the ``5·a·s/(h·t)`` term (attention scores);
  torchtitan's per-op policy (``per_op``) is counted alike, an upper bound: it also frees
  the outputs it recomputes (norms, activations, every second projection). With
  ``parallel.recompute_modules`` (Megatron-Core's --recompute-modules) each module frees what
  it recomputes: core_attn the scores; layernorm the two norms' outputs (the QKV and FFN
  inputs, ``4·sbh``); mlp the FFN's inside (``4·ffn/h`` or SwiGLU's 6), keeping its input;
  moe a MoE layer's FFN half (:func:`moe_activation_bytes`); moe_act the experts' activation
  output; shared_experts theirs. mla_up_proj frees nothing here (the note says so).
* full recompute                      ``2·s·b·h`` (the layer input; ÷t with SP)

:func:`layer_activation_bytes` rebuilds these from the paper's itemised list (Sec. 4.1) so
that architectures other than the paper's GPT layer follow from the same accounting:

* ``10·sbh`` that TP leaves replicated (SP shards it): the two norm inputs 4, the QKV input 2,
  the FFN input 2, two dropout masks 1 + 1 (attention output and FFN output).
* ``24·sbh/t`` that TP shards: Q and K for QKᵀ (2 + 2), V (2), the attention context fed to the
  output projection (2) — 8 in all — and the FFN's 16 = 4·ffn/h with ffn = 4h (GeLU input
  and output, 2 B each per ffn element). This generalises as Megatron's own estimator does
  (``18 + 4·ffn/h``): Q and the context scale with ``a·d_head/h``, K and V with
  ``kv·d_head/h`` (GQA: Llama-3-70B stores 1/8 of MHA's K and V), the FFN term with
  ``ffn/h``, and SwiGLU stores 6 B per ffn element instead of 4 (its fc1 output is 2·ffn wide —
  gate and up — and its product, the fc2 input, ffn wide: Megatron's fused ``bias_swiglu``
  saves both), i.e. Megatron's ``gated_linear_multiplier`` of 3/2.
* ``5·a·s²·b/t`` attention scores (softmax output 2, dropout mask 1, dropout output 2).
  FlashAttention (Dao et al. 2022, arXiv 2205.14135) never materialises the s×s scores: it
  keeps Q, K, V, the output and an fp32 log-sum-exp of ``4·a·s·b/t`` bytes (counted) and
  recomputes the scores in the backward pass, which is exactly what selective recompute
  does. ``flash_attention=True`` (the default; every current framework uses a fused
  attention kernel) therefore drops the term, as selective recompute does.
* Dropout: the paper's GPT layer has dropout (GPT-2/3 train with 0.1); Llama-family models
  train without it, so by default (``dropout=None``) the masks (2·sbh, and with unfused
  attention 3 of the 5 score bytes) are counted only for ``model.family == "gpt"``.
* RoPE, biases and the fp32 statistics of the norms are not counted (small, and kernels that
  fuse them store nothing extra).

Embedding and output layer (Korthikanti Sec. 4.3, as in Megatron's estimator): stage 0 keeps
the int64 token ids (8·s·b) and the embedding dropout mask (s·b·h, ÷t with SP; dropout models
only); the last stage keeps the final norm's input and the head's input (2·sbh each, ÷t with
SP) and the fp32 logits of the vocabulary-parallel cross entropy (4·s·b·V/t): the paper's
``4·sbh/t·(1 + V/h)``. They count per micro-batch in flight like the layers.

Micro-batches in flight (m = global_batch_size / (micro_batch_size·dp)): 1F1B (Narayanan et
al. 2021, arXiv 2104.04473) keeps ``min(pp - i, m)`` on stage i — Megatron's
``num_warmup_microbatches = pp - rank - 1`` plus the one in its steady state; GPipe keeps all
m; ZB-H1 zero-bubble (Qi et al. 2023, arXiv 2401.10241) has 1F1B's peak memory, so it counts
as 1F1B. Interleaved 1F1B with vpp model chunks per rank follows Megatron's warm-up
(``2·(pp - i - 1) + (vpp - 1)·pp`` chunk forwards, plus one), each chunk being 1/vpp of the
stage, capped at the m·vpp chunks of the step; on stage 0 this is
``pp·(1 + (pp - 1)/(pp·vpp))``, the factor of Korthikanti Sec. 4.2.3. Full recompute also
materialises one layer's activations while it is recomputed in the backward pass: one
layer's (flash, no-recompute) activations are added once.

Workspace: a fixed per-GPU allowance, ``WORKSPACE_GIB`` = 2 GiB, made of three assumptions
(not measured here): ~0.75 GiB CUDA context, loaded kernels and cuBLAS/cuDNN workspaces (a
PyTorch process on an H100 shows ~0.5 GiB in nvidia-smi before allocating anything; PyTorch's
default cuBLAS workspace on Hopper is 32 MiB per stream); ~0.5 GiB NCCL buffers (NCCL_BUFFSIZE
defaults to 4 MiB per channel and peer — NCCL environment-variable docs — times the channels
of the tp, dp, pp and cp communicators); ~0.75 GiB caching-allocator fragmentation and
transient buffers (activation gradients, bucketed gradient reduction). Override it with
``workspace_gib``.
"""
from __future__ import annotations

from dataclasses import dataclass

from predictor.core.choices import Recompute, Sharding, choice
from predictor.core.errors import PrismError
from predictor.core.layout import selective_modules, validate_layout
from predictor.core.specs import ModelConfig, ParallelConfig
from predictor.workload.layers import (
    expert_parameters,
    layer_parameters,
    moe_ffn,
    routed_tokens,
    routing_imbalance,
    stage_layers,
)

GiB = 1024 ** 3
WEIGHT_BYTES = 2      # bf16 weights
GRAD_BYTES = 4        # fp32 main gradients (Megatron accumulate_allreduce_grads_in_fp32)
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam m + v (ZeRO's K = 12)
VOCAB_MULTIPLE = 128  # Megatron make_vocab_size_divisible_by (times tp)
WORKSPACE_GIB = 2.0   # see the module docstring: context 0.75 + NCCL 0.5 + fragmentation 0.75

# What each sharding divides by the dp.cp group: (weights, gradients, optimizer states)
_SHARDED = {"none": (False, False, False), "zero1": (False, False, True),
            "distributed_optimizer": (False, False, True), "zero2": (False, True, True),
            "zero3": (True, True, True), "fsdp": (True, True, True)}


@dataclass
class MemoryBreakdown:
    """Bytes on one GPU of pipeline stage ``stage`` (0-based) at its peak."""

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    workspace: float
    layers: int = 0                       # transformer layers on this stage
    in_flight: float = 0.0                # micro-batches whose activations the stage holds at peak
    parameters: float = 0.0               # parameters this GPU holds (its TP/PP shard, before ZeRO)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.workspace

    @property
    def total_gib(self) -> float:
        return self.total / GiB

    def fits(self, hw) -> bool:
        """Whether the total fits in ``hw.memory.capacity_gib`` (a HardwareConfig)."""
        return self.total <= hw.memory.capacity_gib * GiB


# ---------------------------------------------------------------- parameters

def padded_vocab(vocab_size: int, tp: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """Megatron's padded vocabulary: a multiple of ``multiple·tp``."""
    step = multiple * tp
    return -(-vocab_size // step) * step


def stage_parameters(model: ModelConfig, par: ParallelConfig,
                     vocab_multiple: int = VOCAB_MULTIPLE, vocab_shards: int | None = None) -> list[int]:
    """Parameters one GPU of each pipeline stage holds (its TP/PP shard, before ZeRO); the
    embedding and head split ``vocab_shards`` ways (default tp, vocabulary-parallel)."""
    tp, pp = par.tp, par.pp
    sharded, replicated = layer_parameters(model, tp)
    per_layer = sharded + replicated
    moe_layer = sum(layer_parameters(model, tp, moe=True)) if model.num_experts else 0
    shards = tp if vocab_shards is None else vocab_shards
    vocab = padded_vocab(model.vocab_size, shards, vocab_multiple) // shards
    embed = vocab * model.hidden_size
    positions = model.seq_length * model.hidden_size if model.position == "learned" else 0
    final_norm = model.hidden_size * (2 if model.norm == "layernorm" else 1)
    out = []
    for i, st in enumerate(stage_layers(model, par)):
        p = (st.layers - st.moe) * per_layer + st.moe * moe_layer
        if i == 0:
            p += embed + positions
        if i == pp - 1:
            p += final_norm
            if not (model.tied_embeddings and pp == 1):
                p += embed  # output head (a copy of the tied embedding when pp > 1)
            if st.mtp:  # each module's eh_proj (2h -> h, column-parallel) and three norms; the
                # last stage holds the embedding it reads too (Megatron-Core's mtp_process)
                p += st.mtp * (2 * model.hidden_size * model.hidden_size // tp + 3 * final_norm)
                p += embed if pp > 1 else 0
        out.append(p)
    return out


def stage_expert_parameters(model: ModelConfig, par: ParallelConfig) -> list[int]:
    """Routed-expert parameters one GPU of each pipeline stage holds: num_experts/ep experts
    of each MoE layer, each split etp ways (before the expert-data-parallel sharding)."""
    per_layer = expert_parameters(model, par.ep, par.etp) if model.num_experts else 0
    return [st.moe * per_layer for st in stage_layers(model, par)]


def moe_activation_bytes(model: ModelConfig, par: ParallelConfig, seq: int, micro_batch: int) -> float:
    """Activation bytes the FFN half of one MoE layer stores for one micro-batch on one GPU,
    beyond the attention half of :func:`layer_activation_bytes` (Megatron-Core MoELayer):
    the router's fp32 scores (4 B per token and expert), the permuted expert input (2·h per
    routed token-expert pair, sized at the busiest rank's load), the experts' fc1 output and
    activation output as a dense FFN of moe_ffn/etp stores (6 B per width element with
    SwiGLU, 4 with GeLU), and the shared experts as a dense TP-split FFN. Full recompute
    keeps none of it, nor selective recompute of ``moe``; of ``moe_act``, the experts'
    activation output (2 B per width element); of ``shared_experts``, theirs."""
    modules = selective_modules(par.recompute, par.recompute_modules)
    if par.recompute == "full" or "moe" in modules:
        return 0.0
    t_r = routed_tokens(model, par, micro_batch, seq)
    pairs = t_r * model.top_k * par.etp * routing_imbalance(model, par, t_r)
    width = moe_ffn(model) / par.etp
    per_width = 6 if model.activation == "swiglu" else 4
    shared = 0.0 if "shared_experts" in modules else \
        micro_batch * seq / par.cp * per_width * model.shared_expert_ffn_hidden_size / par.tp
    per_width -= 2 if "moe_act" in modules else 0
    return 4 * t_r * model.num_experts + pairs * (2 * model.hidden_size + per_width * width) + shared


def model_state_bytes(params: float, shard_group: int = 1, sharding: str = "none",
                      grad_bytes: float = GRAD_BYTES) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of ``params`` parameters under ZeRO-style
    sharding over ``shard_group`` ranks (ZeRO Sec. 3.1 / Fig. 1 with ``grad_bytes=2``)."""
    choice(Sharding, sharding, "parallel.sharding")
    w, g, o = _SHARDED[sharding]
    n = shard_group
    return (params * WEIGHT_BYTES / (n if w else 1),
            params * grad_bytes / (n if g else 1),
            params * OPTIMIZER_BYTES / (n if o else 1))


# ---------------------------------------------------------------- activations

def layer_activation_bytes(model: ModelConfig, seq: int, micro_batch: int, tp: int = 1,
                           sequence_parallel: bool = False, recompute: str = "none",
                           flash_attention: bool = True, cp: int = 1,
                           dropout: bool | None = None, modules: str = "") -> float:
    """Activation bytes one transformer layer stores for one micro-batch on one GPU
    (Korthikanti et al. 2022, Table 2, generalised as the module docstring explains);
    ``modules``: selective recompute's ``parallel.recompute_modules``."""
    choice(Recompute, recompute, "parallel.recompute")
    drop = model.family == "gpt" if dropout is None else dropout
    s, b, h, t = seq / cp, micro_batch, model.hidden_size, tp
    sp = sequence_parallel and tp > 1
    rep_div = t if sp else 1
    if recompute == "full":
        return 2 * s * b * h / rep_div
    hd = model.head_dim
    heads = model.num_heads / t
    kv = model.num_kv_heads / t if model.num_kv_heads >= t else 1
    ffn = model.ffn_hidden_size / t
    recomputed = selective_modules(recompute, modules)
    norm_outputs = 0 if "layernorm" in recomputed else 2 + 2
    replicated = (4 + norm_outputs + (2 if drop else 0)) * h    # norm inputs, QKV and FFN inputs, masks
    sharded = 4 * heads * hd + 4 * kv * hd                      # Q + context, K + V
    if "mlp" not in recomputed:
        sharded += (6 if model.activation == "swiglu" else 4) * ffn  # GeLU in/out or SwiGLU fc1 out + product
    per_token = replicated / rep_div + sharded
    scores = 0.0
    if flash_attention or recompute == "per_op" or "core_attn" in recomputed:
        if flash_attention:
            per_token += 4 * heads                              # fp32 log-sum-exp per head and token
    else:
        scores = (5 if drop else 2) * heads * s * s * b          # softmax out (+ dropout mask and output)
    return s * b * per_token + scores


def _output_layer_bytes(model: ModelConfig, s: float, b: int, tp: int, sp: bool, vocab: int) -> float:
    """Final norm input, head input (2·sbh each, ÷t with SP) and fp32 logits 4·s·b·V/t."""
    return 4 * s * b * model.hidden_size / (tp if sp else 1) + 4 * s * b * vocab / tp


def _embedding_bytes(model: ModelConfig, s: float, b: int, tp: int, sp: bool, drop: bool) -> float:
    """int64 token ids and (dropout models) the embedding dropout mask."""
    return 8 * s * b + (s * b * model.hidden_size / (tp if sp else 1) if drop else 0.0)


def in_flight_microbatches(par: ParallelConfig, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak (in units of the
    whole stage; interleaved chunks count 1/vpp each)."""
    pp, m = par.pp, par.global_batch_size // (par.micro_batch_size * par.dp)
    if par.schedule == "gpipe":
        return float(m)
    if par.schedule == "interleaved" and par.vpp > 1:
        chunks = 2 * (pp - stage - 1) + (par.vpp - 1) * pp + 1
        return min(chunks, m * par.vpp) / par.vpp
    return float(min(pp - stage, m))  # 1f1b


# ---------------------------------------------------------------- the breakdown

def memory_per_stage(model: ModelConfig, par: ParallelConfig, seq: int | None = None, *,
                     flash_attention: bool = True, grad_bytes: float = GRAD_BYTES,
                     workspace_gib: float = WORKSPACE_GIB, dropout: bool | None = None,
                     vocab_multiple: int = VOCAB_MULTIPLE) -> list[MemoryBreakdown]:
    """The :class:`MemoryBreakdown` of one GPU of every pipeline stage."""
    seq = model.seq_length if seq is None else seq
    validate_layout(model, par, seq=seq)
    tp, sp = par.tp, par.sequence_parallel and par.tp > 1
    s, b = seq / par.cp, par.micro_batch_size
    drop = model.family == "gpt" if dropout is None else dropout
    group = par.dp * par.cp
    vocab = padded_vocab(model.vocab_size, tp, vocab_multiple)
    act_layer = layer_activation_bytes(model, seq, b, tp, par.sequence_parallel, par.recompute,
                                       flash_attention, par.cp, drop, par.recompute_modules)
    if par.recompute == "full":  # one layer is re-materialised at a time in the backward pass
        working = layer_activation_bytes(model, seq, b, tp, par.sequence_parallel, "none",
                                         True, par.cp, drop)
    layer_weights = sum(layer_parameters(model, tp))
    out = []
    params = stage_parameters(model, par, vocab_multiple)
    stages, experts = stage_layers(model, par), stage_expert_parameters(model, par)
    if model.num_experts:  # a MoE layer stores its router's, experts' and shared experts' instead of the FFN's
        mlp_recomputed = "mlp" in selective_modules(par.recompute, par.recompute_modules)
        dense_ffn = 0.0 if par.recompute == "full" or mlp_recomputed else \
            s * b * (6 if model.activation == "swiglu" else 4) * model.ffn_hidden_size / tp
        act_moe = act_layer - dense_ffn + moe_activation_bytes(model, par, seq, b)
        expert_dp = par.tp * par.cp * par.dp // (par.ep * par.etp)  # predictor.core.mesh.Mesh.expert_dp
    for i, st in enumerate(stages):
        n, moe = st.layers, st.moe
        weights, grads, optim = model_state_bytes(params[i], group, par.sharding, grad_bytes)
        if _SHARDED[par.sharding][0] and group > 1:  # gathered current + prefetched layer
            weights += min(n, 2) * layer_weights * WEIGHT_BYTES
        per_mb = n * act_layer
        if moe:  # routed experts' states sharded over the expert-data-parallel group
            ew, eg, eo = model_state_bytes(experts[i], expert_dp, par.sharding, grad_bytes)
            if _SHARDED[par.sharding][0] and expert_dp > 1:
                ew += min(moe, 2) * experts[i] / moe * WEIGHT_BYTES
            weights, grads, optim = weights + ew, grads + eg, optim + eo
            per_mb = (n - moe) * act_layer + moe * act_moe
        if i == 0:
            per_mb += _embedding_bytes(model, s, b, tp, sp, drop)
        if i == par.pp - 1:  # the output layer's, again for each multi-token prediction module
            per_mb += (1 + st.mtp) * _output_layer_bytes(model, s, b, tp, sp, vocab)
        flight = in_flight_microbatches(par, i)
        acts = flight * per_mb + (working if par.recompute == "full" else 0.0)
        out.append(MemoryBreakdown(stage=i, weights=weights, gradients=grads, optimizer=optim,
                                   activations=acts, workspace=workspace_gib * GiB,
                                   layers=n, in_flight=flight, parameters=params[i] + experts[i]))
    return out


def memory_per_gpu(model: ModelConfig, par: ParallelConfig, seq: int | None = None,
                   stage: int | None = None, *, flash_attention: bool = True,
                   grad_bytes: float = GRAD_BYTES, workspace_gib: float = WORKSPACE_GIB,
                   dropout: bool | None = None,
                   vocab_multiple: int = VOCAB_MULTIPLE) -> MemoryBreakdown:
    """Per-GPU memory of stage ``stage``, or (``stage=None``) of the stage with the largest
    total. ``seq`` defaults to ``model.seq_length``; see the module docstring for the model."""
    stages = memory_per_stage(model, par, seq, flash_attention=flash_attention, grad_bytes=grad_bytes,
                              workspace_gib=workspace_gib, dropout=dropout, vocab_multiple=vocab_multiple)
    if stage is None:
        return max(stages, key=lambda m: m.total)
    if not isinstance(stage, int) or not 0 <= stage < par.pp:
        raise PrismError(f"stage={stage!r}: pick a pipeline stage in 0..{par.pp - 1}", field='stage')
    return stages[stage]
