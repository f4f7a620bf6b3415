"""One assembly of a training step for the exact estimate and the planner's vectorised screen.

Both call these functions — the per-layer costs and activation sizes of one (tp, cp, ep, sp,
recompute, micro-batch) choice, and the per-rank model states, fixed memory, data-parallel
communication and optimizer step — so a rule is written once; they differ only in how the pipeline
is timed (the estimate simulates the schedule; the screen uses closed forms). Every argument of
:func:`rank_tail` may be a number or a numpy array (one plan per element).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from shardwise.cost import adapters
from shardwise.cost.activations import (
    embedding_activation_bytes,
    full_recompute_working_bytes,
    layer_activation_bytes,
    output_layer_activation_bytes,
    weight_gradient_bytes,
)
from shardwise.cost.comm import group_collective_s
from shardwise.cost.numeric import maximum, minimum, where
from shardwise.cost.constants import Constants, MoeConstants
from shardwise.cost.device import Device
from shardwise.cost.layer import Groups, PassCost, embedding, lm_head, transformer_layer
from shardwise.cost.lowp import NO_LOWP, LowPrecision, cast_s
from shardwise.cost.memory import ModelStateBytes, optimizer_bytes_per_param
from shardwise.cost.overlap import dp_exposed_s, exposed_layer_comm
from shardwise.cost.stack import StackProfile
from shardwise.cost.step import (
    HostBytes,
    fixed_memory_bytes,
    host_link_gbyte_s,
    host_state_bytes,
    model_states,
    offload_params_s,
    optimizer_step_s,
)
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.stages import StageContent


@dataclass(frozen=True)
class Blocks:
    """Costs of one micro-batch through each kind of block, and what each stores for the backward."""

    dense: PassCost
    moe: PassCost
    embedding: PassCost
    head: PassCost
    act_dense: float  # bytes a dense layer keeps
    act_moe: float
    act_embedding: float  # first stage
    act_output: float  # last stage: final norm, LM head input, logits
    act_recompute: float  # transient working set of the layer being recomputed (full recompute)
    w_retained: float  # share of a layer's activations held from its I pass to its W pass


def layer_groups(cluster: Cluster, tp: int, cp: int, ep: int, etp: int | None = None, cp_comm: str = "p2p",
                 ulysses: int = 1) -> Groups:
    """The groups a layer talks over, placed in the rank order (TP innermost, then CP; the expert layers
    re-split the ranks as etp x ep; Ulysses groups innermost in CP, the ring across them)."""
    etp = etp or tp
    ring = cp // ulysses
    return Groups(tp, cp, ep, cluster.tier_for(tp, 1), cluster.tier_for(cp, tp), cluster.tier_for(ep, etp), etp=etp,
                  cp_comm=cp_comm, ulysses=ulysses, ulysses_tier=cluster.tier_for(ulysses, tp),
                  ring_tier=cluster.tier_for(ring, tp * ulysses))


def _dense_groups(groups: Groups) -> Groups:
    """Dense blocks do not talk over the expert groups: one cache entry serves every ep and etp."""
    return replace(groups, ep=1, etp=0, ep_tier=groups.tp_tier)


def layer_passes(model: ModelSpec, training: TrainingSpec, dev: Device, stack: StackProfile, tokens: float, sp: bool,
                 recompute: str, flash: bool, lowp: LowPrecision, groups: Groups, moe_consts: MoeConstants | None,
                 tp_overlap: str) -> tuple[PassCost, PassCost]:
    """(dense layer, MoE layer) passes of one micro-batch of `tokens` local tokens, with LoRA's frozen base
    and adapters where the job trains adapters; the part of :func:`blocks` a TP overlap mode changes."""
    seq, ab = training.seq_len, training.activation_bytes
    dense = transformer_layer(model, False, tokens, seq, sp, recompute, flash, dev, _dense_groups(groups), stack, ab, lowp,
                              tp_overlap=tp_overlap)
    moe = (transformer_layer(model, True, tokens, seq, sp, recompute, flash, dev, groups, stack, ab, lowp, training.moe,
                             moe_consts or MoeConstants(), tp_overlap)
           if model.is_moe else dense)
    lora = training.adapter
    if lora is not None:  # frozen base + adapters (dense models only: LoraSpec.shapes)
        extra = adapters.adapter_layer_cost(model, lora, tokens, groups.tp, dev, ab, recompute, stack.selective_recompute_gemms)
        dense = moe = adapters.frozen_layer(dense, extra)
    return dense, moe


def blocks(model: ModelSpec, training: TrainingSpec, cluster: Cluster, dev: Device, stack: StackProfile,
           tp: int, cp: int, ep: int, sp: bool, recompute: str, flash: bool, micro_batch: int,
           lowp: LowPrecision = NO_LOWP, groups: Groups | None = None, moe_consts: MoeConstants | None = None,
           tp_overlap: str = "none", passes: tuple[PassCost, PassCost] | None = None) -> Blocks:
    """`groups` (default: :func:`layer_groups` of tp, cp, ep) carries etp and the CP scheme; `lowp` the
    low-precision recipe; `moe_consts` the MoE constants (default: the cited/assumed ones); `tp_overlap` the
    resolved TP overlap mode (:func:`shardwise.cost.stack.tp_overlap_mode`); `passes` the layers'
    :func:`layer_passes` at that mode where the caller has them already."""
    seq, ab = training.seq_len, training.activation_bytes
    tokens = micro_batch * seq / cp
    groups = groups or layer_groups(cluster, tp, cp, ep)
    dense, moe = passes or layer_passes(model, training, dev, stack, tokens, sp, recompute, flash, lowp, groups, moe_consts,
                                        tp_overlap)
    dense_groups = _dense_groups(groups)
    share = stack.selective_recompute_gemms  # what `selective` repeats also goes unstored (cost/activations.py)
    act_dense = layer_activation_bytes(model, False, tokens, seq, tp, sp, recompute, flash, ab, share)
    act_moe = layer_activation_bytes(model, True, tokens, seq, tp, sp, recompute, flash, ab, share) if model.is_moe else act_dense
    kept = weight_gradient_bytes(model, model.is_moe, tokens, tp, sp, ab)
    full = recompute == "full"
    recomputes_layers = full or (recompute == "selective" and share > 0.0)  # a recomputed layer's working set
    emb, head = embedding(model, tokens, sp, dev, dense_groups, ab), lm_head(model, tokens, sp, dev, dense_groups, stack, ab)
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
        act_dense=act_dense,
        act_moe=act_moe,
        act_embedding=embedding_activation_bytes(model, tokens, tp, sp),
        act_output=output_layer_activation_bytes(model, tokens, tp, sp, ab),
        act_recompute=act_recompute,
        w_retained=1.0 if full else min(1.0, kept / (act_moe if model.is_moe else act_dense)),
    )


def stage_work(b: Blocks, st: StageContent):
    """One micro-batch through one virtual stage: (F, I, W, (compute, exposed TP, CP, EP), activation
    bytes it keeps), the layer-like blocks of `st` costed by `b` (their TP communication as exposed)."""
    cost = b.dense.scaled(st.dense_layers) + b.moe.scaled(st.moe_layers)
    if st.embedding:
        cost = cost + b.embedding
    if st.lm_head:
        cost = cost + b.head
    f, i, w, e_tp, e_cp, e_ep = exposed_layer_comm(cost)
    act = st.dense_layers * b.act_dense + st.moe_layers * b.act_moe + (b.act_embedding if st.embedding else 0.0)
    return f, i, w, (cost.f_s + cost.i_s + cost.w_s + cost.recompute_s, e_tp, e_cp, e_ep), act


def boundary_p2p_s(cluster: Cluster, model: ModelSpec, training: TrainingSpec, micro_batch, tp, cp, pp_stride):
    """One stage-boundary send. Scatter/gather optimisation (Narayanan et al. 2021 Sec. 4.1): each TP
    rank sends 1/t of the boundary activation; the receiver all-gathers it over the intra-node link."""
    nbytes = micro_batch * training.seq_len / cp * model.hidden * training.activation_bytes / tp
    return group_collective_s(cluster, "send_recv", nbytes, 2, pp_stride)


def grad_bucket_params(dp_group):
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


def gathered_moe_layer_params(model: ModelSpec, ep, tp=1, etp=None):
    """Parameters of one MoE layer a rank gathers under ZeRO-3: its own routed experts (1/(ep etp) of
    them) and its TP share of every dense weight (attention, router, norms, shared experts); 0 for a
    dense model."""
    if not model.is_moe:
        return 0
    routed = model.experts * model.expert_params
    return (model.layer_params_moe - routed) / tp + routed / (np.asarray(ep) * (tp if etp is None else etp))


@dataclass(frozen=True)
class RankTail:
    states: ModelStateBytes
    fixed_bytes: object  # float or array
    dp_s: object
    optimizer_s: object
    host: HostBytes | None = None  # what the GPU's offload keeps in host DRAM and on NVMe (None: no offload)


def rank_tail(model: ModelSpec, training: TrainingSpec, cluster: Cluster, consts: Constants, stack: StackProfile, dev: Device,
              *, tp, cp, ep, dp, zero, dp_shard, offload: str, overlap_grad_reduce, microbatches,
              p_dense, p_exp, fwd_s, bwd_s, layers=1, lowp: LowPrecision = NO_LOWP, etp=None,
              keep_unsharded=False, unsharded_grads=False, offload_device: str = "cpu") -> RankTail:
    """Model states, fixed memory, exposed data-parallel communication and the optimizer step of a
    pipeline rank holding `p_dense` / `p_exp` parameters (after TP/EP) in `layers` layers, whose
    micro-batch forward and backward take `fwd_s` / `bwd_s`. Low-precision recipes (`lowp`): ZeRO-3
    gathers move `lowp.gather_bytes` per weight, weights cast once per step are cast after the optimizer
    step, and their kept low-precision copies (of the weights the rank owns: its shard under ZeRO-3)
    count as fixed memory (:mod:`shardwise.cost.lowp`). `keep_unsharded` (ZeRO-3 with reshard_after_forward
    off, :func:`shardwise.cost.stack.keeps_unsharded`): the rank keeps its layers' gathered weights for the
    step; `unsharded_grads`: their gradients accumulate unsharded until the last micro-batch (under PP).
    `offload_device`: where offloaded states live (cpu: host DRAM; nvme: the node's drives,
    :func:`shardwise.cost.step.host_state_bytes`)."""
    wb, gb = training.weight_bytes, training.grad_bytes
    dense_group = dp * cp
    if etp is None:
        etp = tp
    # MoE Parallel Folding (Liu et al. 2025): the tp x cp x dp ranks of a stage re-split as etp x ep x
    # expert-dp, so a rank holds 1/(etp ep) of the routed experts (p_exp comes split over tp) and their
    # data-parallel group is tp cp dp / (etp ep); etp = tp is the classic layout (ep carved from dp x cp).
    p_exp = p_exp * tp / etp
    expert_group = maximum(1, dense_group * tp // (ep * etp))
    shard = minimum(dp_shard, dense_group)
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
    if np.any(keep_unsharded):  # gathered weights kept for the step; gradients unsharded until the last micro-batch
        states = ModelStateBytes(where(keep_unsharded, (p_dense + p_exp) * wb, states.weights),
                                 where(unsharded_grads, (p_dense + p_exp) * gb, states.grads), states.optimizer)
    if lora is not None:
        states = model_states(frozen, 0.0, dense_group, expert_group, zero, shard, 1.0, 0.0, 0.0, offload) + states
    dp_s = dp_exposed_s(cluster, zero, overlap_grad_reduce, microbatches, tp, ep * etp, p_dense, p_exp, dense_group, expert_group,
                        shard, where(zero == 3, lowp.gather_bytes, wb) if lowp.active else wb, gb, fwd_s, bwd_s, stack.dp_overlap, stack.fsdp_prefetch_overlap,
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
    optimizer_s = optimizer_step_s(consts, opt_params, dev.hbm_rate, offload, host_link_gbyte_s(cluster), wb, gb, per_host,
                                   offload_device, nvme_rates, opt_bytes, bwd_s=bwd_s, microbatches=microbatches, zero=zero,
                                   cpu_adam_gparams_s=tiers.cpu_adam_gparams_s)
    host = None
    if offload != "none":
        stage3 = zero == 3
        host = host_state_bytes(opt_params, p_dense / where(stage3, shard, 1) + p_exp / where(stage3, expert_group, 1), offload,
                                offload_device, wb, gb, opt_bytes)
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
               lowp: LowPrecision, knobs: tuple) -> RankTail:
    return rank_tail(model.obj, training.obj, cluster.obj, consts.obj, stack, dev, lowp=lowp, **dict(knobs))


def plan_rank_tail(model: ModelSpec, training: TrainingSpec, cluster: Cluster, consts: Constants, stack: StackProfile,
                   dev: Device, *, lowp: LowPrecision = NO_LOWP, **knobs) -> RankTail:
    """:func:`rank_tail` of one plan (every knob a plain number or string), memoised: a pure function of
    immutable arguments, the same job asks for the same ranks each time it is estimated."""
    return _memo_tail(_Same(model), _Same(training), _Same(cluster), _Same(consts), stack, dev, lowp,
                      tuple(sorted(knobs.items())))
