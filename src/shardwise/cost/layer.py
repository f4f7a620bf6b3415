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

Tensor-parallel communication is returned *exposed*, by the plan's overlap mode (:func:`tp_exposed_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shardwise.cost.comm import collective_s
from shardwise.cost.constants import MoeConstants
from shardwise.cost.device import Device
from shardwise.cost.flops import linear_shapes
from shardwise.cost.lowp import NO_LOWP, LowPrecision, cast_s
from shardwise.cost.stack import StackProfile
from shardwise.memo import cached_hash, dataclass_getstate, quick_init
from shardwise.specs.hardware import CommGroup
from shardwise.specs.layer import mlp_values
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import MoeSpec

DEFAULT_MOE = MoeSpec()
DEFAULT_MOE_CONSTANTS = MoeConstants()


@quick_init
@dataclass(frozen=True)
class PassCost:
    """Seconds of one layer-like block for one micro-batch (raw, before overlap)."""

    f_s: float = 0.0  # forward compute
    i_s: float = 0.0  # input-gradient compute
    w_s: float = 0.0  # weight-gradient compute
    recompute_s: float = 0.0  # forward work repeated before I (activation recomputation), compute only
    tp_fwd_s: float = 0.0  # TP collectives of the forward
    tp_bwd_s: float = 0.0  # TP collectives of the backward (incl. repeated forward ones under full recompute)
    cp_fwd_s: float = 0.0  # CP traffic left exposed (attention_pass)
    cp_bwd_s: float = 0.0
    ep_fwd_s: float = 0.0
    ep_bwd_s: float = 0.0

    def __add__(self, other: PassCost) -> PassCost:
        # field by field, written out: this sits on every estimate's hot path (stage_work)
        return PassCost(self.f_s + other.f_s, self.i_s + other.i_s, self.w_s + other.w_s,
                        self.recompute_s + other.recompute_s, self.tp_fwd_s + other.tp_fwd_s,
                        self.tp_bwd_s + other.tp_bwd_s, self.cp_fwd_s + other.cp_fwd_s, self.cp_bwd_s + other.cp_bwd_s,
                        self.ep_fwd_s + other.ep_fwd_s, self.ep_bwd_s + other.ep_bwd_s)

    def scaled(self, k: float) -> PassCost:
        return PassCost(k * self.f_s, k * self.i_s, k * self.w_s, k * self.recompute_s, k * self.tp_fwd_s,
                        k * self.tp_bwd_s, k * self.cp_fwd_s, k * self.cp_bwd_s, k * self.ep_fwd_s, k * self.ep_bwd_s)

    def astuple(self) -> tuple[float, ...]:
        return (self.f_s, self.i_s, self.w_s, self.recompute_s, self.tp_fwd_s, self.tp_bwd_s,
                self.cp_fwd_s, self.cp_bwd_s, self.ep_fwd_s, self.ep_bwd_s)


@quick_init
@dataclass(frozen=True)
class Groups:
    """Sizes and network placements (:meth:`Cluster.tier_for`) of the groups a layer talks over."""

    __hash__ = cached_hash  # keys the layer, rank and comm caches: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    tp: int
    cp: int
    ep: int
    tp_tier: CommGroup
    cp_tier: CommGroup
    ep_tier: CommGroup
    etp: int = 0  # expert tensor-parallel degree; 0: tp
    cp_comm: str = "p2p"  # TrainPlan.cp_comm
    ulysses: int = 1  # ranks of cp exchanging heads by all-to-all (TrainPlan.cp_a2a)
    ulysses_tier: CommGroup | None = None  # placement of the Ulysses all-to-all (a2a+p2p); None: cp_tier
    ring_tier: CommGroup | None = None  # placement of the ring across Ulysses groups (a2a+p2p); None: cp_tier


def _gemm(dev: Device, tokens: float, n_out: float, k_in: float, count: int = 1, lowp: bool = False) -> float:
    return float(dev.gemm_s(tokens, n_out, k_in, count, lowp=lowp))


