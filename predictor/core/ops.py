"""The operator vocabulary: names, passes, shape columns, FLOPs and bytes moved.

This module is the single definition of what an operator *is*. The sample store
(its columns), the sampling plans (which shapes to draw), the importers (how outside
data maps onto PRISM's ops) and the regressors' features all read it.

FLOP counts follow the usual conventions: a multiply-add is 2 FLOPs; a linear layer's
backward (input gradient + weight gradient) is twice its forward; FlashAttention's
backward does 2.5x the forward's matmul FLOPs (Dao 2023, arXiv 2307.08691, section 3.1).
Bytes are the minimum traffic to and from device memory (each operand read or written
once), the denominator of the roofline's memory side.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bytes per element, block scales included (predictor.core.precision): float8_blockwise one
#: fp32 scale per 128 elements (1 + 4/128); mxfp8 one E8M0 byte per 32 (1 + 1/32, OCP MX
#: spec v1.0); nvfp4 half a byte plus one E4M3 byte per 16 (0.5 + 1/16; the per-tensor fp32
#: scale is negligible), Transformer Engine NVFP4BlockScaling.
DTYPE_BYTES = {"float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2, "float8": 1,
               "float8_blockwise": 1 + 4 / 128, "mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}

#: Every shape column the store knows, with its Arrow type name. One store-wide set
#: keeps every Parquet file of every op on the same schema (unused columns are null).
SHAPE_COLUMNS: dict[str, str] = {
    "m": "int64", "n": "int64", "k": "int64",
    "batch": "int64", "heads": "int64", "kv_heads": "int64",
    "seq_q": "int64", "seq_kv": "int64", "head_dim": "int64", "causal": "bool",
    "tokens": "int64", "hidden": "int64", "vocab": "int64",
    "params": "int64", "tensors": "int64", "optimizer": "string",
    "message_bytes": "int64", "group_size": "int64",
    "experts": "int64", "top_k": "int64",
    "launches": "int64", "blocks": "int64",
}


@dataclass(frozen=True)
class OpSpec:
    """What one operator is: its shape columns, the passes it is timed in, and, for the
    element-wise and normalisation ops, its cost per element: ``flops_per_element`` and
    ``tensors`` (how many element-sized tensors one call reads and writes), counted over
    the product of the ``elements`` shape columns. Ops with their own cost formula (the
    matmuls, attention, embedding, the optimizer, collectives) are in :func:`flops` and
    :func:`bytes_moved`."""

    name: str
    shape: tuple[str, ...]
    passes: tuple[str, ...]
    collective: bool = False
    host: bool = False  # host-side framework time (dispatch, autograd, launches), not device work
    flops_per_element: float | None = None
    tensors: float | None = None
    elements: tuple[str, ...] = ("tokens", "hidden")
    backward_factor: float = 2.0  # the backward pass's work over the forward's (element-wise ops)


_FWD_BWD = ("fwd", "bwd")
_ONCE = ("step",)  # ops without a backward: the optimizer step, collectives
_SCORES = ("batch", "heads", "seq_q", "seq_kv")

OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in [
        # gemm (m, n, k): Y[m,n] = X[m,k] @ W[k,n]; its bwd is dX and dW together.
        OpSpec("gemm", ("m", "n", "k"), _FWD_BWD),
        # bmm (batch, m, n, k): the unfused attention's QK^T (baddbmm) and PV matmuls.
        OpSpec("bmm", ("batch", "m", "n", "k"), _FWD_BWD),
        # softmax and masked_fill over attention scores [batch, heads, seq_q, seq_kv]
        # (unfused attention); causal softmax is the fused scale-mask-softmax kernel.
        OpSpec("softmax", (*_SCORES, "causal"), _FWD_BWD, flops_per_element=5, tensors=2, elements=_SCORES),
        OpSpec("masked_fill", _SCORES, _FWD_BWD, flops_per_element=1, tensors=2, elements=_SCORES),
        OpSpec("attention",
               ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal"), _FWD_BWD),
        OpSpec("rmsnorm", ("tokens", "hidden"), _FWD_BWD, flops_per_element=4, tensors=2),
        OpSpec("layernorm", ("tokens", "hidden"), _FWD_BWD, flops_per_element=7, tensors=2),
        # rope rotates q or k: tokens x heads x head_dim.
        OpSpec("rope", ("tokens", "heads", "head_dim"), _FWD_BWD, flops_per_element=3, tensors=2,
               elements=("tokens", "heads", "head_dim")),
        # swiglu/gelu: hidden is the FFN width (swiglu reads 2*hidden, writes hidden).
        OpSpec("swiglu", ("tokens", "hidden"), _FWD_BWD, flops_per_element=6, tensors=3),
        OpSpec("gelu", ("tokens", "hidden"), _FWD_BWD, flops_per_element=8, tensors=2),
        # residual_add reads two inputs and writes one; its bwd is the gradient fan-out.
        OpSpec("residual_add", ("tokens", "hidden"), _FWD_BWD, flops_per_element=1, tensors=3),
        OpSpec("embedding", ("tokens", "hidden", "vocab"), _FWD_BWD),
        OpSpec("cross_entropy", ("tokens", "vocab"), _FWD_BWD, flops_per_element=5, tensors=1,
               elements=("tokens", "vocab")),
        # Megatron's loss (megatron/core/tensor_parallel/cross_entropy.py, unfused: its default
        # without --cross-entropy-loss-fusion) over a rank's vocabulary shard, in fp32 pass by
        # pass: per bf16 logit the forward's cast (2 B read, 4 written), max (4), subtract (8),
        # exp (8), sum (4) and normalise (8), 38 B = 19 bf16 tensors; the backward's scale by the
        # output gradient (8) and cast back to bf16 (6), 14 B.
        OpSpec("vocab_parallel_cross_entropy", ("tokens", "vocab"), _FWD_BWD, flops_per_element=5, tensors=19,
               elements=("tokens", "vocab"), backward_factor=7 / 19),
        # optimizer_step: params split over `tensors` tensors (per-tensor launch costs matter).
        OpSpec("optimizer_step", ("params", "tensors", "optimizer"), _ONCE),
        # Mixture-of-Experts (Megatron-Core MoELayer). router: the gate GEMM [tokens, hidden] x
        # [hidden, experts], its scores (softmax or sigmoid) and the top-k selection.
        OpSpec("router", ("tokens", "hidden", "experts", "top_k"), _FWD_BWD),
        # permute: gather each token's hidden vector once per chosen expert (tokens·top_k rows
        # out, grouped by expert); unpermute: scatter them back and sum the top_k outputs
        # weighted by their scores. top_k = 1 is a plain reordering (sort_chunks_by_idxs).
        OpSpec("permute", ("tokens", "hidden", "top_k"), _FWD_BWD),
        OpSpec("unpermute", ("tokens", "hidden", "top_k"), _FWD_BWD),
        # grouped_gemm (batch, m, n, k): `batch` experts' GEMMs [m, k] x [k, n] in one call,
        # m tokens each (the busiest rank's per-expert count); costs as a bmm of that shape.
        OpSpec("grouped_gemm", ("batch", "m", "n", "k"), _FWD_BWD),
        # quantize (tokens, hidden): a low-precision GEMM's bf16 operand scaled and cast to
        # hardware.gemm_dtype (predictor.core.precision): the activation in the forward pass,
        # the output gradient in the backward pass. Not a gradient: "bwd" is when it runs.
        # Current (per-step) scaling: an amax pass and a cast pass over the bf16 operand, the
        # output written at half its size or less (torchao Float8 "tensorwise", Transformer
        # Engine Float8CurrentScaling; delayed scaling fuses the amax: an upper bound).
        OpSpec("quantize", ("tokens", "hidden"), _FWD_BWD, flops_per_element=3, tensors=2.5, backward_factor=1.0),
        # Eager mixed precision (torch.autocast; torchtitan without FSDP): the weights stay fp32.
        # master_weights (params): each micro-batch's forward casts `params` fp32 linear weights
        # to the compute dtype, and its backward casts their gradients back to fp32.
        OpSpec("master_weights", ("params",), _FWD_BWD, flops_per_element=1, elements=("params",),
               backward_factor=1.0),
        # grad_accumulate (params): a later micro-batch's fp32 gradients added into `.grad`
        # (autograd's AccumulateGrad); Megatron fuses it into the weight-gradient GEMM.
        OpSpec("grad_accumulate", ("params",), _ONCE, flops_per_element=1, elements=("params",)),
        OpSpec("all_reduce", ("message_bytes", "group_size"), _ONCE, collective=True),
        OpSpec("all_gather", ("message_bytes", "group_size"), _ONCE, collective=True),
        OpSpec("reduce_scatter", ("message_bytes", "group_size"), _ONCE, collective=True),
        OpSpec("all_to_all", ("message_bytes", "group_size"), _ONCE, collective=True),
        OpSpec("send_recv", ("message_bytes", "group_size"), _ONCE, collective=True),
        # Host time (docs/method.md, "Vocabulary"; :mod:`predictor.workload.host`): ``launches``
        # eager framework calls around a compute op at shapes where the kernels take no time:
        # Python, module and autograd.Function calls, the dispatcher, autograd's recording
        # (fwd) or the autograd engine's node (bwd), and the device API's kernel launch.
        OpSpec("dispatch", ("launches",), _FWD_BWD, host=True),
        # The host time of issuing one collective (c10d front-end and its kernel launch).
        OpSpec("collective_launch", ("group_size",), _ONCE, host=True),
        # DTensor's tensor parallelism, per pair of a column- then a row-parallel linear layer
        # over ``group_size`` ranks: redistributions, dispatch and the pair's functional
        # collective, at 4x4 tensors (:mod:`sampling.tensor_parallel`).
        OpSpec("dtensor", ("group_size",), _FWD_BWD, host=True),
        # Activation checkpointing's own host time over ``blocks`` checkpointed blocks, beyond
        # the recomputed forward's calls: the wrapper in the forward (saved-tensor hooks, RNG
        # state), the recomputation's set-up and its saved tensors' unpacking in the backward
        # (sampled in the reference model's steps: sampling.framework).
        OpSpec("checkpoint", ("blocks",), _FWD_BWD, host=True),
    ]
}

#: The TP collectives' roles: the attention's (``tp``) and the feed-forward block's
#: (``tp_ffn``), kept apart because each overlaps its own GEMMs, the feed-forward block's
#: GEMMs being role ``ffn`` (:func:`predictor.engine.stages._exposed`).
TP_FFN = "tp_ffn"
TP_ROLES = ("tp", TP_FFN)
FFN_ROLE = "ffn"


@dataclass(frozen=True)
class Call:
    """``count`` calls of ``op`` in ``pass_`` at ``shape``: the one record of an operator
    call, from a layer's ops through the step's decomposition and the composer to the
    sampler's plan. Collectives also carry their group's placement on nodes."""

    op: str
    pass_: str
    shape: tuple  # sorted (column, value) pairs: hashable, so equal calls are looked up once
    count: int = 1
    role: str = "compute"  # compute | ffn | tp | tp_ffn | cp | pp | dp | optimizer | host | sampled
    ranks_per_node: int = 1
    nodes: int = 1

    def __post_init__(self):
        # calls key the composer's and the search's dicts millions of times: hash once
        object.__setattr__(self, "_hash", hash((self.op, self.pass_, self.shape, self.count, self.role,
                                                self.ranks_per_node, self.nodes)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        # rebuilt through __init__ on unpickling: a str hash differs between processes
        return Call, (self.op, self.pass_, self.shape, self.count, self.role, self.ranks_per_node, self.nodes)

    def keyed(self, key: str, value=None) -> Call:
        """This call with the lookup key ``key`` set to ``value`` (None: removed), a mark the
        lookup reads, not a feature (``sm_margin``, ``co_runners``)."""
        shape = tuple(kv for kv in self.shape if kv[0] != key)
        if value is not None:
            shape = tuple(sorted((*shape, (key, value))))
        return Call(self.op, self.pass_, shape, self.count, self.role, self.ranks_per_node, self.nodes)

    @classmethod
    def of(cls, op: str, pass_: str, shape: dict, count: int = 1, role: str = "compute",
           topology: tuple[int, int] = (1, 1)) -> Call:
        return cls(op, pass_, tuple(sorted(shape.items())), count, role, *topology)

    @property
    def shape_dict(self) -> dict:
        return dict(self.shape)

    def scaled(self, k: int, pass_: str | None = None) -> Call:
        """``k`` times as many of these calls, in ``pass_`` (default: this call's); the
        decomposition builds hundreds of thousands in a search (dataclasses.replace is 5x slower)."""
        return Call(self.op, pass_ or self.pass_, self.shape, self.count * k, self.role, self.ranks_per_node,
                    self.nodes)


COMPUTE_OPS = tuple(name for name, spec in OPS.items() if not spec.collective and not spec.host)
#: Compute ops whose "bwd" pass is forward work (a cast of the output gradient), not a
#: gradient: sampled without an autograd graph (:mod:`sampling.kernels`).
FORWARD_WORK_IN_BWD = ("quantize",)
HOST_OPS = tuple(name for name, spec in OPS.items() if spec.host)
COLLECTIVE_OPS = tuple(name for name, spec in OPS.items() if spec.collective)

#: nccl-tests bus-bandwidth factors: bus_bw = algo_bw * factor(n)
#: (NVIDIA nccl-tests, doc/PERFORMANCE.md). message_bytes is each rank's buffer:
#: the full vector for all_reduce, the gathered output for all_gather, the input for
#: reduce_scatter and all_to_all, the payload for send_recv.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}

OPTIMIZERS = ("adamw", "sgd")
# Bytes per parameter an optimizer step reads and writes (fp32 master weights and
# states): AdamW reads p, g, m, v and writes p, m, v; SGD with momentum p, g, buf / p, buf.
_OPTIMIZER_BYTES_PER_PARAM = {"adamw": 7 * 4, "sgd": 5 * 4}
_OPTIMIZER_FLOPS_PER_PARAM = {"adamw": 12, "sgd": 3}


def unknown_op_message(op: str) -> str:
    return f"unknown op {op!r}; known ops: {', '.join(OPS)}"


def flops(op: str, pass_: str, shape):
    """Floating-point operations of one call of ``op`` in ``pass_`` at ``shape``.

    ``shape`` maps shape columns to scalars or to arrays (a DataFrame works), so whole
    batches of shapes are computed at once.
    """
    s = shape
    bwd = 2.0 if pass_ == "bwd" else 1.0
    if op in ("gemm", "bmm", "grouped_gemm"):
        batch = s["batch"] if op != "gemm" else 1
        return bwd * 2.0 * batch * s["m"] * s["n"] * s["k"]
    if op == "router":
        # gate GEMM 2·t·h·E; scores ~5 per logit (as softmax); top-k by partial sort ~log2(E)
        # per logit; the backward runs the GEMM twice (dX, dW) and the scores once.
        t, e = s["tokens"], s["experts"]
        return bwd * 2.0 * t * s["hidden"] * e + (5.0 + np.log2(np.maximum(e, 2))) * t * e
    if op in ("permute", "unpermute"):
        # unpermute's forward sums top_k weighted vectors per token (2 FLOPs per element);
        # permute's backward is that sum, unpermute's backward a gather.
        summing = (op == "unpermute") == (pass_ == "fwd")
        return 2.0 * s["tokens"] * s["top_k"] * s["hidden"] * (1.0 if summing else 0.0)
    if op == "attention":
        # QK^T and PV: 2 matmuls of 2*b*h*sq*skv*d each; causal skips half.
        f = 4.0 * s["batch"] * s["heads"] * s["seq_q"] * s["seq_kv"] * s["head_dim"]
        f = f * np.where(np.asarray(s["causal"], dtype=bool), 0.5, 1.0)
        return f * (2.5 if pass_ == "bwd" else 1.0)
    if op == "optimizer_step":
        return _per_optimizer(_OPTIMIZER_FLOPS_PER_PARAM, s["optimizer"]) * s["params"]
    if OPS[op].host:  # host time: no device work
        return 0.0 * s[OPS[op].shape[0]]
    if OPS[op].collective or op == "embedding":  # a gather moves data and computes nothing
        return 0.0 * s["tokens" if op == "embedding" else "message_bytes"]
    return _pass_factor(op, pass_) * OPS[op].flops_per_element * _elements(op, s)


def bytes_moved(op: str, pass_: str, shape, dtype):
    """Minimum bytes read plus written by one call (for collectives: the message).

    ``dtype`` is a dtype name or an array of them, one per shape.
    """
    s, e = shape, dtype_bytes(dtype)
    bwd = 2.0 if pass_ == "bwd" else 1.0
    if op in ("gemm", "bmm", "grouped_gemm"):
        batch = s["batch"] if op != "gemm" else 1
        return bwd * batch * (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"]) * e
    if op == "router":
        # input and gate weights in the train dtype; fp32 logits and scores written and read
        # (Megatron keeps router logits in fp32: --moe-router-dtype); top-k scores and int64 ids.
        t, experts = s["tokens"], s["experts"]
        return bwd * (t * s["hidden"] + s["hidden"] * experts) * e + 16.0 * t * experts + 12.0 * t * s["top_k"]
    if op in ("permute", "unpermute"):
        # reads tokens·hidden and writes tokens·top_k·hidden (or the reverse), int64 indices.
        return (s["tokens"] * (1 + s["top_k"]) * s["hidden"] * dtype_bytes(dtype)
                + 8.0 * s["tokens"] * s["top_k"])
    if op == "attention":
        q_o = 2 * s["batch"] * s["heads"] * s["seq_q"] * s["head_dim"]
        k_v = 2 * s["batch"] * s["kv_heads"] * s["seq_kv"] * s["head_dim"]
        return bwd * (q_o + k_v) * e
    if op == "optimizer_step":
        return _per_optimizer(_OPTIMIZER_BYTES_PER_PARAM, s["optimizer"]) * s["params"]
    if op == "master_weights":  # fp32 read, compute dtype written (forward), or the reverse
        return (4.0 + e) * s["params"]
    if op == "grad_accumulate":  # fp32 .grad and the new gradient read, .grad written
        return 12.0 * s["params"]
    if OPS[op].host:
        return 0.0 * s[OPS[op].shape[0]]
    if OPS[op].collective:
        return 1.0 * s["message_bytes"]
    if op == "embedding":
        gathered = s["tokens"] * s["hidden"] * e
        # bwd scatters into a dense table gradient that is zeroed and written whole.
        return 2.0 * gathered + (s["vocab"] * s["hidden"] * e if pass_ == "bwd" else 0)
    return _pass_factor(op, pass_) * OPS[op].tensors * _elements(op, s) * e


def dtype_bytes(dtype):
    """Bytes per element of a dtype name, or of each name in an array."""
    if isinstance(dtype, str):
        return DTYPE_BYTES[dtype]
    return np.array([DTYPE_BYTES[d] for d in np.asarray(dtype)], dtype=float)


def _per_optimizer(table: dict, optimizer):
    if isinstance(optimizer, str):
        return table[optimizer]
    return np.array([table[o] for o in np.asarray(optimizer)], dtype=float)


def _pass_factor(op: str, pass_: str) -> float:
    """An element-wise op's work in ``pass_`` over its forward's (:attr:`OpSpec.backward_factor`)."""
    return OPS[op].backward_factor if pass_ == "bwd" else 1.0


def _elements(op: str, s):
    out = 1
    for column in OPS[op].elements:
        out = out * s[column]
    return out
