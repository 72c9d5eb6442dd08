"""A decoder-only transformer built from a ``conf/model`` entry (GPT and Llama families).

The reference training workload trains it; it is written with the same torch calls
that :mod:`sampling.kernels` times (``F.rms_norm``, SDPA with GQA, rotate-half RoPE,
SwiGLU/GELU), so a measured step is made of the sampled operators.

Tensor parallelism (:mod:`sampling.reference`) shards the fused ``qkv`` and ``up``
projections by output rows. Each fused weight is therefore read as ``tp`` consecutive
blocks, block ``r`` holding rank ``r``'s ``[q, k, v]`` (or ``[gate, up]``) rows, and the
forward derives its head counts from the width it actually receives. With ``tp = 1``
this is the ordinary fused layout; the initialisation is i.i.d., so every tp trains the
same model up to a fixed permutation of those rows.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from predictor.core.specs import ModelConfig


class Norm(nn.Module):
    def __init__(self, kind: str, dim: int):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if kind == "layernorm" else None

    def forward(self, x):
        if self.kind == "rmsnorm":
            return F.rms_norm(x, (x.shape[-1],), self.weight)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias)


def rope_tables(seq: int, head_dim: int, base: float = 10000.0):
    """cos/sin of RoPE (Su et al. 2021, arXiv 2104.09864), rotate-half layout."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    """One pre-norm layer; ``recompute="selective"`` recomputes the attention core in the
    backward instead of storing it (Korthikanti et al. 2022, arXiv 2205.05198)."""

    def __init__(self, m: ModelConfig, recompute: str = "none"):
        super().__init__()
        self.m = m
        self.recompute = recompute
        self.norm1, self.norm2 = Norm(m.norm, m.hidden_size), Norm(m.norm, m.hidden_size)
        qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim
        self.qkv = nn.Linear(m.hidden_size, qkv, bias=False)
        self.out = nn.Linear(m.num_heads * m.head_dim, m.hidden_size, bias=False)
        up = 2 * m.ffn_hidden_size if m.activation == "swiglu" else m.ffn_hidden_size
        self.up = nn.Linear(m.hidden_size, up, bias=False)
        self.down = nn.Linear(m.ffn_hidden_size, m.hidden_size, bias=False)

    def forward(self, x, rope):
        m = self.m
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x))
        shards = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim // qkv.shape[-1]  # tp
        heads, kv = m.num_heads // shards, m.num_kv_heads // shards
        q, k, v = qkv.split([heads * m.head_dim, kv * m.head_dim, kv * m.head_dim], dim=-1)
        q = q.view(b, s, heads, m.head_dim).transpose(1, 2)
        k = k.view(b, s, kv, m.head_dim).transpose(1, 2)
        v = v.view(b, s, kv, m.head_dim).transpose(1, 2)
        if rope is not None:
            with record_function("prism::rope"):  # names the composite for `prism import-trace`
                q = apply_rope(q, *rope)
            with record_function("prism::rope"):
                k = apply_rope(k, *rope)
        attend = partial(F.scaled_dot_product_attention, is_causal=True, enable_gqa=kv != heads)
        if self.recompute == "selective":
            a = checkpoint(attend, q, k, v, use_reentrant=False)
        else:
            a = attend(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, -1))
        h = self.up(self.norm2(x))
        if m.activation == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            with record_function("prism::swiglu"):
                h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.down(h)


class Transformer(nn.Module):
    """Token ids ``[batch, seq]`` -> logits ``[batch, seq, vocab]``.

    ``recompute``: ``none``, ``selective`` (the attention core) or ``full`` (each block's
    forward runs again in its backward). A pipeline stage is this module with the parts
    it does not hold set to ``None`` (:func:`sampling.reference.keep_stage`): without
    ``embed`` it takes the hidden states ``[batch, seq, hidden]``, without ``head`` it
    returns them.
    """

    def __init__(self, m: ModelConfig, recompute: str = "none"):
        super().__init__()
        self.m = m
        self.recompute = recompute
        self.embed = nn.Embedding(m.vocab_size, m.hidden_size)
        self.pos = nn.Embedding(m.seq_length, m.hidden_size) if m.position == "learned" else None
        self.blocks = nn.ModuleList(Block(m, recompute) for _ in range(m.num_layers))
        self.norm = Norm(m.norm, m.hidden_size)
        self.head = nn.Linear(m.hidden_size, m.vocab_size, bias=False)
        if m.tied_embeddings:
            self.head.weight = self.embed.weight
        for module in self.modules():  # GPT-2's N(0, 0.02) initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, x):
        s = x.shape[1]
        if self.embed is not None:  # token ids in: the model, or the first pipeline stage
            positions = torch.arange(s, device=x.device)
            x = self.embed(x)
            if self.pos is not None:
                x = x + self.pos(positions)
        rope = None
        if self.m.position == "rope":
            rope = tuple(t.to(x.device, x.dtype) for t in rope_tables(s, self.m.head_dim))
        for block in self.blocks:
            if self.recompute == "full":
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
        if self.head is None:
            return x
        return self.head(self.norm(x))


def loss_fn(logits, labels):
    """The reference workload's loss: next-token cross-entropy, in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
