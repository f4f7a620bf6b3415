"""`hetero_estimate(job)`: step time and memory of a plan laid over the groups of a heterogeneous
cluster (layouts: :mod:`shardwise.specs.hetero`).

Each GPU group is costed by the shared assembly (:mod:`shardwise.train.assembly`: per-layer blocks,
stage work, model states and data-parallel time per rank) on its own GPU, stack and network, and the
pipeline is timed by the schedule simulator (:mod:`shardwise.train.pipeline_timing`):

- pipeline across groups: per-stage F/I/W from the GPU of the stage's rank, one hop time per stage
  boundary (inside a group its network, between groups the slowest link,
  :func:`shardwise.cost.comm.spanning_network`, with the boundary's tp*cp*dp senders sharing
  ``inter_group_gbps``); the layer split is given or balanced by speed under memory
  (:mod:`shardwise.train.hetero.split`); data parallelism stays inside each group.
- data parallel across groups: every group runs its replicas' pipeline on its micro-batch count; the step
  waits for the slowest; gradients are reduced over all replicas on the slowest link (every one of the
  tp*cp*pp concurrent rings crosses between the groups with its k ranks per NVLink domain, sharing
  ``inter_group_gbps``); sharded states are shared by memory (Cephalo) and a collective over uneven
  shards moves the largest shard from every rank (collectives take equal chunks, so the shards are
  padded to the largest).

Straggler wait, optimizer step and step overhead as in :func:`shardwise.train.estimate.estimate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from shardwise.cost.allocator import fragmentation_share, runtime_bytes
from shardwise.cost.comm import spanning_network
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.device import Device
from shardwise.cost.flops import model_flops_per_token
from shardwise.cost.lowp import job_device
from shardwise.cost.memory import ModelStateBytes, optimizer_bytes_per_param
from shardwise.cost.stack import (
    StackProfile,
    attention_kernel,
    expandable_segments,
    keeps_unsharded,
    stack_profile,
    tp_overlap_mode,
)
from shardwise.cost.step import host_link_gbyte_s, model_states, optimizer_step_s
from shardwise.errors import ShardwiseError
from shardwise.pipeline import schedule_info
from shardwise.specs.hardware import Cluster, HeteroCluster, group_shape
from shardwise.specs.hetero import HeteroJob, HeteroLayout
from shardwise.specs.layout import Layout
from shardwise.specs.training import TrainPlan
from shardwise.train.assembly import (
    Blocks,
    Costing,
    RankLoad,
    RankTail,
    StageWork,
    activation_room,
    blocks,
    boundary_p2p_s,
    rank_contents,
    rank_loads,
    rank_memory,
    rank_tail,
    rank_tails,
    stage_work,
    stages_of_rank,
    step_parts,
    time_breakdown,
)
from shardwise.train.hetero.result import HeteroEstimate, RankReport
from shardwise.train.hetero.split import balanced_layer_split, batch_splits, refine_split, state_shares
from shardwise.train.pipeline_timing import PipelineTiming, pipeline_timing, plan_stages_per_rank
from shardwise.train.result import GIB, TimeBreakdown
from shardwise.train.stages import StageContent, stage_contents, stage_params

#: Pipelines up to this many ranks get their layer split refined on the simulation (each move costs one).
REFINE_MAX_RANKS = 8


@dataclass(frozen=True)
class GroupCost:
    """One GPU group under a plan: its costing (cluster, device, software stack) and per-block costs."""

    name: str
    ctx: Costing
    blocks: Blocks

    @property
    def cluster(self) -> Cluster:
        return self.ctx.cluster

    @property
    def dev(self) -> Device:
        return self.ctx.dev

    @property
    def stack(self) -> StackProfile:
        return self.ctx.stack

    @property
    def layer_s(self) -> float:
        """F + I + W of one micro-batch through one dense layer (TP/CP communication included)."""
        w = stage_work(self.blocks, StageContent(0, 1, 0, False, False))
        return w.f + w.i + w.w


def group_cost(job: HeteroJob, name: str, plan: TrainPlan, consts: Constants) -> GroupCost:
    """The cost model of group `name` at the plan's layout (tp, cp and its scheme, sp, recompute, micro-batch)."""
    cluster, training = job.cluster.group(name).cluster, job.training
    stack = stack_profile(training.framework, cluster.gpu.arch, training.compile, consts)
    dev, lowp = job_device(cluster.gpu, training, consts, stack, attention_kernel(training, stack))  # as the flat estimate
    ctx = Costing(job.model, training, cluster, consts, stack, dev, lowp)
    return GroupCost(name, ctx, blocks(ctx, Layout.of(plan), plan.flash_attention, tp_overlap_mode(plan, stack)))


