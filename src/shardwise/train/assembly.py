"""One composition of a training step for the exact estimate, the planner's vectorised screen and the
heterogeneous path, which differ only in how the pipeline is timed (the estimate and the heterogeneous path
simulate the schedule; the screen uses closed forms).

- per block: the per-layer costs and activation bytes of one :class:`~shardwise.specs.layout.Layout`
  (:func:`blocks`), on one :class:`Costing` (model, training, cluster, constants, stack, device, recipe);
- per stage: one micro-batch's F, I, W and kept activations (:func:`stage_work`);
- per pipeline rank: which stages it holds (:func:`stages_of_rank`), their contents and load
  (:func:`rank_contents`, :func:`rank_loads`), its model states, fixed memory, data-parallel communication and
  optimizer step (:func:`rank_tail`), and its memory, states + fixed + (1 + frag) x activations
  (:class:`RankMemory`, :func:`peak_bytes`);
- per step: pipeline + straggler + data parallel + optimizer + host (+ activation-offload copies)
  (:func:`step_parts`).

Every argument of :func:`rank_tail` and the memory and step compositions may be a number or a numpy array
(one plan per element).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from shardwise.cost import adapters
from shardwise.cost.activations import (
    embedding_activation_bytes,
    full_recompute_working_bytes,
    layer_activation_bytes,
    output_layer_activation_bytes,
    weight_gradient_bytes,
)
from shardwise.cost.adapters import paged_optimizer
from shardwise.cost.comm import group_collective_s
from shardwise.cost.constants import Constants
from shardwise.cost.device import Device
from shardwise.cost.layer import Groups, PassCost, embedding, lm_head, transformer_layer
from shardwise.cost.lowp import NO_LOWP, LowPrecision, cast_s
from shardwise.cost.memory import ModelStateBytes, optimizer_bytes_per_param
from shardwise.cost.numeric import Num, maximum, where
from shardwise.cost.overlap import dp_exposed_s, exposed_layer_comm
from shardwise.cost.stack import StackProfile
from shardwise.cost.step import (
    HostBytes,
    cxl_share,
    fixed_memory_bytes,
    host_link_gbyte_s,
    host_overhead_s,
    host_state_bytes,
    model_states,
    offload_params_s,
    optimizer_step_s,
    straggler_factor,
)
from shardwise.memo import quick_init
from shardwise.specs.hardware import Cluster, CommGroup
from shardwise.specs.layout import Layout
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.pipeline_timing import PipelineTiming
from shardwise.train.result import MemoryBreakdown, TimeBreakdown
from shardwise.train.stages import StageContent, stage_params


@quick_init
@dataclass(frozen=True)
class BlockActivations:
    """Bytes one micro-batch leaves for the backward in each kind of block (numbers, or arrays with one
    element per layer key in the planner's screen)."""

    dense: Num  # a dense layer
    moe: Num  # an MoE layer
    embedding: Num  # the first stage's embedding
    output: Num  # the last stage: final norm, LM head input, logits
    recompute: Num  # transient working set of the layer being recomputed (full or GEMM-repeating selective recompute)

    def extra(self, holds_output: bool | np.ndarray) -> Num:
        """What a pipeline rank holds beside its stages' in-flight activations: the working set of the layer
        being recomputed, and on the rank with the last stage the output layer's activations."""
        return self.recompute + where(holds_output, self.output, 0.0)


@quick_init
@dataclass(frozen=True)
class Blocks:
    """Costs of one micro-batch through each kind of block, and what each stores for the backward."""

    dense: PassCost
    moe: PassCost
    embedding: PassCost
    head: PassCost
    act: BlockActivations
    w_retained: float  # share of a layer's activations held from its I pass to its W pass


@quick_init
@dataclass(frozen=True, eq=False)
class Costing:
    """What a group of GPUs costs a step with: the job's model and training, the cluster (or one group of a
    heterogeneous one), the constants, the software stack, the device model and the low-precision recipe."""

    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    consts: Constants
    stack: StackProfile
    dev: Device
    lowp: LowPrecision = NO_LOWP


def layer_groups(cluster: Cluster, layout: Layout) -> Groups:
    """The groups a layer talks over, placed by the layout's rank grid (:class:`shardwise.specs.layout.Layout`:
    TP innermost, then CP with its Ulysses ranks innermost and the ring across them; the expert layers
    re-split the ranks as etp x ep)."""
    solo = CommGroup(1, 1, cluster.network)  # a group of one rank, wherever it sits (most of a plan's groups)

    def tier(dim: str) -> CommGroup:
        size = layout.group(dim)
        return solo if size == 1 else cluster.tier_for(size, layout.stride(dim))

    return Groups(layout.tp, layout.cp, layout.ep, tier("tp"), tier("cp"), tier("ep"), etp=layout.etp,
                  cp_comm=layout.cp_comm, ulysses=layout.ulysses, ulysses_tier=tier("ulysses"), ring_tier=tier("ring"))


def _dense_groups(groups: Groups) -> Groups:
    """Dense blocks do not talk over the expert groups: one cache entry serves every ep and etp."""
    return Groups(groups.tp, groups.cp, 1, groups.tp_tier, groups.cp_tier, groups.tp_tier, etp=0, cp_comm=groups.cp_comm,
                  ulysses=groups.ulysses, ulysses_tier=groups.ulysses_tier, ring_tier=groups.ring_tier)  # no replace(): hot


def _tokens(training: TrainingSpec, layout: Layout) -> float:
    """Local tokens of one micro-batch: micro-batch x sequence over the CP ranks."""
    return layout.micro_batch * training.seq_len / layout.cp


def layer_passes(ctx: Costing, layout: Layout, flash: bool, groups: Groups, tp_overlap: str,
                 dense_groups: Groups | None = None) -> tuple[PassCost, PassCost]:
    """(dense layer, MoE layer) passes of one micro-batch, with LoRA's frozen base and adapters where the job
    trains adapters; the part of :func:`blocks` a TP overlap mode changes. `dense_groups`: the groups'
    :func:`_dense_groups` where the caller has them."""
    model, training, dev, stack = ctx.model, ctx.training, ctx.dev, ctx.stack
    seq, ab, tokens = training.seq_len, training.activation_bytes, _tokens(training, layout)
    sp, recompute = bool(layout.sp), layout.recompute
    dense = transformer_layer(model, False, tokens, seq, sp, recompute, flash, dev, dense_groups or _dense_groups(groups), stack,
                              ab, ctx.lowp, tp_overlap=tp_overlap)
    moe = (transformer_layer(model, True, tokens, seq, sp, recompute, flash, dev, groups, stack, ab, ctx.lowp, training.moe,
                             ctx.consts.moe, tp_overlap)
           if model.is_moe else dense)
    lora = training.adapter
    if lora is not None:  # frozen base + adapters (dense models only: LoraSpec.shapes)
        extra = adapters.adapter_layer_cost(model, lora, tokens, groups.tp, dev, ab, recompute, stack.selective_recompute_gemms)
        dense = moe = adapters.frozen_layer(dense, extra)
    return dense, moe


def blocks(ctx: Costing, layout: Layout, flash: bool, tp_overlap: str = "none", groups: Groups | None = None,
           passes: tuple[PassCost, PassCost] | None = None) -> Blocks:
    """Per-block costs and activation bytes of one micro-batch under `layout` (one plan: plain fields).
    `groups`: :func:`layer_groups` of the layout where the caller has them; `tp_overlap` the resolved TP
    overlap mode (:func:`shardwise.cost.stack.tp_overlap_mode`); `passes` the layers' :func:`layer_passes`
    at that mode where the caller has them already."""
    model, training, stack = ctx.model, ctx.training, ctx.stack
    seq, ab, tokens = training.seq_len, training.activation_bytes, _tokens(training, layout)
    tp, sp, recompute = layout.tp, bool(layout.sp), layout.recompute
    groups = groups or layer_groups(ctx.cluster, layout)
    dense_groups = _dense_groups(groups)
    dense, moe = passes or layer_passes(ctx, layout, flash, groups, tp_overlap, dense_groups)
    share = stack.selective_recompute_gemms  # what `selective` repeats also goes unstored (cost/activations.py)
    act_dense = layer_activation_bytes(model, False, tokens, seq, tp, sp, recompute, flash, ab, share)
    act_moe = layer_activation_bytes(model, True, tokens, seq, tp, sp, recompute, flash, ab, share) if model.is_moe else act_dense
    kept = weight_gradient_bytes(model, model.is_moe, tokens, tp, sp, ab)
    full = recompute == "full"
    recomputes_layers = full or (recompute == "selective" and share > 0.0)  # a recomputed layer's working set
    emb, head = (embedding(model, tokens, sp, ctx.dev, dense_groups, ab),
                 lm_head(model, tokens, sp, ctx.dev, dense_groups, stack, ab))
    act_recompute = full_recompute_working_bytes(model, model.is_moe, tokens, seq, tp, sp, flash, ab) if recomputes_layers else 0.0
    lora = training.adapter
    if lora is not None:  # frozen base + adapters (dense models only: LoraSpec.shapes)
        emb, head = adapters.frozen_block(emb), adapters.frozen_block(head)
        act_dense += adapters.adapter_activation_bytes(model, lora, tokens, tp, recompute, ab)
        act_moe = act_dense
        if recomputes_layers:
            act_recompute += adapters.adapter_working_bytes(model, lora, tokens, tp, ab)
    return Blocks(
        dense=dense,
        moe=moe,
        embedding=emb,
        head=head,
        act=BlockActivations(
            dense=act_dense,
            moe=act_moe,
            embedding=embedding_activation_bytes(model, tokens, tp, sp),
            output=output_layer_activation_bytes(model, tokens, tp, sp, ab),
            recompute=act_recompute,
        ),
        w_retained=1.0 if full else min(1.0, kept / (act_moe if model.is_moe else act_dense)),
    )


class Exposed(NamedTuple):
    """Seconds of one block's (or stage's) work: compute (F + I + W + recompute) and the TP, CP and EP
    communication left exposed."""

    compute: float
    tp: float
    cp: float
    ep: float


class StageWork(NamedTuple):
    """One micro-batch through one virtual stage: its F, I and W seconds (communication included), what of
    them is compute and exposed communication, and the activation bytes it keeps for the backward."""

    f: float
    i: float
    w: float
    exposed: Exposed
    act: float


def stage_work(b: Blocks, st: StageContent) -> StageWork:
    """One micro-batch through one virtual stage: the layer-like blocks of `st` costed by `b` (their TP
    communication as exposed)."""
    cost = b.dense.scaled(st.dense_layers)
    if st.moe_layers:  # a dense model's stages add no MoE term (and build no zero PassCost for it)
        cost = cost + b.moe.scaled(st.moe_layers)
    if st.embedding:
        cost = cost + b.embedding
    if st.lm_head:
        cost = cost + b.head
    f, i, w, e_tp, e_cp, e_ep = exposed_layer_comm(cost)
    act = st.dense_layers * b.act.dense + st.moe_layers * b.act.moe + (b.act.embedding if st.embedding else 0.0)
    return StageWork(f, i, w, Exposed(cost.f_s + cost.i_s + cost.w_s + cost.recompute_s, e_tp, e_cp, e_ep), act)


def stage_works(b: Blocks, stages: Sequence[StageContent]) -> list[StageWork]:
    """:func:`stage_work` of each stage; stages with the same contents (the middle ones of a deep pipeline)
    share one."""
    known: dict[tuple, StageWork] = {}
    out = []
    for st in stages:
        key = (st.dense_layers, st.moe_layers, st.embedding, st.lm_head)
        w = known.get(key)
        if w is None:
            w = known[key] = stage_work(b, st)
        out.append(w)
    return out


def boundary_p2p_s(cluster: Cluster, model: ModelSpec, training: TrainingSpec, layout: Layout,
                   stride: Num | None = None) -> Num:
    """One stage-boundary send between pipeline neighbours, `stride` ranks apart (default: the layout's
    pipeline stride). Scatter/gather optimisation (Narayanan et al. 2021 Sec. 4.1): each TP rank sends 1/t
    of the boundary activation; the receiver all-gathers it over the intra-node link."""
    nbytes = layout.micro_batch * training.seq_len / layout.cp * model.hidden * training.activation_bytes / layout.tp
    return group_collective_s(cluster, "send_recv", nbytes, 2, layout.stride("pp") if stride is None else stride)


def grad_bucket_params(dp_group: Num) -> Num:
    """Parameters per gradient-reduction bucket: Megatron-LM's default grows with the data-parallel
    size, max(40M, 1M x DP) (megatron/core/distributed/distributed_data_parallel.py), so the count of
    collectives, and the latency they pay, stays bounded at scale."""
    return maximum(40e6, 1e6 * dp_group)


def gathers_per_layer(model: ModelSpec, stack: StackProfile) -> int:
    """ZeRO-3 gathers per layer and pass: one per layer for FSDP-style units, one per module otherwise:
    two norms, the attention projections (fused QKV in GeLU/Megatron-style models, separate Q, K, V in
    SwiGLU/Hugging Face-style ones) and the MLP matrices (derived from the architecture)."""
    if stack.zero3_unit == "layer":
        return 1
    qkv = 1 if model.mlp == "gelu" else 3
    return 2 + qkv + 1 + (2 if model.mlp == "gelu" else 3)


def gathered_moe_layer_params(model: ModelSpec, ep: Num, tp: Num = 1, etp: Num | None = None) -> Num:
    """Parameters of one MoE layer a rank gathers under ZeRO-3: its own routed experts (1/(ep etp) of
    them) and its TP share of every dense weight (attention, router, norms, shared experts); 0 for a
    dense model."""
    if not model.is_moe:
        return 0
    routed = model.experts * model.expert_params
    return (model.layer_params_moe - routed) / tp + routed / (np.asarray(ep) * (tp if etp is None else etp))


# --- what lives on a pipeline rank -------------------------------------------------------------------------------


def stages_of_rank(stage_to_rank: Sequence[int], pp: int, vpp: int) -> list[list[int]]:
    """The virtual stages each of the `pp` pipeline ranks holds, in stage order (the schedule's placement
    `stage_to_rank`: :meth:`shardwise.pipeline.schedule_info.ScheduleInfo.stage_to_rank`). Only the model's
    `pp * vpp` stages count: without a pipeline (pp 1) a V-shaped schedule's placement still names two."""
    mine: list[list[int]] = [[] for _ in range(pp)]
    for s, r in enumerate(stage_to_rank[: pp * vpp]):
        mine[r].append(s)
    return mine


class RankContent(NamedTuple):
    """What one pipeline rank holds: its layers by kind, whether it holds the embedding and the LM head, and
    its dense and expert parameters after TP and EP (:func:`shardwise.train.stages.stage_params`)."""

    dense_layers: int
    moe_layers: int
    embedding: int
    lm_head: int
    p_dense: float
    p_exp: float

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


def rank_contents(model: ModelSpec, stages: Sequence[StageContent], mine: Sequence[Sequence[int]], tp: int,
                  ep: int) -> list[RankContent]:
    """Per pipeline rank, the sum of the stages it holds (`mine`: :func:`stages_of_rank`)."""
    out = []
    for held in mine:
        dense = moe = emb = head = 0
        p_dense = p_exp = 0.0
        for s in held:
            st = stages[s]
            d, e = stage_params(model, st, tp, ep)
            p_dense, p_exp = p_dense + d, p_exp + e
            dense, moe, emb, head = dense + st.dense_layers, moe + st.moe_layers, emb + st.embedding, head + st.lm_head
        out.append(RankContent(dense, moe, int(emb), int(head), p_dense, p_exp))
    return out


class RankLoad(NamedTuple):
    """What one pipeline rank's data-parallel communication and optimizer step depend on: its dense and
    expert parameters (after TP/EP), the forward and backward seconds of one micro-batch through its
    stages, and its layer count (numbers, or arrays with one element per plan)."""

    p_dense: Num
    p_exp: Num
    fwd_s: Num
    bwd_s: Num
    layers: Num = 1


def rank_loads(contents: Sequence[RankContent], work: Sequence[StageWork], mine: Sequence[Sequence[int]],
               pad: float = 1.0) -> list[RankLoad]:
    """Per pipeline rank, its parameters (scaled by `pad`: uneven shards padded to the largest) and the
    forward and backward of its stages' `work`."""
    out = []
    for c, held in zip(contents, mine, strict=True):
        fwd = bwd = 0.0
        for s in held:
            x = work[s]
            fwd, bwd = fwd + x.f, bwd + (x.i + x.w)
        out.append(RankLoad(c.p_dense * pad, c.p_exp * pad, fwd, bwd, c.dense_layers + c.moe_layers))
    return out


# --- model states, fixed memory, data-parallel communication and the optimizer step of a rank ----------------------


@quick_init
@dataclass(frozen=True)
class RankTail:
    """A pipeline rank's model states, fixed memory (bytes), exposed data-parallel communication and
    optimizer step (seconds) per step; numbers, or arrays with one element per plan."""

    states: ModelStateBytes
    fixed_bytes: Num
    dp_s: Num
    optimizer_s: Num
    host: HostBytes | None = None  # what the GPU's offload keeps in host DRAM and on NVMe (None: no offload)

    @property
    def held_bytes(self) -> Num:
        """Bytes the rank holds whatever the schedule: model states and fixed memory."""
        return self.states.total + self.fixed_bytes


def rank_tail(ctx: Costing, layout: Layout, load: RankLoad, *, microbatches: Num, offload: str = "none",
              offload_device: str = "cpu", overlap_grad_reduce: bool | np.ndarray = True,
              keep_unsharded: bool | np.ndarray = False, unsharded_grads: bool | np.ndarray = False) -> RankTail:
    """Model states, fixed memory, exposed data-parallel communication and the optimizer step of a
    pipeline rank of `layout` carrying `load`. Low-precision recipes (`ctx.lowp`): ZeRO-3
    gathers move `lowp.gather_bytes` per weight, weights cast once per step are cast after the optimizer
    step, and their kept low-precision copies (of the weights the rank owns: its shard under ZeRO-3)
    count as fixed memory (:mod:`shardwise.cost.lowp`). `keep_unsharded` (ZeRO-3 with reshard_after_forward
    off, :func:`shardwise.cost.stack.keeps_unsharded`): the rank keeps its layers' gathered weights for the
    step; `unsharded_grads`: their gradients accumulate unsharded until the last micro-batch (under PP).
    `offload_device`: where offloaded states live (cpu: host DRAM; nvme: the node's drives,
    :func:`shardwise.cost.step.host_state_bytes`)."""
    model, training, cluster, consts, stack, dev, lowp = (ctx.model, ctx.training, ctx.cluster, ctx.consts, ctx.stack,
                                                          ctx.dev, ctx.lowp)
    tp, ep, etp, zero = layout.tp, layout.ep, layout.etp, layout.zero
    p_dense, layers = load.p_dense, load.layers
    wb, gb = training.weight_bytes, training.grad_bytes
    dense_group = layout.group("dp_cp")
    # MoE Parallel Folding (Liu et al. 2025): the tp x cp x dp ranks of a stage re-split as etp x ep x
    # expert-dp, so a rank holds 1/(etp ep) of the routed experts (p_exp comes split over tp) and their
    # data-parallel group is tp cp dp / (etp ep); etp = tp is the classic layout (ep carved from dp x cp).
    p_exp = load.p_exp * tp / etp
    expert_group = maximum(1, layout.group("edp"))
    shard = layout.shard
    largest = maximum(model.layer_params_dense / tp, gathered_moe_layer_params(model, ep, tp, etp))
    fixed = fixed_memory_bytes(consts, where(keep_unsharded, 1, zero), dense_group, largest, wb)
    opt_bytes, frozen = optimizer_bytes_per_param(training.precision), 0.0
    lora = training.adapter
    if lora is not None:  # the trainable parameters are the adapters; the frozen base has weights only
        frozen = adapters.frozen_weight_bytes(model, lora, p_dense, layers, tp, wb)
        layer_bytes = adapters.frozen_weight_bytes(model, lora, model.layer_params_dense / tp, 1, tp, wb)
        fixed = fixed_memory_bytes(consts, zero, dense_group, layer_bytes, 1.0) + adapters.dequant_buffer_bytes(model, lora, tp)
        p_dense = layers * adapters.adapter_params(model, lora, tp)
        wb, gb, opt_bytes = adapters.adapter_state_bytes(lora)
    states = model_states(p_dense, p_exp, dense_group, expert_group, zero, shard, wb, gb, opt_bytes, offload)
    if np.any(keep_unsharded) if isinstance(keep_unsharded, np.ndarray) else keep_unsharded:  # gathered weights kept for the step; gradients unsharded until the last micro-batch
        states = ModelStateBytes(where(keep_unsharded, (p_dense + p_exp) * wb, states.weights),
                                 where(unsharded_grads, (p_dense + p_exp) * gb, states.grads), states.optimizer)
    if lora is not None:
        states = model_states(frozen, 0.0, dense_group, expert_group, zero, shard, 1.0, 0.0, 0.0, offload) + states
    dp_s = dp_exposed_s(cluster, zero, overlap_grad_reduce, microbatches, layout.stride("dp_cp"), layout.stride("edp"),
                        p_dense, p_exp, dense_group, expert_group, shard,
                        where(zero == 3, lowp.gather_bytes, wb) if lowp.active else wb, gb, load.fwd_s, load.bwd_s,
                        stack.dp_overlap, stack.fsdp_prefetch_overlap,
                        layers=maximum(layers, 1) * gathers_per_layer(model, stack),
                        bucket_bytes=(stack.grad_bucket_elements or grad_bucket_params(dense_group)) * gb, frozen_bytes=frozen,
                        zero1_broadcast=stack.zero1_comm == "all_reduce_broadcast", param_sync_overlap=stack.param_sync_overlap,
                        keep_unsharded=keep_unsharded, unsharded_grads=unsharded_grads)
    per_host = min(cluster.gpus_per_node, cluster.num_gpus)
    tiers = cluster.host
    nvme = offload_device == "nvme"
    if offload == "optimizer+params":
        nvme_read = tiers.nvme_read_gbyte_s / per_host if nvme and tiers.nvme_read_gbyte_s else None
        dp_s = dp_s + microbatches * 2 * offload_params_s(consts, p_dense / shard + p_exp / expert_group, host_link_gbyte_s(cluster),
                                                          wb, nvme_read)
    sharded = zero >= 1
    opt_params = p_dense / where(sharded, shard, 1) + p_exp / where(sharded, expert_group, 1)
    nvme_rates = (tiers.nvme_read_gbyte_s, tiers.nvme_write_gbyte_s) if nvme and tiers.nvme_read_gbyte_s and tiers.nvme_write_gbyte_s else None
    host = cxl = None
    if offload != "none":
        stage3 = zero == 3
        host = host_state_bytes(opt_params, p_dense / where(stage3, shard, 1) + p_exp / where(stage3, expert_group, 1), offload,
                                offload_device, wb, gb, opt_bytes)
        # Over the host link while the pipeline runs, host to device: under ZeRO-2/3 every micro-batch's
        # running gradient sum comes back up to be added to (cost/offload_step.py), and offloaded parameters
        # are fetched for each micro-batch's forward and backward (offload_params_s above).
        moved = where(zero >= 2, microbatches * opt_params * gb, 0.0)
        if offload == "optimizer+params":
            moved = moved + microbatches * 2 * (p_dense / shard + p_exp / expert_group) * wb
        host = HostBytes(host.dram, host.nvme, moved)
        if tiers.cxl_gib and not nvme:  # what spills from DRAM into CXL memory slows CPU Adam (cost/step.py)
            cxl = (cxl_share(per_host * host.dram, tiers.dram_gib, tiers.cxl_gib), tiers.cxl_gbyte_s)
    optimizer_s = optimizer_step_s(consts, opt_params, dev.hbm_rate, offload, host_link_gbyte_s(cluster), wb, gb, per_host,
                                   offload_device, nvme_rates, opt_bytes, bwd_s=load.bwd_s, microbatches=microbatches, zero=zero,
                                   cpu_adam_gparams_s=tiers.cpu_adam_gparams_s, cxl=cxl)
    # A rank casts and keeps low-precision copies of the weights it owns: all of its stage's below ZeRO-3,
    # its shard under ZeRO-3 (gathered copies are transient, like the 16-bit layer buffers in `fixed`).
    stage3 = zero == 3
    owned = p_dense / where(stage3, shard, 1) + p_exp / where(stage3, expert_group, 1)
    if lowp.weights_per_step:
        optimizer_s = optimizer_s + cast_s(dev, lowp, owned, layers * 4)
    fixed = fixed + owned * lowp.weight_copy_bytes
    return RankTail(states, fixed, dp_s, optimizer_s, host)


class _Same:
    """An immutable argument a cache keys by identity (its fields need not hash, as Constants' dicts do
    not); the cache holds it, so no other object can take its id while the entry lives."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


@lru_cache(maxsize=4096)
def _memo_tail(model: _Same, training: _Same, cluster: _Same, consts: _Same, stack: StackProfile, dev: Device,
               lowp: LowPrecision, layout: Layout, load: RankLoad, knobs: tuple[tuple[str, object], ...]) -> RankTail:
    ctx = Costing(model.obj, training.obj, cluster.obj, consts.obj, stack, dev, lowp)
    return rank_tail(ctx, layout, load, **dict(knobs))


def rank_tails(ctx: Costing | Sequence[Costing], layout: Layout, loads: Sequence[RankLoad], memo: bool = True,
               **knobs: object) -> list[RankTail]:
    """:func:`rank_tail` of every pipeline rank (`ctx`: one for all, or one per rank), for one plan (the
    layout's fields and every knob plain numbers or strings). Ranks with the same load and costing share one
    tail; `memo`: also across calls (a pure function of immutable arguments: the same job asks for the same
    ranks each time it is estimated)."""
    ctxs = [ctx] * len(loads) if isinstance(ctx, Costing) else list(ctx)
    items = tuple(knobs.items())  # not sorted: a caller passes its knobs in one order; another order only misses
    out, known = [], {}
    for c, load in zip(ctxs, loads, strict=True):
        key = (id(c), load)
        if key not in known:
            known[key] = (_memo_tail(_Same(c.model), _Same(c.training), _Same(c.cluster), _Same(c.consts), c.stack, c.dev,
                                     c.lowp, layout, load, items)
                          if memo else rank_tail(c, layout, load, **knobs))  # type: ignore[arg-type]
        out.append(known[key])
    return out


# --- one rank's memory and the step -----------------------------------------------------------------------------


def peak_bytes(held: Num, activations: Num, frag: float) -> Num:
    """A rank's peak: what it holds whatever the schedule (model states and fixed memory) plus its
    activations with the caching allocator's fragmentation share on top (:mod:`shardwise.cost.allocator`):
    states + fixed + (1 + frag) x activations."""
    return held + (1 + frag) * activations


class RankMemory(NamedTuple):
    """One pipeline rank's memory at its peak (numbers or arrays): model states (the optimizer's as resident
    on the GPU where it pages), fixed memory, activations (in flight plus the :meth:`BlockActivations.extra`),
    the fragmentation share, and the seconds the paged optimizer's traffic adds to the step."""

    states: ModelStateBytes
    fixed: Num
    activations: Num
    frag: float
    paging_s: Num = 0.0

    @property
    def total(self) -> Num:
        return peak_bytes(self.states.total + self.fixed, self.activations, self.frag)

    def breakdown(self, runtime: float) -> MemoryBreakdown:
        """As the engines report it (one plan), `runtime` of the fixed memory outside the allocator."""
        s = self.states
        return MemoryBreakdown(float(s.weights), float(s.grads), float(s.optimizer), float(self.activations),
                               float(self.fixed) - runtime, self.frag * float(self.activations), runtime)


def rank_memory(ctx: Costing, tail: RankTail, activations: Num, frag: float, paged: bool) -> RankMemory:
    """A rank's memory from its tail and its peak activations; `paged`: its optimizer states take what room
    is left and the rest pages over the host link (:func:`shardwise.cost.adapters.paged_optimizer`)."""
    if not paged:
        return RankMemory(tail.states, tail.fixed_bytes, activations, frag)
    _, resident, paging_s = paged_optimizer(tail.states, tail.fixed_bytes, activations * (1 + frag),
                                            ctx.cluster.usable_memory_bytes, ctx.consts, host_link_gbyte_s(ctx.cluster))
    return RankMemory(ModelStateBytes(tail.states.weights, tail.states.grads, resident), tail.fixed_bytes, activations, frag,
                      paging_s)


def activation_room(ctx: Costing, tail: RankTail, extra: Num, frag: float, paged: bool) -> Num:
    """Bytes of in-flight activations a rank has room for (the schedule simulator's memory cap): its
    usable memory less states and fixed memory (a paged optimizer yields its room), over 1 + frag, less the
    :meth:`BlockActivations.extra`."""
    yielded = tail.states.optimizer if paged else 0.0
    return (ctx.cluster.usable_memory_bytes - tail.states.total + yielded - tail.fixed_bytes) / (1 + frag) - extra


class StepParts(NamedTuple):
    """The seconds a step adds up (numbers, or arrays with one element per plan): the pipeline's span, the
    straggler wait, the exposed data-parallel communication, the optimizer step, the host's per-step time and
    the exposed activation-offload copies."""

    pipeline: Num
    straggler: Num
    dp: Num
    optimizer: Num
    host: Num
    act_offload: Num = 0.0

    @property
    def total(self) -> Num:
        return self.pipeline + self.straggler + self.dp + self.optimizer + self.host + self.act_offload


def step_parts(ctx: Costing, pipeline_s: Num, nodes: int, dp_s: Num, optimizer_s: Num, act_offload_s: Num = 0.0) -> StepParts:
    """The step of a plan whose pipeline takes `pipeline_s` on `nodes` nodes: the slowest node's straggler
    wait (:func:`shardwise.cost.step.straggler_factor`) and the host's step overhead of `ctx`'s stack
    (:func:`shardwise.cost.step.host_overhead_s`) on top of the pipeline, data parallelism and optimizer."""
    straggler = pipeline_s * (float(straggler_factor(nodes, ctx.consts.step.straggler_cv)) - 1.0)
    return StepParts(pipeline_s, straggler, dp_s, optimizer_s, host_overhead_s(ctx.consts, ctx.stack.host_step_overhead),
                     act_offload_s)


def time_breakdown(timing: PipelineTiming, work: Sequence[StageWork], mine: Sequence[Sequence[int]], microbatches: int,
                   parts: StepParts) -> TimeBreakdown:
    """Where the step goes, read on the critical rank of the simulated pipeline: its stages' compute and
    exposed TP, CP and EP communication over the micro-batches, the pipeline's point-to-point and bubble
    time, and the rest of the step's `parts`."""
    comp = e_tp = e_cp = e_ep = 0
    for s in mine[timing.critical_rank]:
        x = work[s].exposed
        comp, e_tp, e_cp, e_ep = comp + x.compute, e_tp + x.tp, e_cp + x.cp, e_ep + x.ep
    comp, e_tp, e_cp, e_ep = comp * microbatches, e_tp * microbatches, e_cp * microbatches, e_ep * microbatches
    return TimeBreakdown(compute=comp, tp_comm=e_tp, pp_comm=timing.pp_comm_s, dp_comm=parts.dp, cp_comm=e_cp, ep_comm=e_ep,
                         bubble=timing.bubble_s, optimizer=parts.optimizer, overhead=parts.host, straggler=parts.straggler,
                         act_offload=parts.act_offload)
