"""Which operators, at which shapes, one training step of a model runs.

``layer_ops`` lists one transformer layer's compute ops with their tensor-parallel
sharded shapes (Megatron-LM's column/row split: TP divides heads and the FFN width,
Shoeybi et al. 2019, arXiv 1909.08053); :func:`predictor.workload.decompose.decompose`
builds the whole step on them (the embedding, output head, loss, optimizer step and
collectives are its own), and sampling plans take their targets from that step.
"""
from __future__ import annotations

from predictor.core.ops import Call
from predictor.core.specs import ModelConfig


def layer_parameters(model: ModelConfig, tp: int = 1) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one transformer layer on one TP rank: the
    matmul weights (attention and FFN) and the two norms; no linear biases."""
    h, hd = model.hidden_size, model.head_dim
    heads = model.num_heads // tp
    kv = model.num_kv_heads // tp if model.num_kv_heads >= tp else 1  # replicated KV head
    attn = h * (heads + 2 * kv) * hd + heads * hd * h
    mlp = (3 if model.activation == "swiglu" else 2) * h * (model.ffn_hidden_size // tp)
    norm = 2 * h * (2 if model.norm == "layernorm" else 1)
    return attn + mlp, norm


def parameter_count(model: ModelConfig) -> int:
    """Trainable parameters: weights, norm gains (and LayerNorm biases); no linear biases."""
    h = model.hidden_size
    embeddings = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    positions = model.seq_length * h if model.position == "learned" else 0
    final_norm = h * (2 if model.norm == "layernorm" else 1)
    return model.num_layers * sum(layer_parameters(model)) + embeddings + positions + final_norm


def parameter_tensors(model: ModelConfig) -> int:
    """Parameter tensors (weights, norm gains and biases): an optimizer step's launch count."""
    norm = 2 if model.norm == "layernorm" else 1
    layer = 4 + 2 * norm  # qkv, out, up, down + two norms
    embeddings = 1 + (model.position == "learned") + (not model.tied_embeddings)
    return model.num_layers * layer + embeddings + norm


def attention_ops(micro_batch: int, heads: int, kv: int, seq_q: int, seq_kv: int, head_dim: int,
                  kernel: str = "flash") -> list[Call]:
    """The attention core: one fused kernel (FlashAttention, SDPA), or Megatron's unfused
    path before it: QK^T (baddbmm), the fused scale-mask-softmax, and PV (bmm)."""
    if kernel == "flash":
        return [Call.of("attention", "fwd", {"batch": micro_batch, "heads": heads, "kv_heads": kv, "seq_q": seq_q,
                                    "seq_kv": seq_kv, "head_dim": head_dim, "causal": True})]
    bh = micro_batch * heads  # grouped K/V are expanded to every query head first
    return [Call.of("bmm", "fwd", {"batch": bh, "m": seq_q, "n": seq_kv, "k": head_dim}),
            Call.of("softmax", "fwd", {"batch": micro_batch, "heads": heads, "seq_q": seq_q, "seq_kv": seq_kv,
                              "causal": True}),
            Call.of("bmm", "fwd", {"batch": bh, "m": seq_q, "n": head_dim, "k": seq_kv})]


def layer_ops(model: ModelConfig, micro_batch: int, seq: int, tp: int = 1, cp: int = 1,
              sequence_parallel: bool = False, attention: str = "flash") -> list[Call]:
    """The compute ops of one transformer layer for one micro-batch.

    With context parallelism each rank holds ``seq / cp`` tokens and attends to the
    whole sequence's keys and values (gathered or passed round a ring). Sequence
    parallelism splits the norms and residual adds along the sequence over tp.
    """
    h, hd = model.hidden_size, model.head_dim
    heads, kv = model.num_heads // tp, max(model.num_kv_heads // tp, 1)
    ffn = model.ffn_hidden_size // tp
    t = micro_batch * seq // cp
    t_sp = t // tp if sequence_parallel else t
    norm = model.norm
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
    if model.activation == "swiglu":
        ops.append(Call.of("gemm", "fwd", {"m": t, "n": 2 * ffn, "k": h}))
    else:
        ops.append(Call.of("gemm", "fwd", {"m": t, "n": ffn, "k": h}))
    ops.append(Call.of(model.activation, "fwd", {"tokens": t, "hidden": ffn}))
    ops.append(Call.of("gemm", "fwd", {"m": t, "n": h, "k": ffn}))  # FFN down
    return ops
