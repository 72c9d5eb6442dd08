"""A training step as operator calls: per pipeline stage, per micro-batch, per step.

DESIGN.md, "Composer" step 1. Compute ops come from :func:`predictor.workload.layers.layer_ops`
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
  only the attention core.

Group sizes, rank order and each group's placement on nodes come from the layout's
:class:`~predictor.core.mesh.Mesh`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from predictor.core.layout import layers_per_stage, validate_layout, with_default_batch
from predictor.core.mesh import Mesh
from predictor.core.ops import Call
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.workload.layers import layer_ops, parameter_tensors
from predictor.workload.memory import GRAD_BYTES, WEIGHT_BYTES, padded_vocab, stage_parameters

#: bf16 activations.
ACT_BYTES = 2
#: Megatron's DDP bucket: 40 M parameters (``bucket_size`` default, megatron/core/distributed).
BUCKET_PARAMS = 40_000_000


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


def _collective(op: str, message: float, group: int, count: int, role: str, topo) -> Call:
    return Call.of(op, "step", {"message_bytes": int(message), "group_size": group}, count, role, topo)


def _layer_calls(model, par, seq, tp_topo, cp_topo, layers: int) -> tuple[list[Call], list[Call]]:
    """Forward and backward calls of ``layers`` transformer layers for one micro-batch."""
    mbs, tp, cp = par.micro_batch_size, par.tp, par.cp
    compute = layer_ops(model, mbs, seq, tp, cp, par.sequence_parallel, par.attention)
    fwd = [replace(c, count=c.count * layers) for c in compute]
    bwd = [replace(c, pass_="bwd", count=c.count * layers) for c in compute]
    activation = mbs * seq // cp * model.hidden_size * ACT_BYTES
    if tp > 1:
        if par.sequence_parallel:
            tp_fwd = [_collective("all_gather", activation, tp, 2 * layers, "tp", tp_topo),
                      _collective("reduce_scatter", activation, tp, 2 * layers, "tp", tp_topo)]
        else:
            tp_fwd = [_collective("all_reduce", activation, tp, 2 * layers, "tp", tp_topo)]
        fwd += tp_fwd
        bwd += tp_fwd  # the backward mirrors each collective with its conjugate of equal size
    if cp > 1:
        kv = 2 * mbs * seq * max(model.num_kv_heads // tp, 1) * model.head_dim * ACT_BYTES
        fwd.append(_collective("all_gather", kv, cp, layers, "cp", cp_topo))
        bwd.append(_collective("reduce_scatter", kv, cp, layers, "cp", cp_topo))
    if par.recompute == "full":
        bwd += fwd  # every forward call, the layer's collectives included, runs again
    elif par.recompute == "selective":
        bwd += [c for c in fwd if c.op in ("attention", "bmm", "softmax")]
    return fwd, bwd


def _stage(model, par, stage: StageWork, first: bool, last: bool, params: int, tokens: int, vocab: int,
           dp_group: int, dp_topo, pp_topo) -> StageWork:
    """``stage`` (its layers' calls given) with the ends of the model it holds, its pipeline
    send and its once-per-step calls: DP gradient reduction, ZeRO gathers, optimizer step."""
    ends = []
    if first:
        ends.append(Call.of("embedding", "fwd", {"tokens": tokens, "hidden": model.hidden_size, "vocab": vocab}))
    if last:
        sp_tokens = tokens // par.tp if par.sequence_parallel else tokens
        ends += [Call.of(model.norm, "fwd", {"tokens": sp_tokens, "hidden": model.hidden_size}),
                 Call.of("gemm", "fwd", {"m": tokens, "n": vocab, "k": model.hidden_size}),
                 Call.of("cross_entropy", "fwd", {"tokens": tokens, "vocab": vocab})]
    stage.forward += ends
    stage.backward += [replace(c, pass_="bwd") for c in ends]
    layers = stage.layers
    if not last:
        sent = tokens * model.hidden_size * ACT_BYTES // (par.tp if par.sequence_parallel else 1)
        stage.p2p = _collective("send_recv", sent, 2, 1, "pp", pp_topo)
    sharded = par.sharding != "none"
    if dp_group > 1:
        buckets = max(1, math.ceil(params / BUCKET_PARAMS))
        grad_op = "reduce_scatter" if sharded else "all_reduce"
        stage.step.append(_collective(grad_op, params / buckets * GRAD_BYTES, dp_group, buckets, "dp", dp_topo))
        if sharded:  # updated bf16 weights gathered back after the sharded step
            stage.step.append(_collective("all_gather", params / buckets * WEIGHT_BYTES, dp_group,
                                          buckets, "dp", dp_topo))
        if par.sharding in ("zero3", "fsdp"):
            per_layer = params / max(layers, 1) * WEIGHT_BYTES
            gather = _collective("all_gather", per_layer, dp_group, layers, "dp", dp_topo)
            stage.forward.append(gather)
            stage.backward.append(gather)
    opt_params = params // dp_group if sharded else params
    tensors = max(1, round(parameter_tensors(model) * layers / model.num_layers))
    stage.step.append(Call.of("optimizer_step", "step", {"params": max(opt_params, 1), "tensors": tensors,
                                                         "optimizer": "adamw"}, role="optimizer"))
    return stage


def decompose(model: ModelConfig, par: ParallelConfig, hw: HardwareConfig, gpus: int | None = None,
              seq: int | None = None) -> Workload:
    """The operator calls of one training step of ``model`` laid out as ``par`` on ``hw``."""
    seq = seq or model.seq_length
    par = with_default_batch(par)
    gpus = gpus or par.world_size
    validate_layout(model, par, gpus)
    mesh = Mesh.of(par, hw.node.gpus_per_node)
    tp_topo, cp_topo, dp_topo, pp_topo = (mesh.topology(axis) for axis in ("tp", "cp", "dp", "pp"))
    dp_group = mesh.grad_group
    micro_batches = par.global_batch_size // (par.micro_batch_size * par.dp)
    tokens = par.micro_batch_size * seq // par.cp
    vocab = padded_vocab(model.vocab_size, par.tp) // par.tp  # vocabulary-parallel shard
    params_per_stage = stage_parameters(model, par)  # one GPU's TP shard of each stage
    layer_calls: dict[int, tuple[list[Call], list[Call]]] = {}  # stages hold at most two layer counts
    built: dict[tuple, StageWork] = {}  # stages alike in layers, position and parameters make the same calls
    stages = []
    for i, layers in enumerate(layers_per_stage(model.num_layers, par.pp)):
        first, last = i == 0, i == par.pp - 1
        key = (layers, first, last, params_per_stage[i])
        if key not in built:
            if layers not in layer_calls:
                layer_calls[layers] = _layer_calls(model, par, seq, tp_topo, cp_topo, layers)
            fwd, bwd = (list(calls) for calls in layer_calls[layers])  # copies: the ends are appended below
            built[key] = _stage(model, par, StageWork(i, layers, fwd, bwd), first, last, params_per_stage[i],
                                tokens, vocab, dp_group, dp_topo, pp_topo)
        twin = built[key]
        stages.append(StageWork(i, layers, list(twin.forward), list(twin.backward), twin.p2p, list(twin.step)))
    return Workload(model, par, hw, mesh, seq, micro_batches, stages)