def spanning_cluster(cluster: HeteroCluster, names: list[str], crossing_gpus: int) -> Cluster:
    """A stand-in :class:`Cluster` whose network is the slowest link of the named groups, so that the
    shared assembly's collectives run over ranks of several groups. `crossing_gpus` GPUs send across
    the groups' links at the same time and share ``inter_group_gbps``."""
    cap = cluster.inter_group_gbps / max(crossing_gpus, 1) if cluster.inter_group_gbps else None
    net = spanning_network([cluster.group(n).cluster.network for n in names], cap)
    first = cluster.group(names[0]).cluster  # its GPU is read only for offloading, which is refused here
    nodes = sum(cluster.group(n).cluster.nodes for n in names)
    return Cluster.model_construct(gpu=first.gpu, num_gpus=nodes * net.gpus_per_node, gpus_per_node=net.gpus_per_node,
                                   network=net, price_usd_per_gpu_hour=None)


def virtual_counts(split: tuple[int, ...], stage_to_rank: tuple[int, ...]) -> tuple[int, ...]:
    """Layers of each virtual stage: each rank's layers spread evenly over its stages (the earlier
    stages take the remainder)."""
    out = [0] * len(stage_to_rank)
    for r, n in enumerate(split):
        mine = [s for s, rr in enumerate(stage_to_rank) if rr == r]
        base, extra = divmod(n, len(mine))
        for j, s in enumerate(mine):
            out[s] = base + (j < extra)
    return tuple(out)


def _plan(layout: HeteroLayout) -> TrainPlan:
    plan = layout.plan
    return plan.model_copy(update={"vpp": plan_stages_per_rank(plan)})  # V-shaped schedules hold two


def _bytes_per_param(job: HeteroJob) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per parameter of the job's precision."""
    t = job.training
    return t.weight_bytes, t.grad_bytes, optimizer_bytes_per_param(t.precision)


