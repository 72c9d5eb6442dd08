"""Floating-point operations of one training step of a decoder-only transformer, dense or
Mixture-of-Experts.

One count, three uses: PRISM's MFU (``prism predict``, ``prism search``), and turning the
TFLOP/s that Megatron-LM publishes back into step times (``predictor.data.published``).
Per token, a step costs ``passes`` times the forward pass, and the forward pass costs

- 2 FLOPs per weight of every matmul: the transformer layers' attention and FFN weights
  (:func:`~predictor.workload.layers.layer_parameters`, so GQA and SwiGLU count as they
  run) and the output head, V·h (the input embedding is a lookup and costs none);
- attention scores and their weighted sum, QKᵀ and PV: 2·2·s·h per layer per token over
  a sequence of s (``h`` being the query heads' width), half of it under a causal mask.

PaLM (Chowdhery et al. 2022, arXiv 2204.02311, appendix B) gives ``6N + 12·L·h·s`` per
token (3 passes) and MFU counts what the model needs: causal attention halved, no
recompute. Narayanan et al. (2021, arXiv 2104.04473, appendix, eq. 3) give
``96·B·s·L·h²·(1 + s/6h + V/16Lh)`` for GPT (4h FFN, multi-head attention): full
recompute runs the layers' forward twice (4 passes) but not the output head's (3),
and attention is counted unmasked. Megatron-LM's ``num_floating_point_operations``
(megatron/training/training.py), the count behind the TFLOP/s its README publishes, is
the same without recompute, 72·B·s·L·h²·(1 + s/6h + V/12Lh) for GPT, and in Megatron-Core
counts GQA (``num_query_groups``) and SwiGLU (3/2 of the FFN) as this function does.

Mixture-of-Experts layers count what a token runs through, as Megatron-Core's count does
(``moe_ffn_hidden_size · moe_router_topk`` plus the shared experts, the router GEMM left
out): the attention, the shared experts and top_k routed experts. Multi-head latent
attention counts its projections through its parameters and its scores over query/key
heads of head_dim + qk_rope_head_dim and value heads of v_head_dim.
"""
from __future__ import annotations

from predictor.core.specs import ModelConfig
from predictor.workload.layers import expert_parameters, layer_parameters, moe_layers

#: Forward, backward for the inputs' gradients, backward for the weights' gradients.
FWD_BWD_PASSES = 3


def model_flops_per_step(model: ModelConfig, tokens: int, seq: int, causal: bool = True,
                         full_recompute: bool = False) -> float:
    """FLOPs of a step of ``tokens`` tokens in sequences of ``seq``.

    The defaults count model FLOPs (PaLM's MFU). ``causal=False, full_recompute=False``
    is Megatron-LM's count; ``causal=False, full_recompute=True`` is Narayanan et al.'s
    eq. 3 (hardware FLOPs with the layers' forward run again)."""
    h = model.num_heads * model.head_dim
    layer_matmuls = 2.0 * layer_parameters(model)[0]
    layer_attention = 2.0 * 2.0 * seq * h * (0.5 if causal else 1.0)
    if model.kv_lora_rank:  # MLA: QK^T over head_dim + qk_rope_head_dim, PV over v_head_dim
        width = model.num_heads * (2 * model.head_dim + model.qk_rope_head_dim + model.v_head_dim) / 2
        layer_attention = 2.0 * 2.0 * seq * width * (0.5 if causal else 1.0)
    layer_passes = FWD_BWD_PASSES + (1 if full_recompute else 0)
    head = 2.0 * model.vocab_size * model.hidden_size
    layers = model.num_layers * (layer_matmuls + layer_attention)
    moe = sum(moe_layers(model))
    if moe:  # a MoE layer's matmuls: attention, shared experts and top_k routed experts (no router)
        routed = 2.0 * model.top_k * expert_parameters(model) / model.num_experts
        layers += moe * (2.0 * layer_parameters(model, moe=True)[0] + routed - layer_matmuls)
    per_token = layer_passes * layers + FWD_BWD_PASSES * head
    return per_token * tokens
