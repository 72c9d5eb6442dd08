"""One callable per (op, pass, shape): the work a training step does for that op.

``build(op, pass_, shape, dtype, device)`` allocates the operands once and returns a
zero-argument function that runs one call. Forward calls run the op; backward calls
replay the op's autograd graph (``retain_graph=True``) so every repeat does exactly
the backward work of one layer call, gradient allocation included.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from predictor.core.errors import PrismError
from predictor.core.ops import FORWARD_WORK_IN_BWD, OPS, unknown_op_message
from sampling.plan import IN_STEPS, in_steps_message

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _leaf(*size, dtype, device, grad=True):
    return torch.randn(*size, dtype=dtype, device=device).requires_grad_(grad)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class _Reshape(torch.nn.Module):
    """A module call around a view: the smallest framework call a layer makes."""

    def forward(self, y):
        return y.view(y.shape)


#: One eager framework call each, cycled through by ``dispatch`` (predictor.workload.host
#: counts a layer's calls of these kinds): a module call, a view-like call and two tiny
#: element-wise calls, each recorded by autograd.
_FRAMEWORK_CALLS = (_Reshape(), lambda y: y.transpose(0, 1), lambda y: y * 1.0, lambda y: y + 0.0)


def _forward(op: str, s: dict, dtype, device):
    """Inputs (those that receive gradients) and a function computing the op's output."""
    t = dict(dtype=dtype, device=device)
    if op == "dispatch":  # host time: a 4x4 tensor, so that the kernels take no time
        x = _leaf(4, 4, **t)

        def framework_calls():
            y = x
            for i in range(s["launches"]):
                y = _FRAMEWORK_CALLS[i % len(_FRAMEWORK_CALLS)](y)
            return y
        return (x,), framework_calls
    if op == "gemm":
        x, w = _leaf(s["m"], s["k"], **t), _leaf(s["k"], s["n"], **t)
        return (x, w), lambda: x @ w
    if op == "bmm":
        x, w = _leaf(s["batch"], s["m"], s["k"], **t), _leaf(s["batch"], s["k"], s["n"], **t)
        return (x, w), lambda: torch.bmm(x, w)
    if op in ("softmax", "masked_fill"):
        scores = _leaf(s["batch"], s["heads"], s["seq_q"], s["seq_kv"], **t)
        upper = torch.ones(s["seq_q"], s["seq_kv"], dtype=torch.bool, device=device).triu(1)
        if op == "masked_fill":
            return (scores,), lambda: scores.masked_fill(upper, -10000.0)
        if s["causal"]:  # scale, mask and softmax in one expression, as the fused kernel does
            bias = torch.zeros(upper.shape, dtype=dtype, device=device).masked_fill(upper, float("-inf"))
            return (scores,), lambda: torch.softmax(scores + bias, dim=-1)
        return (scores,), lambda: torch.softmax(scores, dim=-1)
    if op == "attention":
        b, h, kv, d = s["batch"], s["heads"], s["kv_heads"], s["head_dim"]
        q = _leaf(b, h, s["seq_q"], d, **t)
        k, v = _leaf(b, kv, s["seq_kv"], d, **t), _leaf(b, kv, s["seq_kv"], d, **t)
        return (q, k, v), lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=bool(s["causal"]), enable_gqa=kv != h)
    if op in ("rmsnorm", "layernorm"):
        x, w = _leaf(s["tokens"], s["hidden"], **t), _leaf(s["hidden"], **t)
        if op == "rmsnorm":
            return (x, w), lambda: F.rms_norm(x, (s["hidden"],), w)
        bias = _leaf(s["hidden"], **t)
        return (x, w, bias), lambda: F.layer_norm(x, (s["hidden"],), w, bias)
    if op == "rope":
        x = _leaf(s["tokens"], s["heads"], s["head_dim"], **t)
        angle = torch.rand(s["tokens"], 1, s["head_dim"], device=device)
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
        return (x,), lambda: x * cos + _rotate_half(x) * sin
    if op == "swiglu":
        x = _leaf(s["tokens"], 2 * s["hidden"], **t)

        def swiglu():
            gate, up = x.chunk(2, dim=-1)
            return F.silu(gate) * up
        return (x,), swiglu
    if op == "gelu":
        x = _leaf(s["tokens"], s["hidden"], **t)
        return (x,), lambda: F.gelu(x, approximate="tanh")
    if op == "residual_add":
        x, y = _leaf(s["tokens"], s["hidden"], **t), _leaf(s["tokens"], s["hidden"], **t)
        return (x, y), lambda: x + y
    if op == "embedding":
        ids = torch.randint(0, s["vocab"], (s["tokens"],), device=device)
        w = _leaf(s["vocab"], s["hidden"], **t)
        return (w,), lambda: F.embedding(ids, w)
    if op == "quantize":  # current scaling to FP8 E4M3 (max 448): the cast of either pass
        x = _leaf(s["tokens"], s["hidden"], grad=False, **t)
        return (), lambda: (x * (448.0 / x.abs().amax())).to(torch.float8_e4m3fn)
    if op == "master_weights":  # autocast's cast of an fp32 weight; its backward casts the gradient back
        w = _leaf(s["params"], dtype=torch.float32, device=device)
        return (w,), lambda: w.to(dtype)
    if op == "cross_entropy":
        logits = _leaf(s["tokens"], s["vocab"], **t)
        target = torch.randint(0, s["vocab"], (s["tokens"],), device=device)
        return (logits,), lambda: F.cross_entropy(logits, target)
    if op == "vocab_parallel_cross_entropy":
        logits = _leaf(s["tokens"], s["vocab"], **t)
        target = torch.randint(0, s["vocab"], (s["tokens"],), device=device)
        return (logits,), lambda: _VocabParallelCrossEntropy.apply(logits, target)
    moe = _moe_forward(op, s, t)
    if moe is not None:
        return moe
    raise PrismError(unknown_op_message(op))


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's unfused loss on one rank holding the whole vocabulary (tp = 1: its
    all-reduces of the max, the target logit and the sum are no-ops), its passes as it
    runs them (megatron/core/tensor_parallel/cross_entropy.py): fp32 logits shifted by their
    max, exponentiated and normalised in place; the backward subtracts one at the target and
    scales by the output gradient, and autograd casts the gradient back to the logits' dtype.
    Its loss per token is ``F.cross_entropy``'s (tests/sampling/test_kernels.py)."""

    @staticmethod
    def forward(ctx, logits, target):
        x = logits.float()
        x -= x.max(dim=-1)[0].unsqueeze(-1)
        rows = torch.arange(x.shape[0], device=x.device)
        predicted = x[rows, target].clone()
        torch.exp(x, out=x)
        total = x.sum(dim=-1)
        x.div_(total.unsqueeze(-1))
        ctx.save_for_backward(x, target)
        return torch.log(total) - predicted

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, target = ctx.saved_tensors
        # Megatron subtracts one at the target and scales the saved softmax in place; scaled
        # into a new tensor (the same bytes), the sampler can replay the backward
        grad = softmax * grad_loss.unsqueeze(-1)
        grad[torch.arange(grad.shape[0], device=grad.device), target] -= grad_loss
        return grad, None  # autograd casts it to the logits' dtype


