"""Work of one transformer layer (or the embedding / LM head) for one micro-batch on one GPU.

Each pass is split the way pipeline schedules need it (Qi et al. 2024, Zero Bubble PP Sec. 2):
F (forward), I (input gradients: the dgrad GEMMs, attention and elementwise backward) and W (weight
gradients: the wgrad GEMMs, each as many FLOPs as its forward GEMM). Communication is returned raw
(not yet overlapped); :mod:`shardwise.cost.step` decides what is exposed.

Per-GEMM FLOPs 2*m*n*k; attention: QK^T and AV 2*T*s*d per head each; FlashAttention skips the masked
half under a causal mask and its backward does 2.5x the forward FLOPs (Dao 2023, FlashAttention-2
Sec. 3: five matmuls vs two). Elementwise traffic per token (bytes, derived from the kernels Megatron-LM
fuses): each norm reads and writes h values (2x2 B); each bias-dropout-add reads two and writes one
(+1 B mask); the activation reads 1 (GeLU) or 2 (SwiGLU) and writes 1 ffn-wide value; backward
kernels move twice the forward traffic (read the saved input and the incoming gradient, write one).
Stacks that do not fuse these kernels move `stack.elementwise_traffic` times the bytes in
`stack.kernels_per_layer` kernels (:mod:`shardwise.cost.stack`). Selective recomputation repeats
the core attention when it is not fused (Megatron-LM) and `stack.selective_recompute_gemms` of the
forward GEMMs with their elementwise work (op-level SAC in torchtitan, block-level AC elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardwise.cost.comm import collective_s
from shardwise.cost.device import Device
from shardwise.cost.flops import matmul_weights
from shardwise.cost.stack import StackProfile
from shardwise.specs.hardware import CommGroup
from shardwise.specs.model import ModelSpec


@dataclass(frozen=True)
class PassCost:
    """Seconds of one layer-like block for one micro-batch (raw, before overlap)."""

    f_s: float = 0.0  # forward compute
    i_s: float = 0.0  # input-gradient compute
    w_s: float = 0.0  # weight-gradient compute
    recompute_s: float = 0.0  # forward work repeated before I (activation recomputation), compute only
    tp_fwd_s: float = 0.0  # TP collectives of the forward
    tp_bwd_s: float = 0.0  # TP collectives of the backward (incl. repeated forward ones under full recompute)
    cp_fwd_s: float = 0.0
    cp_bwd_s: float = 0.0
    ep_fwd_s: float = 0.0
    ep_bwd_s: float = 0.0
    attention_s: float = 0.0  # forward attention-core time (window that hides CP transfers)

    def __add__(self, other: PassCost) -> PassCost:
        return PassCost(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def scaled(self, k: float) -> PassCost:
        return PassCost(*(k * a for a in self.astuple()))

    def astuple(self) -> tuple[float, ...]:
        return (self.f_s, self.i_s, self.w_s, self.recompute_s, self.tp_fwd_s, self.tp_bwd_s,
                self.cp_fwd_s, self.cp_bwd_s, self.ep_fwd_s, self.ep_bwd_s, self.attention_s)


@dataclass(frozen=True)
class Groups:
    """Sizes and network placements (:meth:`Cluster.tier_for`) of the groups a layer talks over."""

    tp: int
    cp: int
    ep: int
    tp_tier: CommGroup
    cp_tier: CommGroup
    ep_tier: CommGroup


def _gemm(dev: Device, tokens: float, n_out: float, k_in: float, count: int = 1) -> float:
    return float(dev.gemm_s(tokens, n_out, k_in, count))


@lru_cache(maxsize=4096)
def transformer_layer(
    model: ModelSpec,
    moe_layer: bool,
    tokens: float,
    seq_kv: int,
    sp: bool,
    recompute: str,
    flash: bool,
    dev: Device,
    groups: Groups,
    stack: StackProfile,
    act_bytes: float = 2.0,
) -> PassCost:
    """One transformer layer, one micro-batch of `tokens` local tokens (b*s/cp) attending to `seq_kv` keys."""
    tp = groups.tp
    h, heads = model.hidden, model.heads / tp
    attn_in, attn_out, dense_mlp, expert = matmul_weights(model)
    # --- GEMMs (each has a dgrad and a wgrad twin of equal FLOPs) -------------------------------
    gemm = _gemm(dev, tokens, attn_in / h / tp, h) + _gemm(dev, tokens, h, attn_out / h / tp)
    mats = 3 if model.mlp == "swiglu" else 2
    if moe_layer:
        experts_local = model.experts / groups.ep
        per_expert_tokens = tokens * model.top_k * groups.ep / model.experts
        ffn_local = model.d_expert / tp
        gemm += _gemm(dev, per_expert_tokens, (mats - 1) * ffn_local, h, round(experts_local))
        gemm += _gemm(dev, per_expert_tokens, h, ffn_local, round(experts_local))
        if model.shared_experts:
            gemm += _gemm(dev, tokens, (mats - 1) * model.shared_experts * ffn_local, h)
            gemm += _gemm(dev, tokens, h, model.shared_experts * ffn_local)
        gemm += _gemm(dev, tokens, model.experts, h)  # router
        act_width = (model.top_k + model.shared_experts) * model.d_expert / tp
    else:
        ffn_local = model.ffn / tp
        gemm += _gemm(dev, tokens, (mats - 1) * ffn_local, h) + _gemm(dev, tokens, h, ffn_local)
        act_width = model.ffn / tp
    # --- attention core ---------------------------------------------------------------------------
    d_qk, d_v = model.d_head, model.d_v_head
    if flash:
        flops = 2.0 * tokens * seq_kv * heads * (d_qk + d_v) * 0.5  # causal: masked tiles skipped
        io = act_bytes * heads * (tokens * (d_qk + d_v) + seq_kv * (d_qk + d_v))
        attn_f = float(dev.attention_s(flops, io, seq_kv))
        attn_b = float(dev.attention_s(2.5 * flops, 2.0 * io, seq_kv, backward=True))
    else:
        scores = heads * tokens * seq_kv
        qk = float(dev.gemm_s(tokens, seq_kv, d_qk, heads))  # per head: (s x d) @ (d x s)
        av = float(dev.gemm_s(tokens, d_v, seq_kv, heads))  # per head: (s x s) @ (s x d)
        softmax_bytes = scores * (2 * act_bytes + (2 * act_bytes + 1 if model.dropout else 0)) * stack.elementwise_traffic
        attn_f = qk + av + dev.memory_s(softmax_bytes, 2 if model.dropout else 1)
        attn_b = 2.0 * (qk + av) + dev.memory_s(1.5 * softmax_bytes, 2 if model.dropout else 1)
    # --- elementwise ------------------------------------------------------------------------------
    seq_shard = tp if sp else 1
    residual = 2 * (3 * act_bytes + (1 if model.dropout else 0))  # two bias-dropout-adds
    per_token = (2 * 2 * act_bytes + residual) * h / seq_shard  # two norms + residual adds
    per_token += act_bytes * act_width * (3 if model.mlp == "swiglu" else 2)
    per_token *= stack.elementwise_traffic
    kernels = stack.kernels_per_layer
    elem_f = dev.memory_s(tokens * per_token, kernels)
    elem_b = dev.memory_s(2.0 * tokens * per_token, 2 * kernels)
    # --- communication ----------------------------------------------------------------------------
    activation = tokens * h * act_bytes
    tp_pass = 2 * collective_s("all_reduce", activation, tp, groups.tp_tier)  # = 2 AG + 2 RS with SP
    kv_local = max(model.n_kv_heads / tp, 1.0) * (d_qk + d_v) * tokens * act_bytes
    cp_pass = collective_s("all_gather", kv_local * groups.cp, groups.cp, groups.cp_tier)
    ep_pass = 0.0
    if moe_layer and groups.ep > 1:
        ep_pass = 2 * collective_s("all_to_all", tokens * model.top_k * h * act_bytes, groups.ep, groups.ep_tier)
    # --- recomputation ----------------------------------------------------------------------------
    forward = gemm + attn_f + elem_f
    if recompute == "full":
        recompute_s, tp_recompute = forward, tp_pass
    elif recompute == "selective":
        share = stack.selective_recompute_gemms
        recompute_s = (0.0 if flash else attn_f) + share * (gemm + elem_f)
        tp_recompute = share * tp_pass
    else:
        recompute_s, tp_recompute = 0.0, 0.0
    return PassCost(
        f_s=forward,
        i_s=gemm + attn_b + elem_b,
        w_s=gemm,
        recompute_s=recompute_s,
        tp_fwd_s=tp_pass,
        tp_bwd_s=tp_pass + tp_recompute,
        cp_fwd_s=cp_pass,
        cp_bwd_s=cp_pass,
        ep_fwd_s=ep_pass,
        ep_bwd_s=ep_pass,
        attention_s=attn_f,
    )


@lru_cache(maxsize=1024)
def lm_head(model: ModelSpec, tokens: float, sp: bool, dev: Device, groups: Groups, stack: StackProfile, act_bytes: float = 2.0) -> PassCost:
    """Final norm, vocabulary-parallel LM head and cross-entropy (last pipeline stage)."""
    tp = groups.tp
    head = _gemm(dev, tokens, model.vocab / tp, model.hidden)
    logits = tokens * model.vocab / tp * stack.elementwise_traffic
    ce_f = dev.memory_s(logits * (act_bytes + 8.0), 3)  # write logits, fp32 softmax read + write
    ce_b = dev.memory_s(logits * (8.0 + act_bytes), 2)
    norm = dev.memory_s(tokens * model.hidden * 2 * act_bytes / (tp if sp else 1))
    gather = collective_s("all_gather", tokens * model.hidden * act_bytes, tp, groups.tp_tier) if sp else 0.0
    return PassCost(f_s=head + ce_f + norm, i_s=head + ce_b + 2 * norm, w_s=head, tp_fwd_s=gather, tp_bwd_s=gather)


@lru_cache(maxsize=1024)
def embedding(model: ModelSpec, tokens: float, sp: bool, dev: Device, groups: Groups, act_bytes: float = 2.0) -> PassCost:
    """Vocabulary-parallel embedding lookup (first pipeline stage): gather rows, then all-reduce (or
    reduce-scatter with SP) the partial embeddings over TP (Shoeybi et al. 2019 Sec. 3)."""
    rows = tokens * model.hidden * act_bytes
    kind = "reduce_scatter" if sp else "all_reduce"
    comm = collective_s(kind, rows, groups.tp, groups.tp_tier)
    return PassCost(f_s=dev.memory_s(2 * rows), w_s=dev.memory_s(2 * rows), tp_fwd_s=comm, tp_bwd_s=0.0)
