"""The host side of a training step: the framework calls each operator call makes.

docs/method.md, "Vocabulary" and Composer step 2. A vocabulary call (one ``gemm``, one
``rmsnorm`` ...) is more than its kernel: the framework around it makes eager calls of
its own (Python ``nn.Module`` and ``autograd.Function`` calls, views, transposes and
splits, RNG state for dropout, the dispatcher, autograd's recording) in the forward, and
the autograd engine runs one node per differentiable call in the backward; the device
API launches every kernel. This module counts those calls per vocabulary call and turns a
pass's calls into host ops (:data:`~predictor.core.ops.HOST_OPS`), whose latencies are
sampled (``dispatch`` on this machine: :mod:`sampling.kernels`) or taken from the hardware
profile's cited ``host`` block (a prior).

:data:`CALLS` holds, per call table (each framework's ``host`` in ``conf/framework/``,
:mod:`predictor.core.framework`) and vocabulary call, the host's calls in the forward and
in the backward, counted from the frameworks' code (one transformer layer,
default settings, bf16; each Python-level entry into PyTorch is a call: an aten op, views
included, an ``autograd.Function.apply``, an ``nn.Module`` call, a TorchScript function,
an RNG get or set; the backward counts autograd nodes, a linear layer's two matmuls and a
fused kernel's node as launched):

- ``megatron``: Megatron-LM's GPT layer (``megatron/model/transformer.py`` @b35d061:
  ``ParallelTransformerLayer``, ``ParallelAttention``, ``CoreAttention``, ``ParallelMLP``;
  ``fused_layer_norm.py``, ``fused_softmax.py``, ``fused_bias_gelu.py``;
  ``core/tensor_parallel/layers.py``): 76 forward calls and 37 autograd nodes per layer
  with unfused attention. A fused layer norm is six calls (module, Function, three no-op
  ``contiguous``, the kernel); a linear layer five to ten (modules, the copy or reduce
  region and ``LinearWithGradAccumulationAndAsyncCommunication`` Functions, the matmul,
  ``qkv``'s view and split); each batched matmul of the core attention eight to ten
  (buffer, views, transposes, permute, ``contiguous``); the fused scale-mask-softmax with
  dropout inside the RNG tracker's ``fork`` thirteen; bias-dropout-add two to five.
  Megatron-Core's layers (Transformer Engine modules, fused RoPE and SwiGLU) are counted
  by analogy. Tensor parallelism adds no calls besides its collectives (the copy region is
  skipped under asynchronous all-reduce).
- ``eager``: torchtitan's Llama layer (``torchtitan/models/llama3/model/model.py``
  @6404b93), and eager ``nn.Module`` frameworks like it: 52 forward calls (35 kernels) and
  72 autograd nodes per layer; ``F.rms_norm`` runs as about eight kernels, complex RoPE is
  sixteen calls for q and k, SDPA is wrapped in transposes and a ``contiguous``.
- ``cpu-eager``: PRISM's own reference model (:mod:`sampling.model`) on a CPU, counting
  only the calls *around* each op: on a synchronous device the operator samples were
  timed in eager PyTorch, so they already hold the op's own calls; what they lack is the
  module calls, ``qkv``'s split, views and transposes, the attention output's transpose
  and reshape, SwiGLU's chunk.

On an asynchronous device (CUDA) the collectives' issue is a host op too
(``collective_launch``); a CPU's collective samples hold it. Eager frameworks' tensor
parallelism is DTensor's, a ``dtensor`` host op per pair of column- and row-parallel
linear layers.
"""
from __future__ import annotations

import functools

from predictor.core.framework import host_tables, load_framework, reference_framework
from predictor.core.ops import OPS, TP_ROLES, Call

# No framework calls are counted per parameter tensor around the optimizer step: its kernels
# are multi-tensor, a launch per chunk of tensors (apex/DeepSpeed FusedAdam through
# multi_tensor_applier, torch's fused and foreach AdamW), and Megatron's per-tensor loops
# launch nothing when its DDP keeps main_grad in fp32, as it must under bf16
# (megatron/training/arguments.py): ``_copy_model_grads_to_main_grads``'s
# ``main_grad.float()`` returns the fp32 tensor itself and ``zero_grad`` sets ``.grad`` to
# None (megatron/core/optimizer/optimizer.py). Not counted: their Python, a few us per
# tensor, and under fp16 without fp32 accumulation one cast per tensor (about 1.5 ms a step
# over a hundred tensors).
#: Data parallelism's autograd hook per parameter tensor in the backward (torch DDP's
#: Reducer; Megatron's DDP ``register_grad_ready``), each a framework call.
HOOK_CALLS_PER_TENSOR = 1
#: The TP collectives that end a pair of linear layers: the row-parallel layer's reduction.
TP_REDUCTIONS = ("all_reduce", "reduce_scatter")


