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
from predictor.core.ops import OPS, unknown_op_message

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _leaf(*size, dtype, device, grad=True):
    return torch.randn(*size, dtype=dtype, device=device).requires_grad_(grad)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _forward(op: str, s: dict, dtype, device):
    """Inputs (those that receive gradients) and a function computing the op's output."""
    t = dict(dtype=dtype, device=device)
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
    if op == "cross_entropy":
        logits = _leaf(s["tokens"], s["vocab"], **t)
        target = torch.randint(0, s["vocab"], (s["tokens"],), device=device)
        return (logits,), lambda: F.cross_entropy(logits, target)
    raise PrismError(unknown_op_message(op))


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
    if pass_ not in OPS[op].passes:
        raise PrismError(f"{op} has no pass {pass_!r}; it has {', '.join(OPS[op].passes)}", field=str(op))
    if op == "optimizer_step":
        return _optimizer_step(shape, device)
    inputs, forward = _forward(op, shape, TORCH_DTYPES[dtype], device)
    if pass_ == "fwd":
        return forward  # with autograd on, as in training (activations are saved)
    out = forward()
    grad_out = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)