#: Tensor-parallel communication overlap modes (TrainPlan.tp_overlap), from least to most overlapped.
TP_OVERLAP_MODES = ("none", "bulk", "pipelined", "async")
#: Share of a GEMM's speed lost while TP collectives run beside it on the GPU's SMs (derived: NeMo's
#: userbuffers configuration for Llama 3.1 405B on H100 gives the overlapped collectives 1-24 of the 132 SMs,
#: ~10 on average over the ten overlapped GEMMs: nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py).
TP_OVERLAP_SM_SHARE = 10.0 / 132.0


def tp_exposed_s(mode: str, comm_f: float, comm_b: float, gemm_f: float, gemm_b: float, chunks: int,
                 share: float) -> tuple[float, float]:
    """(exposed forward, exposed backward) TP communication of one layer pass, beside GEMMs of `gemm_f`
    (forward) and `gemm_b` (each backward pass: input- and weight-gradient GEMMs take as long as it).

    - none: forward collectives exposed (each GEMM waits for its input); a share `share` of the backward
      hides under the weight-gradient GEMMs (Megatron-LM's asynchronous input-gradient all-reduce;
      Korthikanti et al. 2022 Sec. 6.2; the stack's fitted tp_comm_overlap);
    - bulk: the backward collectives run beside the independent weight-gradient GEMMs (Transformer Engine
      userbuffers "bulk" overlap of the dgrad all-gather and reduce-scatter): exposed beyond them;
    - pipelined: also the forward: each all-gather + GEMM and GEMM + reduce-scatter split in `chunks` (tp:
      Transformer Engine's ring exchange, one step per rank; Megatron-LM --tp-comm-overlap; Wang et al. 2022,
      "Overlap communication with dependent computation via decomposition"): one chunk's transfer waits,
      the rest hides under the other chunks' GEMMs: exposed C/n + (n-1)/n max(0, C - G);
    - async: the same decomposition in the forward and the backward (torchtitan's async TP: micro-pipelined
      all-gather-matmul and matmul-reduce-scatter over symmetric memory)."""
    if mode == "none":
        return comm_f, comm_b * (1.0 - share)

    def split(c: float, g: float) -> float:
        return c / chunks + max(0.0, c - g) * (chunks - 1) / chunks

    fwd = split(comm_f, gemm_f) if mode in ("pipelined", "async") else comm_f
    bwd = split(comm_b, gemm_b) if mode == "async" else max(0.0, comm_b - gemm_b)
    return fwd, bwd


def expert_rows(model: ModelSpec, tokens: float, groups: Groups, moe: MoeSpec, tile: float) -> float:
    """Rows of each local expert's grouped GEMM on the busiest expert-parallel rank: the layer's routed
    tokens (`tokens` x top-k, re-gathered over the expert-TP group: tokens x etp / tp) spread over the
    experts, times the load factor (capacity or imbalance, :class:`MoeSpec`), padded to the grouped
    GEMM's row tile (each expert's rows are padded to whole tiles)."""
    etp = groups.etp or groups.tp
    rows = tokens * etp / groups.tp * model.top_k * groups.ep / model.experts * moe.load_factor
    return float(np.ceil(rows / tile) * tile)


def dispatch_s(model: ModelSpec, tokens: float, groups: Groups, moe: MoeSpec, act_bytes: float, fp8_dispatch: bool,
               overhead_s: float) -> float:
    """One token dispatch (or combine) of a micro-batch over the expert-parallel group, on the network
    model's all-to-all (:func:`shardwise.cost.comm.collective_s`). `tokens`: the rank's own tokens (its
    sequence-parallel share, b s / (cp tp)). Each rank sends its routed tokens (x top-k, x the load factor
    on the busiest rank) over the EP group, then the expert-TP group all-gathers what its ranks received
    (the combine reduce-scatters it back): Megatron-Core's MoEAlltoAllTokenDispatcher (all-to-all over
    EP, then gather_from_sequence_parallel_region over expert-TP; moe/token_dispatcher.py). The allgather
    dispatcher gathers every rank's tokens over EP x expert-TP instead; DeepEP sends FP8 tokens in
    low-precision recipes (DeepEP README, "low-precision dispatch"). Plus a fixed cost per dispatch
    (routing metadata, splits, synchronisation)."""
    if groups.ep <= 1:
        return 0.0
    etp = groups.etp or groups.tp
    nbytes = tokens * model.hidden * (1.0 if fp8_dispatch and moe.dispatcher == "deepep" else act_bytes)
    if moe.dispatcher == "allgather":
        return collective_s("all_gather", nbytes * etp * groups.ep, groups.ep, groups.ep_tier) + overhead_s
    routed = nbytes * model.top_k * moe.load_factor
    gather = collective_s("all_gather", routed * etp, etp, groups.tp_tier) if etp > 1 else 0.0
    return collective_s("all_to_all", routed, groups.ep, groups.ep_tier) + gather + overhead_s