def _moe_forward(op: str, s: dict, t: dict):
    """The Mixture-of-Experts ops (Megatron-Core MoELayer's kernels, unfused): the router's
    gate GEMM, fp32 scores and top-k; the permutation of each token once per chosen expert
    (a row gather by expert) and its reverse (scatter back, weighted sum of the top_k
    outputs); the experts' grouped GEMM, one equal-sized GEMM per expert (as a batched
    GEMM: the decomposition gives every local expert the busiest rank's token count)."""
    if op == "router":
        x, w = _leaf(s["tokens"], s["hidden"], **t), _leaf(s["hidden"], s["experts"], **t)
        k = min(s["top_k"], s["experts"])

        def router():
            scores = torch.softmax((x @ w).float(), dim=-1)  # Megatron: --moe-router-dtype fp32
            return scores.topk(k, dim=-1).values
        return (x, w), router
    if op in ("permute", "unpermute"):
        rows = s["tokens"] * s["top_k"]
        order = torch.randperm(rows, device=t["device"]) % s["tokens"]  # token of each (token, expert) row
        if op == "permute":
            x = _leaf(s["tokens"], s["hidden"], **t)
            return (x,), lambda: x.index_select(0, order)
        y = _leaf(rows, s["hidden"], **t)
        probs = torch.rand(rows, 1, **t)

        def unpermute():
            out = torch.zeros(s["tokens"], s["hidden"], **t)
            return out.index_add(0, order, y * probs)
        return (y,), unpermute
    if op == "grouped_gemm":
        x, w = _leaf(s["batch"], s["m"], s["k"], **t), _leaf(s["batch"], s["k"], s["n"], **t)
        return (x, w), lambda: torch.bmm(x, w)
    return None


def _optimizer_step(s: dict, device) -> Callable[[], None]:
    # fp32 master weights, the parameter count split evenly over `tensors` tensors
    sizes = [len(c) for c in torch.arange(s["params"]).tensor_split(s["tensors"])]
    params = []
    for size in sizes:
        p = torch.nn.Parameter(torch.randn(size, device=device))
        p.grad = torch.randn_like(p)
        params.append(p)
    fused = device.type == "cuda" or None
    if s["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-4, fused=fused)
    elif s["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9, fused=fused)
    else:
        raise PrismError(f"optimizer_step: unknown optimizer {s['optimizer']!r}; use adamw or sgd",
                         field='optimizer_step')
    return opt.step


def build(op: str, pass_: str, shape: dict, dtype: str, device: torch.device) -> Callable[[], object]:
    """A zero-argument function running one ``op`` call in ``pass_`` at ``shape``."""
    if op not in OPS or OPS[op].collective:
        raise PrismError(unknown_op_message(op) if op not in OPS else f"{op} is a collective")
    if op in IN_STEPS:
        raise PrismError(in_steps_message(op), field="sampling.ops")
    if pass_ not in OPS[op].passes:
        raise PrismError(f"{op} has no pass {pass_!r}; it has {', '.join(OPS[op].passes)}", field=str(op))
    if op == "optimizer_step":
        return _optimizer_step(shape, device)
    if op == "grad_accumulate":  # fp32 gradients, whatever the compute dtype
        grad, new = (torch.randn(shape["params"], device=device) for _ in range(2))
        return lambda: grad.add_(new)
    inputs, forward = _forward(op, shape, TORCH_DTYPES[dtype], device)
    if pass_ == "fwd" or op in FORWARD_WORK_IN_BWD:  # a cast is the same work in either pass
        return forward  # with autograd on, as in training (activations are saved)
    out = forward()
    grad_out = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)
