"""Activation memory stored by one transformer layer for one micro-batch on one GPU.

Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4 / Table 2, generalised term by term (derived):
with 16-bit activations, a GPT layer stores sbh*(34 + 5as/h) bytes — LayerNorm inputs 4sbh, QKV input
2sbh, Q and K 4sbh, V 2sbh, softmax output 2as^2b, its dropout mask as^2b and output 2as^2b, projection
input 2sbh, two dropout masks 2sbh, MLP input 2sbh, GeLU input and fc2 input 16sbh. Generalised here to
GQA/MQA (K, V scale with kv_heads), any ffn, SwiGLU (gate and up outputs plus the product: 6*ffn/h),
MoE (top-k routed copies), no dropout, FlashAttention (no s^2 terms: Dao et al. 2022 stores only the
output and the softmax log-sum-exp), context parallelism (local tokens s/cp attend to all s keys).
TP shards the head- and ffn-sized terms; sequence parallelism also shards the rest (Table 2 rows).
Selective recompute drops the s^2 terms; full recompute keeps only the layer input (2sbh, /t with SP).
Where a stack's selective recompute also repeats a share g of the forward GEMMs with their elementwise
work (`selective_recompute_gemms`: block-level AC of every second block, op-level SAC, JAX remat
policies), that share of the layer is kept as under full recompute: (1 - g) selective + g full (exact
for every-other-block AC; the GEMM-share proxy for op-level policies, the same share the time charges).
"""

from __future__ import annotations

from shardwise.specs.layer import mlp_values
from shardwise.specs.model import ModelSpec


def layer_activation_bytes(
    model: ModelSpec,
    moe_layer: bool,
    tokens: float,
    seq_kv: int,
    tp: int,
    sp: bool,
    recompute: str,
    flash: bool,
    act_bytes: float = 2.0,
    gemm_share: float = 0.0,
) -> float:
    """Bytes one layer keeps for the backward pass, per micro-batch, on one GPU.

    tokens: local tokens of the micro-batch (b*s/cp); seq_kv: keys each query attends to (s);
    gemm_share: the share of the forward GEMMs `recompute: selective` repeats (module docstring).
    """
    h = model.hidden
    sbh = tokens * h
    seq_shard = tp if sp else 1  # terms TP leaves replicated are sharded by sequence parallelism
    if recompute == "full":
        return act_bytes * sbh / seq_shard
    if recompute == "selective" and gemm_share > 0.0:
        kept = layer_activation_bytes(model, moe_layer, tokens, seq_kv, tp, sp, "selective", flash, act_bytes)
        return (1.0 - gemm_share) * kept + gemm_share * act_bytes * sbh / seq_shard
    core = model.attention_core
    heads_local = core.heads / tp
    kv_local = max(core.kv_heads / tp, 1.0)
    dropout_mask = 1.0 if model.dropout else 0.0
    # Attention block.
    replicated = 2 * act_bytes * sbh  # LayerNorm input + QKV input
    replicated += dropout_mask * sbh  # hidden dropout mask after the projection
    sharded = act_bytes * tokens * heads_local * core.d_qk  # Q
    sharded += act_bytes * tokens * kv_local * (core.d_qk + core.d_v)  # K and V
    sharded += act_bytes * tokens * heads_local * core.d_v  # projection input (attention output)
    if flash:
        sharded += 4.0 * tokens * heads_local  # fp32 log-sum-exp per query and head
    elif recompute != "selective":
        per_score = act_bytes + (dropout_mask + act_bytes if model.dropout else 0.0)
        sharded += per_score * heads_local * tokens * seq_kv  # softmax out (+ dropout mask and output)
    # MLP block.
    replicated += act_bytes * sbh + dropout_mask * sbh  # second LayerNorm input + dropout mask
    replicated += act_bytes * sbh  # fc1 input
    # (gate, up, product) or (gelu input, fc2 input) of each MLP copy: shardwise.specs.layer.mlp_values
    if moe_layer:
        routed = model.top_k * tokens
        sharded += act_bytes * routed * h  # dispatched copies of the token (expert fc1 inputs)
        sharded += act_bytes * (routed + model.shared_experts * tokens) * mlp_values(model.expert_linears) / tp
        sharded += 4.0 * tokens * model.experts  # router logits (fp32)
    else:
        sharded += act_bytes * tokens * mlp_values(model.dense_mlp_linears) / tp
    return replicated / seq_shard + sharded


def full_recompute_working_bytes(model: ModelSpec, moe_layer: bool, tokens: float, seq_kv: int, tp: int, sp: bool, flash: bool, act_bytes: float = 2.0) -> float:
    """Transient activations of the one layer being recomputed in the backward pass under full recompute."""
    return layer_activation_bytes(model, moe_layer, tokens, seq_kv, tp, sp, "none", flash, act_bytes)


def output_layer_activation_bytes(model: ModelSpec, tokens: float, tp: int, sp: bool, act_bytes: float = 2.0) -> float:
    """Last stage: final norm input, LM-head input and fp32 logits kept for the cross-entropy backward
    (Korthikanti et al. 2022 Sec. 4.3: 4sbh/t * (1 + V/h))."""
    seq_shard = tp if sp else 1
    return act_bytes * tokens * model.hidden * (1 / seq_shard + 1 / tp) + 4.0 * tokens * model.vocab / tp


def embedding_activation_bytes(model: ModelSpec, tokens: float, tp: int, sp: bool) -> float:
    """First stage: the embedding dropout mask (Korthikanti et al. 2022 Sec. 4.3, the p/L term)."""
    return (tokens * model.hidden / (tp if sp else 1)) if model.dropout else 0.0


def weight_gradient_bytes(model: ModelSpec, moe_layer: bool, tokens: float, tp: int, sp: bool, act_bytes: float = 2.0) -> float:
    """Bytes a layer still holds between its input-gradient (I) and weight-gradient (W) passes: the
    inputs of its weight GEMMs and the gradients of their outputs (Qi et al. 2024 Table 1: M_W = 32sbh
    of M_B = 34sbh + 5as^2b for a GPT layer)."""
    h = model.hidden
    full = tokens * h / (tp if sp else 1)  # hidden-sized tensors, sequence-sharded with SP
    core = model.attention_core
    heads = core.heads / tp
    kv = max(core.kv_heads / tp, 1.0)
    qkv_out = tokens * (heads * core.d_qk + kv * (core.d_qk + core.d_v))
    attn = (full + qkv_out) + (tokens * heads * core.d_v + full)  # QKV and projection GEMMs
    # each MLP copy: its input and output gradient (hidden-sized), the up-projections' outputs and the
    # down-projection's input (shardwise.specs.layer.mlp_values)
    values = mlp_values(model.expert_linears) if moe_layer else mlp_values(model.dense_mlp_linears)
    copies = (model.top_k + model.shared_experts) if moe_layer else 1
    mlp = copies * (full + tokens * values / tp + full)
    return act_bytes * (attn + mlp)