def cp_gather_s(model: ModelSpec, tokens: float, groups: Groups, act_bytes: float) -> float:
    """K/V of the cp ranks gathered before an unfused attention (no kernel to hide a ring under)."""
    if groups.cp <= 1:
        return 0.0
    core = model.attention_core
    kv_token = max(core.kv_heads / groups.tp, 1.0) * (core.d_qk + core.d_v) * act_bytes
    return collective_s("all_gather", kv_token * tokens * groups.cp, groups.cp, groups.cp_tier)


def attention_pass(model: ModelSpec, tokens: float, seq: int, groups: Groups, dev: Device,
                   act_bytes: float) -> tuple[float, float, float, float, float, float]:
    """Fused attention of one micro-batch's local queries (`tokens` = b s / cp) over a causal sequence of
    `seq`, with its context-parallel traffic: (attention forward, backward, exposed CP forward, backward,
    output-merge bytes forward, backward). Each scheme runs its own kernels (:meth:`Device.attention_s`):

    - no CP: one causal kernel over (b x heads, s, s);
    - p2p (ring attention, Liu et al. 2023; load-balanced as Megatron-LM's zig-zag: each rank keeps chunks i
      and 2cp-1-i): cp steps, the first a causal kernel over the rank's s/cp keys, each later one a full
      kernel over half a block (s/cp queries x s/(2cp) keys: the same pairs), while the next K/V chunk
      (the backward: K/V and their gradients) crosses one ring hop: a step's transfer is exposed beyond the
      step computing beside it; each later step rescales and merges the partial output (fp32: read two,
      write one, FlashAttention's log-sum-exp combination);
    - allgather (Llama 3, Dubey et al. 2024 Sec. 3.3.2): K/V all-gathered first (exposed; the backward
      reduce-scatters their gradients), then each of the rank's two chunks attends to its whole prefix;
    - a2a (DeepSpeed-Ulysses, Jacobs et al. 2023 Sec. 3.1): Q, K, V and the output exchanged by all-to-alls
      (exposed), the attention over the whole sequence with heads / cp heads;
    - a2a+p2p (USP, Megatron-Core's hierarchical CP): Ulysses inside groups of `ulysses` ranks, a p2p ring
      of cp / ulysses ranks across them."""
    tp, cp = groups.tp, groups.cp
    core = model.attention_core
    heads = core.heads / tp
    d_qk, d_v = core.d_qk, core.d_v
    d = 0.5 * (d_qk + d_v)
    b = tokens * cp / seq  # sequences in the micro-batch
    kv_token = max(core.kv_heads / tp, 1.0) * (d_qk + d_v) * act_bytes  # K and V bytes per token on a rank

    def kern(bh: float, s_q: float, s_k: float, causal: bool, backward: bool) -> float:
        io = act_bytes * bh * (s_q + s_k) * (d_qk + d_v) * (2.0 if backward else 1.0)
        return float(dev.attention_s(bh, s_q, s_k, d, causal, backward, io))

    def ring(n: int, h: float, tier: CommGroup) -> tuple[float, ...]:
        """p2p ring over n ranks of local sequence s/n, h heads per rank."""
        local = seq / n
        step_bytes = kv_token * (h / heads) * b * local
        hop = collective_s("send_recv", step_bytes, 2, tier)
        out = b * local * h * d_v * 12.0  # merge one partial output per later step: fp32 read, read, write
        f0, b0 = kern(b * h, local, local, True, False), kern(b * h, local, local, True, True)
        fs, bs = kern(b * h, local, local / 2, False, False), kern(b * h, local, local / 2, False, True)
        exposed_f = max(0.0, hop - f0) + (n - 2) * max(0.0, hop - fs)
        exposed_b = max(0.0, 2 * hop - b0) + (n - 2) * max(0.0, 2 * hop - bs)
        return f0 + (n - 1) * fs, b0 + (n - 1) * bs, exposed_f, exposed_b, (n - 1) * out, (n - 1) * out

    if cp <= 1:
        return kern(b * heads, seq, seq, True, False), kern(b * heads, seq, seq, True, True), 0.0, 0.0, 0.0, 0.0
    if groups.cp_comm in ("a2a", "a2a+p2p"):
        u = groups.ulysses
        q_out = heads * (d_qk + d_v) * tokens * act_bytes
        a2a = collective_s("all_to_all", q_out + kv_token * tokens, u, groups.ulysses_tier or groups.cp_tier)
        n = cp // u
        if n > 1:
            f, bw, ef, eb, mf, mb = ring(n, heads / u, groups.ring_tier or groups.cp_tier)
            return f, bw, a2a + ef, a2a + eb, mf, mb
        h = heads / u
        return kern(b * h, seq, seq, True, False), kern(b * h, seq, seq, True, True), a2a, a2a, 0.0, 0.0
    if groups.cp_comm == "allgather":
        gather = collective_s("all_gather", kv_token * tokens * cp, cp, groups.cp_tier)
        c = seq / (2 * cp)  # rank 0's chunks: the first (prefix c) and the last (prefix s)
        f = kern(b * heads, c, c, True, False) + kern(b * heads, c, seq, True, False)
        bw = kern(b * heads, c, c, True, True) + kern(b * heads, c, seq, True, True)
        return f, bw, gather, gather, 0.0, 0.0
    return ring(cp, heads, groups.cp_tier)


