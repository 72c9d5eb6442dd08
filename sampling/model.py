"""A decoder-only transformer built from a ``conf/model`` entry (GPT and Llama families).

The reference training workload trains it; it is written with the same torch calls
that :mod:`sampling.kernels` times (``F.rms_norm``, SDPA with GQA, rotate-half RoPE,
SwiGLU/GELU), so a measured step is made of the sampled operators.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from predictor.config import ModelConfig


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
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.m = m
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
        q, k, v = self.qkv(self.norm1(x)).split(
            [m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.num_kv_heads * m.head_dim], dim=-1)
        q = q.view(b, s, m.num_heads, m.head_dim).transpose(1, 2)
        k = k.view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
        v = v.view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=m.num_kv_heads != m.num_heads)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, -1))
        h = self.up(self.norm2(x))
        if m.activation == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.down(h)


class Transformer(nn.Module):
    """Token ids ``[batch, seq]`` -> logits ``[batch, seq, vocab]``."""

    def __init__(self, m: ModelConfig):
        super().__init__()
        self.m = m
        self.embed = nn.Embedding(m.vocab_size, m.hidden_size)
        self.pos = nn.Embedding(m.seq_length, m.hidden_size) if m.position == "learned" else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.num_layers))
        self.norm = Norm(m.norm, m.hidden_size)
        self.head = nn.Linear(m.hidden_size, m.vocab_size, bias=False)
        if m.tied_embeddings:
            self.head.weight = self.embed.weight
        for module in self.modules():  # GPT-2's N(0, 0.02) initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids):
        s = ids.shape[1]
        x = self.embed(ids)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=ids.device))
        else:
            rope = tuple(t.to(x.device, x.dtype) for t in rope_tables(s, self.m.head_dim))
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.norm(x))
