"""`hetero_estimate(job)`: step time and memory of a plan laid over the groups of a heterogeneous
cluster (layouts: :mod:`shardwise.specs.hetero`).

Each GPU group is costed by the shared assembly (:mod:`shardwise.train.assembly`: per-layer blocks,
stage work, model states and data-parallel time per rank) on its own GPU, stack and network, and the
pipeline is timed by the schedule simulator (:mod:`shardwise.train.pipeline_timing`):

- pipeline across groups: per-stage F/I/W from the GPU of the stage's rank, one hop time per stage
  boundary (inside a group its network, between groups the slowest link,
  :func:`shardwise.cost.comm.spanning_network`, with the boundary's tp*cp*dp senders sharing
  ``inter_group_gbps``); the layer split is given or balanced by speed under memory
  (:mod:`shardwise.train.hetero_split`); data parallelism stays inside each group.
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

import numpy as np

from shardwise.cost.allocator import fragmentation_share, runtime_bytes
from shardwise.cost.comm import spanning_network
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.device import Device
from shardwise.cost.flops import model_flops_per_token
from shardwise.cost.memory import ModelStateBytes, optimizer_bytes_per_param
from shardwise.cost.stack import StackProfile, attention_kernel, expandable_segments, stack_profile, tp_overlap_mode
from shardwise.cost.step import host_link_gbyte_s, host_overhead_s, model_states, optimizer_step_s, straggler_factor
from shardwise.errors import ShardwiseError
from shardwise.pipeline import schedule_info
from shardwise.specs.hardware import Cluster, HeteroCluster, group_shape
from shardwise.specs.hetero import HeteroJob, HeteroLayout
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainPlan
from shardwise.train.assembly import Blocks, RankTail, blocks, boundary_p2p_s, rank_tail, stage_work
from shardwise.train.hetero_result import HeteroEstimate, RankReport
from shardwise.train.hetero_split import balanced_layer_split, batch_splits, refine_split, state_shares
from shardwise.train.pipeline_timing import PipelineTiming, pipeline_timing, plan_stages_per_rank
from shardwise.train.result import GIB, MemoryBreakdown, TimeBreakdown
from shardwise.train.stages import StageContent, stage_contents, stage_params

#: Pipelines up to this many ranks get their layer split refined on the simulation (each move costs one).
REFINE_MAX_RANKS = 8


@dataclass(frozen=True)
class GroupCost:
    """One GPU group under a plan: its cluster, device, software stack and per-block costs."""

    name: str
    cluster: Cluster
    dev: Device
    stack: StackProfile
    blocks: Blocks

    @property
    def layer_s(self) -> float:
        """F + I + W of one micro-batch through one dense layer (TP/CP communication included)."""
        f, i, w, _, _ = stage_work(self.blocks, StageContent(0, 1, 0, False, False))
        return f + i + w


def group_cost(job: HeteroJob, name: str, plan: TrainPlan, consts: Constants) -> GroupCost:
    """The cost model of group `name` at the plan's (tp, cp, sp, recompute, micro-batch)."""
    cluster, training = job.cluster.group(name).cluster, job.training
    stack = stack_profile(training.framework, cluster.gpu.arch, training.compile, consts)
    dev = Device.of(cluster.gpu, training.precision, consts.compute_for(cluster.gpu.name), attention_kernel(training, stack))
    b = blocks(job.model, training, cluster, dev, stack, plan.tp, plan.cp, plan.ep, plan.sp, plan.recompute,
               plan.flash_attention, plan.micro_batch, tp_overlap=tp_overlap_mode(plan, stack))
    return GroupCost(name, cluster, dev, stack, b)


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
        tail = rank_tail(model, job.training, c.cluster, consts, c.stack, c.dev, tp=plan.tp, cp=plan.cp, ep=plan.ep,
                         dp=dp_group // plan.cp, zero=plan.zero, dp_shard=dp_group, offload="none",
                         overlap_grad_reduce=plan.overlap_grad_reduce, microbatches=m, p_dense=0.0, p_exp=0.0,
                         fwd_s=0.0, bwd_s=0.0)
        ends = [s for s in (0, len(s2r) - 1) if s2r[s] == r]
        extra_params = sum(stage_params(model, StageContent(s, 0, 0, s == 0, s == len(s2r) - 1), plan.tp, plan.ep)[0] for s in ends)
        extra = (float(tail.fixed_bytes) + extra_params * (wb + gb + ob) / (dp_group if plan.zero >= 1 else 1)
                 + (1 + frag) * (c.blocks.act_recompute + (c.blocks.act_output if len(s2r) - 1 in ends else 0.0)
                                 + (units * c.blocks.act_embedding / vpp if 0 in ends else 0.0)))
        per_layer = per_layer_states + (1 + frag) * units / vpp * c.blocks.act_dense
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
                f, i, w, _, _ = stage_work(c.blocks, StageContent(s, 0, 0, not head, head))
                e += f + i + w
        fixed.append(e)
    cap = layer_caps(job, plan, costs, s2r, m, (plan.dp or 1) * plan.cp, consts)
    try:
        return balanced_layer_split(job.model.layers, [c.layer_s for c in costs], fixed, cap)
    except ShardwiseError:  # over memory anyway: balance by speed and let the estimate say it does not fit
        return balanced_layer_split(job.model.layers, [c.layer_s for c in costs], fixed)