def layer_caps(job: HeteroJob, plan: TrainPlan, costs: list[GroupCost], s2r: tuple[int, ...], m: int, dp_group: int,
               consts: Constants) -> list[int]:
    """Most layers each pipeline rank can hold in memory: its GPU less buffers, embedding or LM head and
    the recompute working set, over one layer's states and in-flight activations (the screen's in-flight
    counts per schedule, the record's ``inflight``: :class:`shardwise.pipeline.schedule_info.ScheduleInfo`)."""
    model, pp, vpp = job.model, plan.pp, plan.vpp
    wb, gb, ob = _bytes_per_param(job)
    frag = _frag(job, costs[0], consts)
    per_layer_states = model_states(model.layer_params_dense / plan.tp, 0.0, dp_group, dp_group, plan.zero, dp_group, wb, gb, ob).total
    caps = []
    for r, c in enumerate(costs):
        units = float(np.asarray(schedule_info(plan.schedule).inflight(pp, vpp, np.array([m]), r)).ravel()[0])
        tail = rank_tail(c.ctx, Layout.of(plan), RankLoad(0.0, 0.0, 0.0, 0.0), microbatches=m,
                         overlap_grad_reduce=plan.overlap_grad_reduce)
        ends = [s for s in (0, len(s2r) - 1) if s2r[s] == r]
        extra_params = sum(stage_params(model, StageContent(s, 0, 0, s == 0, s == len(s2r) - 1), plan.tp, plan.ep)[0] for s in ends)
        extra = (float(tail.fixed_bytes) + extra_params * (wb + gb + ob) / (dp_group if plan.zero >= 1 else 1)
                 + (1 + frag) * (c.blocks.act.recompute + (c.blocks.act.output if len(s2r) - 1 in ends else 0.0)
                                 + (units * c.blocks.act.embedding / vpp if 0 in ends else 0.0)))
        per_layer = per_layer_states + (1 + frag) * units / vpp * c.blocks.act.dense
        caps.append(max(0, int((c.cluster.usable_memory_bytes - extra) // per_layer)))
    return caps


def default_layer_split(job: HeteroJob, plan: TrainPlan, costs: list[GroupCost], s2r: tuple[int, ...], m: int,
                        consts: Constants) -> tuple[int, ...]:
    """Layers per pipeline rank balanced by speed under memory (:func:`balanced_layer_split`)."""
    fixed = []
    for r, c in enumerate(costs):
        e = 0.0
        for s, head in ((0, False), (len(s2r) - 1, True)):
            if s2r[s] == r:
                w = stage_work(c.blocks, StageContent(s, 0, 0, not head, head))
                e += w.f + w.i + w.w
        fixed.append(e)
    cap = layer_caps(job, plan, costs, s2r, m, (plan.dp or 1) * plan.cp, consts)
    try:
        return balanced_layer_split(job.model.layers, [c.layer_s for c in costs], fixed, cap)
    except ShardwiseError:  # over memory anyway: balance by speed and let the estimate say it does not fit
        return balanced_layer_split(job.model.layers, [c.layer_s for c in costs], fixed)


def _work(costs: list[GroupCost], contents: list[StageContent], s2r: tuple[int, ...]) -> list[StageWork]:
    """Each virtual stage's work on the GPU of the rank that holds it."""
    return [stage_work(costs[s2r[s]].blocks, st) for s, st in enumerate(contents)]


def _frag(job: HeteroJob, cost: GroupCost, consts: Constants) -> float:
    """The caching allocator's fragmentation share on a group's stack (:mod:`shardwise.cost.allocator`)."""
    return fragmentation_share(consts.memory, expandable_segments(job.training, cost.stack))


def pipeline_estimate(job: HeteroJob, constants: Constants | None = None, split_p2p: bool = True,
                      layer_split: tuple[int, ...] | None = None, refine: bool = True) -> HeteroEstimate:
    """Pipeline stages across groups (module docstring); `layer_split` overrides the layout's. Without
    either, the split balanced by speed is refined on the schedule simulation itself (`refine`, up to
    REFINE_MAX_RANKS pipeline ranks): one layer moved at a time while the step shortens and the plan
    still fits (:func:`shardwise.train.hetero.split.refine_split`)."""
    consts = constants or default_constants()
    model, hc, training, layout = job.model, job.cluster, job.training, job.layout
    if refine and layer_split is None and layout.layer_split is None and layout.plan.pp <= REFINE_MAX_RANKS:
        start = pipeline_estimate(job, constants, split_p2p, refine=False)

        def step_s(split: tuple[int, ...]) -> float:
            if split == start.layout.layer_split:
                return start.step_time_s if start.fits else math.inf
            try:
                e = pipeline_estimate(job, constants, split_p2p, layer_split=split)
            except ShardwiseError:
                return math.inf
            return e.step_time_s if e.fits else math.inf

        best, best_s = refine_split(start.layout.layer_split, step_s)
        return start if best == start.layout.layer_split or not math.isfinite(best_s) else \
            pipeline_estimate(job, constants, split_p2p, layer_split=best)
    plan = _plan(layout)
    grid = Layout.of(plan)
    pp, vpp, tp, cp, dp = grid.pp, grid.vpp, grid.tp, grid.cp, grid.dp
    m = training.global_batch // (plan.micro_batch * dp)
    by_name = {g: group_cost(job, g, plan, consts) for g in dict.fromkeys(layout.stage_groups)}
    costs = [by_name[g] for g in layout.stage_groups]
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    mine = stages_of_rank(s2r, pp, vpp)
    split = layer_split or layout.layer_split or default_layer_split(job, plan, costs, s2r, m, consts)
    contents = stage_contents(model, pp * vpp, virtual_counts(split, s2r))
    work = _work(costs, contents, s2r)
    loads = rank_loads(rank_contents(model, contents, mine, tp, grid.ep), work, mine)
    keep = keeps_unsharded(plan, costs[0].ctx.stack)  # ZeRO-3 layers kept gathered for the step, as the flat estimate
    tails = rank_tails([c.ctx for c in costs], grid, loads, memo=False, microbatches=m,
                       overlap_grad_reduce=plan.overlap_grad_reduce, keep_unsharded=keep, unsharded_grads=keep and pp > 1)
    frags = [_frag(job, c, consts) for c in costs]
    extra_act = [c.blocks.act.extra(r == s2r[-1]) for r, c in enumerate(costs)]
    cap = min(activation_room(c.ctx, t, extra_act[r], frags[r], False) for r, (c, t) in enumerate(zip(costs, tails, strict=True)))
    hops = []
    for s in range(pp * vpp - 1):
        a, b = layout.stage_groups[s2r[s]], layout.stage_groups[s2r[s + 1]]
        net = by_name[a].cluster if a == b else spanning_cluster(hc, [a, b], tp * cp * dp)
        stride = grid.stride("pp") if a == b else net.network.nvlink_domain  # across groups: never inside one domain
        hops.append(boundary_p2p_s(net, model, training, grid, stride) if s2r[s] != s2r[s + 1] else 0.0)
    w_retained = max(c.blocks.w_retained for c in costs)
    f_s, i_s, w_s, acts = [x.f for x in work], [x.i for x in work], [x.w for x in work], [x.act for x in work]
    timing = pipeline_timing(plan.schedule, pp, vpp, m, f_s, i_s, w_s, tuple(hops), acts, w_retained,
                             max(cap, max(acts)), split_p2p)
    runtime = runtime_bytes(consts.memory)
    ranks = []
    for r, (c, t) in enumerate(zip(costs, tails, strict=True)):
        memory = rank_memory(c.ctx, t, timing.peak_activation[r] + extra_act[r], frags[r], False)
        ranks.append(RankReport(layout.stage_groups[r], c.cluster.gpu.name, r, dp * cp, split[r], m,
                                m * sum(work[s].f + work[s].i + work[s].w for s in mine[r]), memory.breakdown(runtime),
                                c.cluster.usable_memory_bytes / GIB, 1.0 / (dp * cp) if plan.zero >= 1 else 1.0))
    crit = timing.critical_rank
    parts = step_parts(costs[crit].ctx, timing.step_s, _nodes(hc, layout), max(float(t.dp_s) for t in tails),
                       max(float(t.optimizer_s) for t in tails))
    resolved = replace(layout, layer_split=tuple(split))
    return _result(job, resolved, time_breakdown(timing, work, mine, m, parts), parts.total, layout.stage_groups[crit],
                   tuple(ranks), timing.bubble_fraction, {"pipeline": timing.inputs})


def _nodes(hc: HeteroCluster, layout: HeteroLayout) -> int:
    """Nodes the layout uses, over every group (the straggler wait's N)."""
    return sum(-(-n // hc.group(g).cluster.gpus_per_node) for g, n in layout.gpus_per_group().items())


def data_estimate(job: HeteroJob, constants: Constants | None = None, split_p2p: bool = True,
                  batch_split: tuple[int, ...] | None = None, batch_options: int = 3) -> HeteroEstimate:
    """Data-parallel replicas across groups (module docstring); `batch_split` overrides the layout's;
    otherwise the `batch_options` integer splits nearest the equal-finish point are simulated and the
    fastest kept."""
    consts = constants or default_constants()
    model, hc, training, layout = job.model, job.cluster, job.training, job.layout
    plan = _plan(layout)
    grid = Layout.of(plan)
    pp, vpp, tp, cp = grid.pp, grid.vpp, grid.tp, grid.cp
    names = [g for g, _ in layout.replicas]
    reps = [d for _, d in layout.replicas]
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    mine = stages_of_rank(s2r, pp, vpp)
    contents = stage_contents(model, pp * vpp)
    held = rank_contents(model, contents, mine, tp, grid.ep)
    costs = {g: group_cost(job, g, plan, consts) for g in names}
    keep = keeps_unsharded(plan, costs[names[0]].ctx.stack)  # ZeRO-3 layers kept gathered for the step
    work = {g: _work([costs[g]] * pp, contents, s2r) for g in names}
    hop = {g: boundary_p2p_s(costs[g].cluster, model, training, replace(grid, dp=d)) if pp > 1 else 0.0
           for g, d in zip(names, reps, strict=True)}
    total_mb = training.global_batch // plan.micro_batch
    w_retained = max(c.blocks.w_retained for c in costs.values())

    def timings(split: tuple[int, ...]) -> dict[str, PipelineTiming]:
        return {g: pipeline_timing(plan.schedule, pp, vpp, mg, [x.f for x in work[g]], [x.i for x in work[g]],
                                   [x.w for x in work[g]], hop[g], [x.act for x in work[g]], w_retained, None, split_p2p)
                for g, mg in zip(names, split, strict=True)}

    split = batch_split or layout.batch_split
    if split is None:
        busy = [[sum(work[g][s].f + work[g][s].i + work[g][s].w for s in mine[r]) for r in range(pp)] for g in names]
        per_mb = [max(b) for b in busy]
        fill = [sum(b) - max(b) for b in busy]  # fill and drain of a classic schedule: the other stages once
        options = batch_splits(total_mb, reps, per_mb, fill, keep=batch_options)
        if not options:
            raise ShardwiseError(f"parallel.replicas: no split of the {total_mb} micro-batches gives every replica of a group "
                                 f"the same count ({' + '.join(f'{d} x m_{g}' for g, d in layout.replicas)}); change the replicas "
                                 "or the global batch, or give batch_split")
        split = min(options, key=lambda sp: max(t.step_s for t in timings(sp).values()))
    timed = timings(split)
    crit = max(names, key=lambda g: timed[g].step_s)
    crossing_k = group_shape(grid.dp, tp * cp, min(costs[g].cluster.network.nvlink_domain for g in names))[0]
    span = spanning_cluster(hc, names, tp * cp * pp * int(crossing_k))
    wb, gb, ob = _bytes_per_param(job)
    n_ranks = [d * cp for d in reps]
    runtime = runtime_bytes(consts.memory)
    loads = {g: rank_loads(held, work[g], mine) for g in names}
    ranks, dp_times, opt_times = [], [], []
    for r in range(pp):
        own, caps, full_rep = [], [], []
        p_dense, p_exp = held[r].p_dense, held[r].p_exp
        for g, mg in zip(names, split, strict=True):
            tail = rank_tail(costs[g].ctx, grid, loads[g][r], microbatches=mg, overlap_grad_reduce=plan.overlap_grad_reduce,
                             keep_unsharded=keep, unsharded_grads=keep and pp > 1)
            full = model_states(p_dense, p_exp, 1, 1, plan.zero, 1, wb, gb, ob)
            kept = model_states(p_dense, p_exp, 1e30, 1e30, plan.zero, 1e30, wb, gb, ob)  # the unsharded part
            if keep:  # ZeRO-3 keeping its gathered layers: the weights (and under PP the gradients) are not sharded
                kept = ModelStateBytes(full.weights, full.grads if pp > 1 else kept.grads, kept.optimizer)
            acts = timed[g].peak_activation[r] + costs[g].blocks.act.extra(s2r[-1] == r)
            own.append(kept.total + float(tail.fixed_bytes) + (1 + _frag(job, costs[g], consts)) * acts)
            caps.append(costs[g].cluster.usable_memory_bytes)
            full_rep.append(_ReplicaRank(tail, full, kept, acts))
        sharded = full_rep[0].full.total - full_rep[0].kept.total
        shares = (state_shares(caps, own, sharded, n_ranks) if layout.state_split == "memory" and plan.zero >= 1
                  else [1.0 / sum(n_ranks)] * len(names))
        even = max(shares) - min(shares) <= 1e-12 * max(shares)  # even shards: the homogeneous rule as it is
        pad = 1.0 if even else max(shares) * sum(n_ranks)
        for k, (g, mg) in enumerate(zip(names, split, strict=True)):
            tail, full, kept, acts = full_rep[k]
            share = shares[k] if plan.zero >= 1 else 1.0
            if not even:  # uneven shards: each group's share of the sharded states, its optimizer over that share
                states = ModelStateBytes(*(kv + share * (fv - kv) for fv, kv in ((full.weights, kept.weights),
                                                                                (full.grads, kept.grads),
                                                                                (full.optimizer, kept.optimizer))))
                opt_s = float(optimizer_step_s(consts, (p_dense + p_exp) * share, costs[g].dev.hbm_rate, "none",
                                               host_link_gbyte_s(costs[g].cluster), wb, gb))
                tail = replace(tail, states=states, optimizer_s=opt_s)
            span_load = rank_loads(held, work[g], mine, pad)[r]
            span_tail = rank_tail(replace(costs[g].ctx, cluster=span), grid, span_load, microbatches=mg,
                                  overlap_grad_reduce=plan.overlap_grad_reduce, keep_unsharded=keep,
                                  unsharded_grads=keep and pp > 1)
            dp_times.append(float(span_tail.dp_s))
            opt_times.append(float(tail.optimizer_s))
            memory = rank_memory(costs[g].ctx, tail, acts, _frag(job, costs[g], consts), False)
            ranks.append(RankReport(g, costs[g].cluster.gpu.name, r, n_ranks[k], held[r].layers, mg,
                                    mg * sum(work[g][s].f + work[g][s].i + work[g][s].w for s in mine[r]),
                                    memory.breakdown(runtime), costs[g].cluster.usable_memory_bytes / GIB,
                                    share if plan.zero >= 1 else 1.0 / sum(n_ranks)))
    m_crit = split[names.index(crit)]
    parts = step_parts(costs[crit].ctx, timed[crit].step_s, _nodes(hc, layout), max(dp_times), max(opt_times))
    resolved = replace(layout, batch_split=tuple(split))
    return _result(job, resolved, time_breakdown(timed[crit], work[crit], mine, m_crit, parts), parts.total, crit,
                   tuple(ranks), timed[crit].bubble_fraction, {g: timed[g].inputs for g in names})


class _ReplicaRank(NamedTuple):
    """Pipeline rank r of one group's replicas: its tail, its model states unsharded (`full`) and the part no
    sharding removes (`kept`), and its peak activations."""

    tail: RankTail
    full: ModelStateBytes
    kept: ModelStateBytes
    acts: float


def _result(job: HeteroJob, layout: HeteroLayout, times: TimeBreakdown, step: float, crit: str, ranks: tuple[RankReport, ...],
            bubble: float, pipelines: dict[str, tuple]) -> HeteroEstimate:
    model, training, hc = job.model, job.training, job.cluster
    tokens = training.tokens_per_step
    gpus = layout.gpus_per_group()
    bf16 = "bf16" if training.low_precision else training.precision  # MFU of fp8/fp4 runs: vs the BF16 peak, as estimate's
    peak = sum(n * hc.group(g).gpu.peak_flops(bf16) for g, n in gpus.items())
    prices = {g: hc.group(g).cluster.price_usd_per_gpu_hour for g in gpus}
    per_hour = None if any(p is None for p in prices.values()) else sum(n * prices[g] for g, n in gpus.items())
    notes = [f"no catalog price for group {g}: set its price_usd_per_gpu_hour for cost" for g, p in prices.items() if p is None]
    if not all(r.fits for r in ranks):
        worst = max(ranks, key=lambda r: r.memory.total / GIB / r.capacity_gib)
        notes.append(f"does not fit: pipeline rank {worst.pipeline_rank} on {worst.group} needs "
                     f"{worst.memory.total / GIB:.1f} GiB of {worst.capacity_gib:.1f}")
    days = cost = None
    if training.tokens:
        seconds = training.tokens / tokens * step
        days = seconds / 86400
        cost = None if per_hour is None else seconds / 3600 * per_hour
    return HeteroEstimate(
        name=job.name, model=model.name, cluster=hc.describe(), layout=layout, gpus_per_group=gpus, step_time_s=step,
        time_s=times, critical_group=crit, ranks=ranks, tokens_per_s=tokens / step,
        model_tflops=model_flops_per_token(model, training.seq_len) * tokens / step / 1e12, peak_tflops=peak / 1e12,
        model_tflops_causal=model_flops_per_token(model, training.seq_len, causal=True) * tokens / step / 1e12,
        bubble_fraction=bubble, usd_per_hour=per_hour, days_to_train=days, cost_usd=cost, notes=tuple(notes),
        pipelines=pipelines)


def hetero_estimate(job: HeteroJob, constants: Constants | None = None, split_p2p: bool = True,
                    batch_options: int = 3, refine: bool = True) -> HeteroEstimate:
    """Estimate a heterogeneous job (its layout must be given: `train plan` searches one);
    `batch_options`: see :func:`data_estimate`; `refine`: see :func:`pipeline_estimate`."""
    if job.layout is None:
        raise ShardwiseError("parallel: a job on a cluster with groups needs a layout to estimate (stage_groups or "
                             "replicas); `shardwise train plan` searches one")
    if job.layout.kind == "pipeline":
        return pipeline_estimate(job, constants, split_p2p, refine=refine)
    return data_estimate(job, constants, split_p2p, batch_options=batch_options)