def elementwise_bytes_per_token(model: ModelSpec, moe_layer: bool, tp: int, sp: bool, act_bytes: float = 2.0,
                                load_factor: float = 1.0) -> float:
    """Forward bytes the fused elementwise kernels of one layer move per token of the micro-batch, on one
    GPU (module docstring): two norms and two bias-dropout-adds over h (split over tp with sequence
    parallelism), and the MLP activation over its local width: ffn / tp, or for an MoE layer the token's
    top-k routed copies (x the load factor) and the shared experts, d_expert wide, all over tp. Expert
    TP cancels: a rank holds etp / tp of the routed tokens (gathered over expert-TP) at d_expert / etp."""
    residual = 2 * (3 * act_bytes + (1 if model.dropout else 0))
    norms_and_adds = (2 * 2 * act_bytes + residual) * model.hidden / (tp if sp else 1)
    # the activation's reads and writes around each MLP copy (shardwise.specs.layer.mlp_values)
    if moe_layer:
        values = (model.top_k * load_factor + model.shared_experts) * mlp_values(model.expert_linears) / tp
    else:
        values = mlp_values(model.dense_mlp_linears) / tp
    return norms_and_adds + act_bytes * values


@quick_init
@dataclass(frozen=True)
class _LayerCore:
    """The parts of one layer pass that no TP overlap mode changes (:func:`transformer_layer` applies the mode)."""

    gemm: float
    gemm_tp: float  # the GEMMs beside the TP collectives
    chunked: float  # extra time of those GEMMs split in tp chunks (tp > 1 only)
    forward: float  # gemm + attention + elementwise forward
    backward: float  # attention + elementwise input-gradient pass, without the GEMMs
    recompute_s: float
    recompute_tp_share: float  # share of a pass's TP collectives the recomputed forward repeats
    tp_pass: float
    cp_f: float
    cp_b: float
    ep_pass: float
    a2a_share: float


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
    lowp: LowPrecision = NO_LOWP,
    moe: MoeSpec = DEFAULT_MOE,
    moe_consts: MoeConstants = DEFAULT_MOE_CONSTANTS,
    tp_overlap: str = "none",
) -> PassCost:
    """One transformer layer, one micro-batch of `tokens` local tokens (b*s/cp) attending to `seq_kv` keys.
    `lowp`: the low-precision recipe (block linears in FP8/FP4, plus their casts; :mod:`shardwise.cost.lowp`);
    `moe`: how an MoE layer routes its tokens; `tp_overlap`: how TP communication overlaps the GEMMs
    (:func:`tp_exposed_s`). The mode-independent part is cached once for every mode the planner tries."""
    c = _layer_core(model, moe_layer, tokens, seq_kv, sp, recompute, flash, dev, groups, stack, act_bytes, lowp, moe,
                    moe_consts)
    return _with_tp_overlap(c, tp_overlap if groups.tp > 1 else "none", groups.tp, stack.tp_comm_overlap)