def __getattr__(name: str):
    """``CALLS``: (forward calls, backward calls) the host makes per vocabulary call, by call
    table (the module docstring; ops missing from a table make none), read from the
    frameworks' files (:func:`predictor.core.framework.host_tables`) when first asked for."""
    if name == "CALLS":
        return {table.name: dict(table.calls) for table in host_tables().values()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def host_family(framework: str | None, asynchronous: bool) -> str:
    """The call table of ``framework``: PRISM's reference model on a CPU (the reference
    framework's ``host_on_cpu``), else the framework's own (its ``host``)."""
    if not asynchronous:
        return reference_framework().host_on_cpu.name
    return load_framework(framework).host.name


def host_calls(calls: list[Call], pass_: str, family: str, asynchronous: bool) -> list[Call]:
    """The host ops of one pass's ``calls``: a ``dispatch`` call per compute call with its
    framework's calls; on an asynchronous device a ``collective_launch`` per collective;
    in eager frameworks a ``dtensor`` call per TP reduction (one per pair of linear layers)."""
    out: dict[int, list] = {}  # by the cached key's identity: the search decomposes thousands of layouts
    for c in calls:
        group = c.shape if OPS[c.op].collective else ()
        for key in _host_ops(c.op, c.pass_, c.role, group, pass_, family, asynchronous):
            out.setdefault(id(key), [key, 0])[1] += c.count
    return [_counted(key, n) for key, n in out.values()]


def recomputed_pairs(backward: list[Call], forward: list[Call]) -> list[Call]:
    """A backward's host ops (:func:`host_calls`) with the DTensor pairs of a recomputed
    forward priced as the forward pairs they are: the backward's own TP reductions are as
    many as the forward's (each mirrored by its conjugate), and any beyond them are the
    recomputed forward's (``forward``: the forward pass's host ops)."""
    own = {c.shape: c.count for c in forward if c.op == "dtensor"}
    out = []
    for c in backward:
        extra = c.count - own.get(c.shape, 0) if c.op == "dtensor" else 0
        if extra <= 0:
            out.append(c)
            continue
        if own.get(c.shape):
            out.append(_counted(c, own[c.shape]))
        out.append(_counted(_host_key("dtensor", "fwd", c.shape), extra))
    return out


@functools.cache
def _counted(key: Call, count: int) -> Call:
    """``count`` calls of the host op ``key``, made once per distinct count."""
    return Call(key.op, key.pass_, key.shape, count, "host")


@functools.cache  # its keys are few: ops, passes and collective shapes of the layouts seen
def _host_ops(op: str, call_pass: str, role: str, shape: tuple, pass_: str, family: str,
              asynchronous: bool) -> tuple[Call, ...]:
    """The host ops (count 1) one call adds to a pass (:func:`host_calls`); ``shape`` is a
    collective's (empty for compute calls)."""
    spec, table = OPS[op], host_tables()[family]
    if spec.host:
        return ()
    if spec.collective:
        group = (("group_size", dict(shape)["group_size"]),)
        keys = []
        if table.tp_reductions == "dtensor" and role in TP_ROLES and op in TP_REDUCTIONS:
            keys.append(_host_key("dtensor", pass_, group))
        if asynchronous:
            keys.append(_host_key("collective_launch", "step", group))
        return tuple(keys)
    launches = table.calls.get(op, (0, 0))[call_pass == "bwd"]
    return (_host_key("dispatch", call_pass, (("launches", launches),)),) if launches else ()


@functools.cache
def _host_key(op: str, pass_: str, shape: tuple) -> Call:
    """The one object of a host op at ``shape``: equal host ops of different calls are the
    same object, so :func:`host_calls` merges them by identity."""
    return Call(op, pass_, shape)


def one_dispatch(calls: list[Call], pass_: str) -> list[Call]:
    """A pass's ``dispatch`` calls as one, whose ``launches`` are all of theirs. On a CPU
    this is how its framework time is sampled (:mod:`sampling.framework`: the gaps of a
    pass, over the calls counted around its ops); on CUDA a pass's host timeline is set
    against its device's as a whole (:func:`predictor.engine.stages._host_wait`). A backward
    is one ``backward()``: the autograd engine is entered once and runs every node, as one
    ``dispatch`` backward sample does; apart, each op's call would pay the entry again (60 us
    on an H200's host, where a node costs 12). A CPU's compute ops have the entry taken off
    their backward samples (:mod:`predictor.latency.adjustments.backward_entry`)."""
    mine = [c.op == "dispatch" and c.pass_ == pass_ for c in calls]
    launches = sum(c.count * c.shape[0][1] for c, m in zip(calls, mine) if m)  # its one shape column: launches
    rest = [c for c, m in zip(calls, mine) if not m]
    if pass_ == "fwd" and not launches:  # a backward pays the engine's entry even with no counted call
        return rest
    return rest + [_counted(_host_key("dispatch", pass_, (("launches", max(1, launches)),)), 1)]


def hook_calls(tensors: int, dp_group: int) -> list[Call]:
    """Data parallelism's gradient hooks in the backward, one framework call per parameter
    tensor (none without DP)."""
    if dp_group == 1:
        return []
    return [Call.of("dispatch", "bwd", {"launches": HOOK_CALLS_PER_TENSOR * tensors}, role="host")]