@dataclass
class _Pipeline:
    """One pipeline's costed stages and its timing."""

    f: list[float]
    i: list[float]
    w: list[float]
    parts: list[tuple]
    acts: list[float]
    mine: list[list[int]]
    contents: list[StageContent]
    timing: PipelineTiming | None = None


def _stages(model: ModelSpec, plan: TrainPlan, costs: list[GroupCost], contents: list[StageContent],
            s2r: tuple[int, ...]) -> _Pipeline:
    pipe = _Pipeline([], [], [], [], [], [[s for s in range(len(s2r)) if s2r[s] == r] for r in range(plan.pp)], contents)
    for s, st in enumerate(contents):
        c = costs[s2r[s]]
        f, i, w, parts, act = stage_work(c.blocks, st)
        pipe.f.append(f)
        pipe.i.append(i)
        pipe.w.append(w)
        pipe.parts.append(parts)
        pipe.acts.append(act)
    return pipe


def _tail(job: HeteroJob, plan: TrainPlan, c: GroupCost, cluster: Cluster, pipe: _Pipeline, r: int, dp: int, m: int,
          consts: Constants, pad: float = 1.0) -> tuple[RankTail, float, float]:
    """rank_tail of pipeline rank r on `cluster` (its group's, or the groups' spanning one), with the
    parameters scaled by `pad` (uneven shards padded to the largest)."""
    p_dense = p_exp = 0.0
    for s in pipe.mine[r]:
        d, e = stage_params(job.model, pipe.contents[s], plan.tp, plan.ep)
        p_dense, p_exp = p_dense + d, p_exp + e
    tail = rank_tail(job.model, job.training, cluster, consts, c.stack, c.dev, tp=plan.tp, cp=plan.cp, ep=plan.ep, dp=dp,
                     zero=plan.zero, dp_shard=dp * plan.cp, offload="none", overlap_grad_reduce=plan.overlap_grad_reduce,
                     microbatches=m, p_dense=p_dense * pad, p_exp=p_exp * pad, fwd_s=sum(pipe.f[s] for s in pipe.mine[r]),
                     bwd_s=sum(pipe.i[s] + pipe.w[s] for s in pipe.mine[r]),
                     layers=sum(pipe.contents[s].layers for s in pipe.mine[r]))
    return tail, p_dense, p_exp


def _time(timing: PipelineTiming, pipe: _Pipeline, m: int, straggler: float, dp_s: float, optimizer_s: float,
          overhead: float) -> tuple[TimeBreakdown, float]:
    """The critical rank's breakdown and the step, summed as :func:`shardwise.train.estimate.estimate` does
    (same order, so one GPU type gives the same float)."""
    crit = timing.critical_rank
    comp = sum(pipe.parts[s][0] for s in pipe.mine[crit]) * m
    e_tp, e_cp, e_ep = (sum(pipe.parts[s][k] for s in pipe.mine[crit]) * m for k in (1, 2, 3))
    times = TimeBreakdown(compute=comp, tp_comm=e_tp, pp_comm=timing.pp_comm_s, dp_comm=dp_s, cp_comm=e_cp, ep_comm=e_ep,
                          bubble=timing.bubble_s, optimizer=optimizer_s, overhead=overhead, straggler=straggler)
    return times, timing.step_s + straggler + dp_s + optimizer_s + overhead


def _frag(job: HeteroJob, cost: GroupCost, consts: Constants) -> float:
    """The caching allocator's fragmentation share on a group's stack (:mod:`shardwise.cost.allocator`)."""
    return fragmentation_share(consts.memory, expandable_segments(job.training, cost.stack))


def _memory(states: ModelStateBytes, fixed: float, activations: float, frag: float, consts: Constants) -> MemoryBreakdown:
    runtime = runtime_bytes(consts.memory)
    return MemoryBreakdown(float(states.weights), float(states.grads), float(states.optimizer), activations,
                           fixed - runtime, frag * activations, runtime)