@lru_cache(maxsize=8192)
def _with_tp_overlap(c: _LayerCore, mode: str, tp: int, share: float) -> PassCost:
    """A layer pass with TP overlap `mode`: split in tp chunks, the overlapped GEMMs run at chunk shapes
    (`c.chunked`) and lose TP_OVERLAP_SM_SHARE of their speed to the communication kernels beside them."""
    split_fwd = mode in ("pipelined", "async")
    chunked = c.chunked if split_fwd else 0.0
    tp_f, tp_b = tp_exposed_s(mode, c.tp_pass, c.tp_pass, c.gemm_tp, c.gemm_tp, tp, share)
    fwd_extra = chunked + TP_OVERLAP_SM_SHARE * c.gemm_tp if split_fwd else 0.0
    bwd_extra = (TP_OVERLAP_SM_SHARE * c.gemm_tp if mode != "none" else 0.0) + (chunked if mode == "async" else 0.0)
    # The recomputed forward's collectives overlap as the forward's do (without an overlap mode, as the backward's).
    tp_recompute = c.recompute_tp_share * c.tp_pass
    tp_recompute *= (1.0 - share) if mode == "none" else (tp_f / c.tp_pass if c.tp_pass else 0.0)
    ep_exposed = max(c.ep_pass * (1.0 - c.a2a_share), c.ep_pass - c.a2a_share * (c.gemm + c.backward))
    return PassCost(
        f_s=c.forward + fwd_extra,
        i_s=c.gemm + c.backward + bwd_extra,
        w_s=c.gemm,
        recompute_s=c.recompute_s,
        tp_fwd_s=tp_f,
        tp_bwd_s=tp_b + tp_recompute,
        cp_fwd_s=c.cp_f,
        cp_bwd_s=c.cp_b,
        ep_fwd_s=ep_exposed,
        ep_bwd_s=max(c.ep_pass * (1.0 - c.a2a_share), c.ep_pass - c.a2a_share * c.forward),
    )


@lru_cache(maxsize=4096)
def _layer_core(model: ModelSpec, moe_layer: bool, tokens: float, seq_kv: int, sp: bool, recompute: str, flash: bool,
                dev: Device, groups: Groups, stack: StackProfile, act_bytes: float, lowp: LowPrecision, moe: MoeSpec,
                moe_consts: MoeConstants) -> _LayerCore:
    """The mode-independent costs of :func:`transformer_layer`."""
    tp = groups.tp
    h, heads = model.hidden, model.heads / tp
    # --- block linears (m, n, k, count, speed); each has a dgrad and a wgrad twin of equal FLOPs ---
    linears = [(tokens, n, k, 1, 1.0) for n, k in linear_shapes(model, 0.0, tp)[:2]]
    router = permute = 0.0  # 16-bit router GEMM; token permutation (memory-bound, no weight gradient)
    dispatch = 0.0
    loop_kernels = 0
    if moe_layer:
        etp = groups.etp or tp
        experts_local = round(model.experts / groups.ep)
        # Grouped: one kernel over the local experts, each padded to the grouped GEMM's row tile; a loop
        # (SequentialMLP) runs one plain GEMM per expert and pays each expert's kernels (permuted slice, fc1,
        # activation, fc2) in the forward, twice in the backward.
        tile = moe_consts.grouped_gemm_tile if moe.grouped_gemm else 1.0
        rows = expert_rows(model, tokens, groups, moe, tile)
        grouped = moe_consts.grouped_gemm_ratio if experts_local > 1 and moe.grouped_gemm else 1.0
        loop_kernels = 0 if moe.grouped_gemm else 4 * experts_local
        linears += [(rows, n, k, experts_local, grouped) for n, k in linear_shapes(model, model.d_expert, etp)[2:]]
        if model.shared_experts:
            linears += [(tokens, n, k, 1, 1.0) for n, k in linear_shapes(model, model.shared_experts * model.d_expert, tp)[2:]]
        routed = tokens * etp / tp * model.top_k * moe.load_factor
        router = _gemm(dev, tokens, model.experts, h)
        permute = float(dev.memory_s(2 * 2 * routed * h * act_bytes, 2))  # permute + unpermute: read and write each token
        dispatch = dispatch_s(model, tokens / tp, groups, moe, act_bytes, lowp.active, moe_consts.dispatch_overhead_s)
    else:
        linears += [(tokens, n, k, 1, 1.0) for n, k in linear_shapes(model, model.ffn, tp)[2:]]
    gemms = [_gemm(dev, m, n, k, c, lowp.active) / speed for m, n, k, c, speed in linears]  # each linear once
    gemm = sum(gemms) + router
    # --- low-precision casts: GEMM inputs in the forward, output gradients in the backward ----------
    n_lin = sum(c for _, _, _, c, _ in linears)
    cast_f = cast_b = 0.0  # cast_s is 0 for 16-bit jobs
    if lowp.active:
        cast_f = float(cast_s(dev, lowp, sum(m * k * c for m, _, k, c, _ in linears), len(linears)))
        cast_b = float(cast_s(dev, lowp, sum(m * n * c for m, n, _, c, _ in linears), len(linears)))
        if not lowp.weights_per_step:  # weights cast at every forward
            cast_f += float(cast_s(dev, lowp, sum(n * k * c for _, n, k, c, _ in linears), n_lin))
    # --- attention core ---------------------------------------------------------------------------
    d_qk, d_v = model.attention_core.d_qk, model.attention_core.d_v
    merge_f = merge_b = 0.0
    if flash:
        attn_f, attn_b, cp_f, cp_b, merge_f, merge_b = attention_pass(model, tokens, seq_kv, groups, dev, act_bytes)
    else:
        scores = heads * tokens * seq_kv
        qk = float(dev.gemm_s(tokens, seq_kv, d_qk, heads))  # per head: (s x d) @ (d x s)
        av = float(dev.gemm_s(tokens, d_v, seq_kv, heads))  # per head: (s x s) @ (s x d)
        softmax_bytes = scores * (2 * act_bytes + (2 * act_bytes + 1 if model.dropout else 0)) * stack.elementwise_traffic
        attn_f = qk + av + dev.memory_s(softmax_bytes, 2 if model.dropout else 1)
        attn_b = 2.0 * (qk + av) + dev.memory_s(1.5 * softmax_bytes, 2 if model.dropout else 1)
        cp_f = cp_b = cp_gather_s(model, tokens, groups, act_bytes)  # unfused attention: K/V gathered first
    # --- elementwise ------------------------------------------------------------------------------
    per_token = elementwise_bytes_per_token(model, moe_layer, tp, sp, act_bytes, moe.load_factor) * stack.elementwise_traffic
    kernels = stack.kernels_per_layer
    elem_f = dev.memory_s(tokens * per_token + merge_f, kernels + loop_kernels) + cast_f + permute
    elem_b = dev.memory_s(2.0 * tokens * per_token + merge_b, 2 * (kernels + loop_kernels)) + cast_b + permute
    # --- communication ----------------------------------------------------------------------------
    activation = tokens * h * act_bytes
    # Attention and MLP each all-reduce (all-gather + reduce-scatter with SP) over tp. An MoE layer's routed
    # experts take their tokens from the dispatcher instead (dispatch_s: all-to-all over EP, then all-gather
    # over expert-TP; Megatron-Core TEGroupedLinear leaves "the comms between TP and EP group" to the token
    # dispatcher, megatron/core/extensions/transformer_engine.py), so with ep > 1 and no shared experts
    # (which keep their own tp collectives) the MLP's tp collectives are the dispatcher's.
    tp_one = collective_s("all_reduce", activation, tp, groups.tp_tier)
    dispatched = moe_layer and groups.ep > 1 and not model.shared_experts
    tp_pass = tp_one * (1 if dispatched else 2)
    # The GEMMs next to the TP collectives (the attention projections, and the MLP's unless the dispatcher
    # carries its tokens) are what an overlap hides them under; split in tp chunks they run at chunk shapes.
    tp_linears = linears[:2] if dispatched else linears[:2] + linears[2:4]
    gemm_tp = sum(gemms[:len(tp_linears)])  # tp_linears are the first of `linears`
    # Dispatch + combine; under all-to-all overlap (Megatron-Core's 1F1B A2A overlap, DualPipe) they run beside
    # another micro-batch's compute of the layer, so only what that compute cannot cover stays exposed.
    ep_pass = 2 * dispatch
    a2a_share = 1.0 if moe.overlap_a2a else (0.0 if moe.overlap_a2a is False else stack.ep_comm_overlap)
    # Split in tp chunks (pipelined and async overlap), the GEMMs beside the collectives run at chunk shapes.
    chunked = (sum(tp * _gemm(dev, m / tp, n, k, c, lowp.active) / speed for m, n, k, c, speed in tp_linears) - gemm_tp
               if tp > 1 else 0.0)
    # --- recomputation ----------------------------------------------------------------------------
    forward = gemm + attn_f + elem_f
    if recompute == "full":
        recompute_s, tp_share = forward, 1.0
    elif recompute == "selective":
        share = stack.selective_recompute_gemms
        recompute_s = (0.0 if flash else attn_f) + share * (gemm + elem_f)
        tp_share = share
    else:
        recompute_s, tp_share = 0.0, 0.0
    return _LayerCore(gemm=gemm, gemm_tp=gemm_tp, chunked=chunked, forward=forward, backward=attn_b + elem_b,
                      recompute_s=recompute_s, recompute_tp_share=tp_share, tp_pass=tp_pass, cp_f=cp_f, cp_b=cp_b,
                      ep_pass=ep_pass, a2a_share=a2a_share)


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
    return PassCost(f_s=head + ce_f + norm, i_s=head + ce_b + 2 * norm, w_s=head, tp_fwd_s=gather,
                    tp_bwd_s=gather * (1.0 - stack.tp_comm_overlap))


@lru_cache(maxsize=1024)
def embedding(model: ModelSpec, tokens: float, sp: bool, dev: Device, groups: Groups, act_bytes: float = 2.0) -> PassCost:
    """Vocabulary-parallel embedding lookup (first pipeline stage): gather rows, then all-reduce (or
    reduce-scatter with SP) the partial embeddings over TP (Shoeybi et al. 2019 Sec. 3)."""
    rows = tokens * model.hidden * act_bytes
    kind = "reduce_scatter" if sp else "all_reduce"
    comm = collective_s(kind, rows, groups.tp, groups.tp_tier)
    return PassCost(f_s=dev.memory_s(2 * rows), w_s=dev.memory_s(2 * rows), tp_fwd_s=comm, tp_bwd_s=0.0)


def clear_caches() -> None:
    """Empty the layer-cost caches (benchmarks time a cold estimate with them)."""
    for f in (_layer_core, _with_tp_overlap, lm_head, embedding):
        f.cache_clear()