def pipeline_estimate(job: HeteroJob, constants: Constants | None = None, split_p2p: bool = True,
                      layer_split: tuple[int, ...] | None = None, refine: bool = True) -> HeteroEstimate:
    """Pipeline stages across groups (module docstring); `layer_split` overrides the layout's. Without
    either, the split balanced by speed is refined on the schedule simulation itself (`refine`, up to
    REFINE_MAX_RANKS pipeline ranks): one layer moved at a time while the step shortens and the plan
    still fits (:func:`shardwise.train.hetero_split.refine_split`)."""
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
    pp, vpp, tp, cp, dp = plan.pp, plan.vpp, plan.tp, plan.cp, plan.dp or 1
    m = training.global_batch // (plan.micro_batch * dp)
    by_name = {g: group_cost(job, g, plan, consts) for g in dict.fromkeys(layout.stage_groups)}
    costs = [by_name[g] for g in layout.stage_groups]
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    split = layer_split or layout.layer_split or default_layer_split(job, plan, costs, s2r, m, consts)
    pipe = _stages(model, plan, costs, stage_contents(model, pp * vpp, virtual_counts(split, s2r)), s2r)
    tails = [_tail(job, plan, c, c.cluster, pipe, r, dp, m, consts)[0] for r, c in enumerate(costs)]
    extra_act = [c.blocks.act_recompute for c in costs]
    extra_act[s2r[-1]] += costs[s2r[-1]].blocks.act_output
    cap = min((c.cluster.usable_memory_bytes - t.states.total - t.fixed_bytes) / (1 + _frag(job, c, consts)) - extra_act[r]
              for r, (c, t) in enumerate(zip(costs, tails, strict=True)))
    hops = []
    for s in range(pp * vpp - 1):
        a, b = layout.stage_groups[s2r[s]], layout.stage_groups[s2r[s + 1]]
        net = by_name[a].cluster if a == b else spanning_cluster(hc, [a, b], tp * cp * dp)
        stride = tp * cp * dp if a == b else net.network.nvlink_domain  # across groups: never inside one domain
        hops.append(boundary_p2p_s(net, model, training, plan.micro_batch, tp, cp, stride) if s2r[s] != s2r[s + 1] else 0.0)
    w_retained = max(c.blocks.w_retained for c in costs)
    timing = pipeline_timing(plan.schedule, pp, vpp, m, pipe.f, pipe.i, pipe.w, tuple(hops), pipe.acts, w_retained,
                             max(cap, max(pipe.acts)), split_p2p)
    pipe.timing = timing
    ranks = []
    for r, (c, t) in enumerate(zip(costs, tails, strict=True)):
        acts = timing.peak_activation[r] + extra_act[r]
        ranks.append(RankReport(layout.stage_groups[r], c.cluster.gpu.name, r, dp * cp, split[r], m,
                                m * sum(pipe.f[s] + pipe.i[s] + pipe.w[s] for s in pipe.mine[r]),
                                _memory(t.states, float(t.fixed_bytes), acts, _frag(job, c, consts), consts),
                                c.cluster.usable_memory_bytes / GIB, 1.0 / (dp * cp) if plan.zero >= 1 else 1.0))
    dp_s = max(float(t.dp_s) for t in tails)
    optimizer_s = max(float(t.optimizer_s) for t in tails)
    gpus = layout.gpus_per_group()
    nodes = sum(-(-n // hc.group(g).cluster.gpus_per_node) for g, n in gpus.items())
    straggler = timing.step_s * (float(straggler_factor(nodes, consts.step.straggler_cv)) - 1.0)
    times, step = _time(timing, pipe, m, straggler, dp_s, optimizer_s,
                        host_overhead_s(consts, costs[timing.critical_rank].stack.host_step_overhead))
    resolved = replace(layout, layer_split=tuple(split))
    crit_group = layout.stage_groups[timing.critical_rank]
    return _result(job, resolved, times, step, crit_group, tuple(ranks), timing.bubble_fraction, {"pipeline": timing.inputs})


def data_estimate(job: HeteroJob, constants: Constants | None = None, split_p2p: bool = True,
                  batch_split: tuple[int, ...] | None = None, batch_options: int = 3) -> HeteroEstimate:
    """Data-parallel replicas across groups (module docstring); `batch_split` overrides the layout's;
    otherwise the `batch_options` integer splits nearest the equal-finish point are simulated and the
    fastest kept."""
    consts = constants or default_constants()
    model, hc, training, layout = job.model, job.cluster, job.training, job.layout
    plan = _plan(layout)
    pp, vpp, tp, cp, dp = plan.pp, plan.vpp, plan.tp, plan.cp, plan.dp or 1
    names = [g for g, _ in layout.replicas]
    reps = [d for _, d in layout.replicas]
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    contents = stage_contents(model, pp * vpp)
    costs = {g: group_cost(job, g, plan, consts) for g in names}
    pipes = {g: _stages(model, plan, [costs[g]] * pp, contents, s2r) for g in names}
    hop = {g: boundary_p2p_s(costs[g].cluster, model, training, plan.micro_batch, tp, cp, tp * cp * d) if pp > 1 else 0.0
           for g, d in zip(names, reps, strict=True)}
    total_mb = training.global_batch // plan.micro_batch
    w_retained = max(c.blocks.w_retained for c in costs.values())

    def timings(split: tuple[int, ...]) -> dict[str, PipelineTiming]:
        return {g: pipeline_timing(plan.schedule, pp, vpp, mg, pipes[g].f, pipes[g].i, pipes[g].w, hop[g], pipes[g].acts,
                                   w_retained, None, split_p2p) for g, mg in zip(names, split, strict=True)}

    split = batch_split or layout.batch_split
    if split is None:
        busy = [[sum(pipes[g].f[s] + pipes[g].i[s] + pipes[g].w[s] for s in pipes[g].mine[r]) for r in range(pp)] for g in names]
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
    crossing_k = group_shape(dp, tp * cp, min(costs[g].cluster.network.nvlink_domain for g in names))[0]
    span = spanning_cluster(hc, names, tp * cp * pp * int(crossing_k))
    wb, gb, ob = _bytes_per_param(job)
    n_ranks = [d * cp for d in reps]
    ranks, dp_times, opt_times = [], [], []
    for r in range(pp):
        own, caps, full_rep = [], [], []
        for g, mg in zip(names, split, strict=True):
            tail, p_dense, p_exp = _tail(job, plan, costs[g], costs[g].cluster, pipes[g], r, dp, mg, consts)
            full = model_states(p_dense, p_exp, 1, 1, plan.zero, 1, wb, gb, ob)
            kept = model_states(p_dense, p_exp, 1e30, 1e30, plan.zero, 1e30, wb, gb, ob)  # the unsharded part
            extra = costs[g].blocks.act_recompute + (costs[g].blocks.act_output if s2r[-1] == r else 0.0)
            acts = timed[g].peak_activation[r] + extra
            own.append(kept.total + float(tail.fixed_bytes) + (1 + _frag(job, costs[g], consts)) * acts)
            caps.append(costs[g].cluster.usable_memory_bytes)
            full_rep.append((tail, p_dense, p_exp, full, kept, acts))
        sharded = full_rep[0][3].total - full_rep[0][4].total
        shares = (state_shares(caps, own, sharded, n_ranks) if layout.state_split == "memory" and plan.zero >= 1
                  else [1.0 / sum(n_ranks)] * len(names))
        even = max(shares) - min(shares) <= 1e-12 * max(shares)  # even shards: the homogeneous rule as it is
        pad = 1.0 if even else max(shares) * sum(n_ranks)
        for k, (g, mg) in enumerate(zip(names, split, strict=True)):
            tail, p_dense, p_exp, full, kept, acts = full_rep[k]
            share = shares[k] if plan.zero >= 1 else 1.0
            if even:
                states, opt_s = tail.states, float(tail.optimizer_s)
            else:
                states = type(full)(*(kv + share * (fv - kv) for fv, kv in ((full.weights, kept.weights), (full.grads, kept.grads),
                                                                              (full.optimizer, kept.optimizer))))
                opt_s = float(optimizer_step_s(consts, (p_dense + p_exp) * share, costs[g].dev.hbm_rate, "none",
                                               host_link_gbyte_s(costs[g].cluster), wb, gb))
            span_tail, _, _ = _tail(job, plan, costs[g], span, pipes[g], r, dp, mg, consts, pad)
            dp_times.append(float(span_tail.dp_s))
            opt_times.append(opt_s)
            pipe = pipes[g]
            ranks.append(RankReport(g, costs[g].cluster.gpu.name, r, n_ranks[k], sum(contents[s].layers for s in pipe.mine[r]),
                                    mg, mg * sum(pipe.f[s] + pipe.i[s] + pipe.w[s] for s in pipe.mine[r]),
                                    _memory(states, float(tail.fixed_bytes), acts, _frag(job, costs[g], consts), consts),
                                    costs[g].cluster.usable_memory_bytes / GIB, share if plan.zero >= 1 else 1.0 / sum(n_ranks)))
    gpus = layout.gpus_per_group()
    nodes = sum(-(-n // hc.group(g).cluster.gpus_per_node) for g, n in gpus.items())
    step_pipe = timed[crit].step_s
    straggler = step_pipe * (float(straggler_factor(nodes, consts.step.straggler_cv)) - 1.0)
    times, step = _time(timed[crit], pipes[crit], split[names.index(crit)], straggler, max(dp_times), max(opt_times),
                  host_overhead_s(consts, costs[crit].stack.host_step_overhead))
    resolved = replace(layout, batch_split=tuple(split))
    return _result(job, resolved, times, step, crit, tuple(ranks), timed[crit].bubble_fraction,
                   {g: timed[g].inputs for g in names})


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
