"""Vectorised screening of many plans at once: a lower bound and an approximation of the step time and
an approximation of the peak memory per GPU, for ranking plans before the exact estimate.

Per-layer costs come from the same cached functions the exact estimate uses (:mod:`shardwise.cost.layer`,
one call per distinct (tp, cp, cp_comm, Ulysses size, ep, etp, sp, recompute, micro-batch, recipe)); stage contents and stage-to-rank maps
from :mod:`shardwise.train.stages` and the schedule's placement; communication exposure, model states
and data-parallel time from the same array-friendly functions as the estimate. What differs is the
pipeline: instead of simulating,

- lower bound: a rank cannot finish before it has done its own work, nor start before the first
  micro-batch's forward has crossed the stages before it: step >= max_r (sum_{s<r} F_s + m * busy_r)
  for schedules timed on the global makespan, >= max_r m * busy_r for those timed on the per-rank span
  (the schedule's ``step_time``);
- approximation: m * busy_max plus the schedule's bubble with equal stages (its ``bubble_units``, in
  stage units of F+I+W);
- peak activations per rank: the schedule's in-flight counts (its ``inflight``, in stage units).

The closed forms are part of each schedule's record (:class:`shardwise.pipeline.schedule_info.ScheduleInfo`;
their sources in :mod:`shardwise.pipeline.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import numpy as np

from shardwise.cost.act_offload import offloaded_peak
from shardwise.cost.allocator import fragmentation_share
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.device import Device
from shardwise.cost.layer import TP_OVERLAP_MODES, Groups, PassCost
from shardwise.cost.lowp import LowPrecision, device, job_device, low_precision
from shardwise.cost.memory import ModelStateBytes
from shardwise.cost.numeric import Num
from shardwise.cost.overlap import exposed_layer_comm
from shardwise.cost.stack import StackProfile, attention_kernel, expandable_segments, stack_profile
from shardwise.cost.step import host_capacity_bytes
from shardwise.pipeline import schedule_info
from shardwise.pipeline.schedule_info import StepTime
from shardwise.specs.hardware import Cluster
from shardwise.specs.layout import Layout
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.assembly import (
    BlockActivations,
    Blocks,
    Costing,
    RankLoad,
    RankTail,
    blocks,
    boundary_p2p_s,
    layer_groups,
    layer_passes,
    peak_bytes,
    rank_contents,
    rank_memory,
    rank_tail,
    stages_of_rank,
    step_parts,
)
from shardwise.train.search_space import CP_COMMS, RECOMPUTE, Candidates, unique_rows
from shardwise.train.stages import stage_contents

FIELDS = [f for f in PassCost.__dataclass_fields__]
# (rank kind, plan) rows per rank_tail call: enough to amortise numpy's per-call cost, small enough for the
# temporaries to stay in cache (one call over every row of a large search is slower than per group).
BATCH_ROWS = 32_768


def _stack(costs: list[PassCost]) -> SimpleNamespace:
    return SimpleNamespace(**{f: np.array([getattr(c, f) for c in costs]) for f in FIELDS})


@dataclass(frozen=True)
class PipelineRanks:
    """What the pipeline ranks of one (pp, vpp, schedule, tp, ep) hold, as arrays for the screen: `counts`
    (pp x (dense layers, MoE layers, embedding, LM head)), `params` (pp x (dense, expert) parameters after
    TP/EP), `first` (the first pp stages' counts, in forward order: ranks 0..pp-1 hold stages 0..pp-1 in
    every placement) and `last_rank` (the rank holding the last stage)."""

    counts: np.ndarray
    params: np.ndarray
    first: np.ndarray
    last_rank: int


@lru_cache(maxsize=256)
def pipeline_ranks(model: ModelSpec, pp: int, vpp: int, schedule: str, tp: int, ep: int) -> PipelineRanks:
    """The ranks' contents (:func:`shardwise.train.assembly.rank_contents`) of one pipeline shape."""
    stages = stage_contents(model, pp * vpp)
    s2r = schedule_info(schedule).stage_to_rank(pp, vpp)
    contents = rank_contents(model, stages, stages_of_rank(s2r, pp, vpp), tp, ep)
    counts = np.array([(c.dense_layers, c.moe_layers, c.embedding, c.lm_head) for c in contents], dtype=float)
    params = np.array([(c.p_dense, c.p_exp) for c in contents])
    first = np.array([(st.dense_layers, st.moe_layers, st.embedding, st.lm_head) for st in stages[:pp]], dtype=float)
    return PipelineRanks(counts, params, first, s2r[-1])


def _stack_and_devices(c: Candidates, cluster: Cluster, training: TrainingSpec,
                       consts: Constants) -> tuple[StackProfile, list[tuple[Device, LowPrecision]]]:
    """The job's software stack and, per searched recipe, its (device model, LowPrecision)."""
    gpu = cluster.gpu
    stack = stack_profile(training.framework, gpu.arch, training.compile, consts)
    kernel = attention_kernel(training, stack)
    if c.recipes == ("none",):
        return stack, [job_device(gpu, training, consts, stack, kernel)]
    lowps = [low_precision(training, stack, gpu, r) for r in c.recipes]
    return stack, [(device(gpu, training, consts, stack, kernel, lp), lp) for lp in lowps]


#: the fields that fix one layer's costs (:func:`layer_table`), in key order
LAYER_KEY = ("tp", "cp", "cpc", "uly", "ep", "etp", "sp", "rc", "mb", "rcp", "disp")


@dataclass(frozen=True)
class LayerTable:
    """Per-block costs of every distinct layer key of a candidate set: `keys` (one row per key, fields
    LAYER_KEY), `inv` (each plan's key), `fiw` ((4 blocks: dense, MoE, embedding, LM head) x (F, I, W)
    exposed seconds x keys), `act` (the blocks' activation bytes, one array element per key) and `tail`
    (keys x what the recipe adds to a rank's step and memory: per-step weight-cast bytes and kernels per
    element, ZeRO-3 gather bytes and kept low-precision copy bytes per weight)."""

    keys: np.ndarray
    inv: np.ndarray
    fiw: np.ndarray
    act: BlockActivations
    tail: np.ndarray
    modes: np.ndarray  # per key: the TP overlap mode chosen (index into TP_OVERLAP_MODES)

    def subset(self, mask: np.ndarray) -> LayerTable:
        """The table of the plans where `mask` is true (as :meth:`Candidates.keep` keeps them)."""
        return LayerTable(self.keys, self.inv[mask], self.fiw, self.act, self.tail, self.modes)


def layer_table(c: Candidates, model: ModelSpec, cluster: Cluster, training: TrainingSpec, constants: Constants | None = None,
                flash_attention: bool = True, tp_overlap: str | None = None, engines: tuple[str, ...] = ()) -> LayerTable:
    """The per-layer costs of the candidates: :func:`shardwise.train.assembly.blocks` once per distinct
    (tp, cp, cp_comm, all-to-all ranks of cp, ep, etp, sp, recompute, micro-batch, recipe, MoE dispatcher),
    each at the TP overlap mode that makes its layers fastest among those the stack runs (`tp_overlap`: the
    job's fixed mode; `engines`: only modes each of these engines runs). The mode changes no memory and only the per-layer F, I and W, so the fastest layers
    are the fastest step but for the data-parallel window a slower backward widens."""
    consts = constants or default_constants()
    stack, recipes = _stack_and_devices(c, cluster, training, consts)
    sp = ((c["sp"] == 1) & (c["tp"] > 1)).astype(np.int64)
    uniq, inv = unique_rows([sp if k == "sp" else c[k] for k in LAYER_KEY])

    @lru_cache(maxsize=None)
    def groups_of(tp: int, cp: int, cpc: int, uly: int, ep: int, etp: int) -> Groups:
        return layer_groups(cluster, Layout(tp=tp, cp=cp, ep=ep, etp=etp, cp_comm=CP_COMMS[cpc], ulysses=uly))

    routed = [training.model_copy(update={"moe": training.moe.model_copy(update={"dispatcher": d})}) for d in c.dispatchers]
    costings = [[Costing(model, job, cluster, consts, stack, dev, lowp) for job in (routed or [training])] for dev, lowp in recipes]

    modes = (tp_overlap,) if tp_overlap and tp_overlap != "auto" else stack.tp_overlap_modes
    if engines:
        from shardwise.engines.support import ENGINE_TP_OVERLAP

        modes = tuple(m for m in modes if all(m in ENGINE_TP_OVERLAP.get(e, ("none",)) for e in engines)) or ("none",)
    counts = np.array([model.layers - model.moe_layers, model.moe_layers], dtype=float)

    def key_blocks(tp: int, cp: int, cpc: int, uly: int, ep: int, etp: int, sp_: int, rc: int, mb: int, rcp: int,
                   disp: int) -> tuple[int, Blocks]:
        ctx = costings[rcp][disp if routed else 0]
        layout = Layout(tp=tp, cp=cp, ep=ep, etp=etp, sp=bool(sp_), recompute=RECOMPUTE[rc], micro_batch=mb,
                        cp_comm=CP_COMMS[cpc], ulysses=uly)
        groups = groups_of(tp, cp, cpc, uly, ep, etp)
        best = None
        for mode in (modes if tp > 1 and sp_ else ("none",)):  # the layers only: the rest of a block is the same
            passes = layer_passes(ctx, layout, flash_attention, groups, mode)
            busy = sum(n * sum(exposed_layer_comm(x)[:3]) for n, x in zip(counts, passes, strict=True))
            if best is None or busy < best[0]:
                best = (busy, mode, passes)
        _, mode, passes = best
        return TP_OVERLAP_MODES.index(mode), blocks(ctx, layout, flash_attention, mode, groups, passes)

    chosen = [key_blocks(*k) for k in uniq.tolist()]
    per_key = [b for _, b in chosen]
    parts = ([b.dense for b in per_key], [b.moe for b in per_key], [b.embedding for b in per_key], [b.head for b in per_key])
    fiw = np.stack([np.stack(exposed_layer_comm(_stack(x))[:3]) for x in parts]) if per_key else np.zeros((4, 3, 0))
    act = BlockActivations(**{f.name: np.array([getattr(b.act, f.name) for b in per_key], dtype=float)
                              for f in fields(BlockActivations)})
    tails = np.array([(lp.cast_bytes * lp.weights_per_step, lp.cast_kernels * lp.weights_per_step, lp.gather_bytes,
                       lp.weight_copy_bytes) for _, lp in recipes])
    return LayerTable(uniq, inv, fiw, act, tails[uniq[:, LAYER_KEY.index("rcp")]].reshape(-1, 4),
                      np.array([m for m, _ in chosen], dtype=np.int64))


#: the choices :func:`dominated` compares (the rest of a layer key stays the same)
CHOICES = ("etp", "cpc", "uly", "rcp", "disp")


def dominated(c: Candidates, table: LayerTable) -> np.ndarray:
    """Per plan: True where another etp / cp_comm (with its Ulysses size) / recipe / dispatcher choice of the same plan costs no more on every
    count the screen and the estimate sum (F, I and W of each block, exposed communication included,
    activation bytes, the recipe's step and memory terms, and the expert states, which grow as tp / etp) and is valid wherever this one is (an etp no larger: ep x etp still divides the stage's
    ranks). The plan then cannot be faster than the one that
    dominates it, save through the data-parallel overlap window its slower backward widens."""
    keys = table.keys
    tp, etp = keys[:, LAYER_KEY.index("tp")], keys[:, LAYER_KEY.index("etp")]
    held = (tp / etp)[:, None]  # a rank's expert states grow as tp / etp (assembly.rank_tail)
    act = np.column_stack([getattr(table.act, f.name) for f in fields(BlockActivations)])
    cost = np.hstack([table.fiw.reshape(12, -1).T, act, table.tail, held])
    cols = [LAYER_KEY.index(k) for k in CHOICES]
    bases, base_of = unique_rows([keys[:, j] for j in range(len(LAYER_KEY)) if j not in cols])
    choice = keys[:, cols]
    order = np.argsort(base_of, kind="stable")
    bounds = np.searchsorted(base_of[order], np.arange(len(bases) + 1))
    out = np.zeros(len(keys), dtype=bool)
    for b in range(len(bases)):
        opts = order[bounds[b]:bounds[b + 1]]
        if len(opts) < 2:
            continue
        x, ch = cost[opts], choice[opts]
        no_worse = (x[:, None, :] <= x[None, :, :]).all(axis=2)  # [a, b]: a costs no more than b on every count
        better = (x[:, None, :] < x[None, :, :]).any(axis=2)
        rank = np.lexsort(ch.T[::-1]).argsort()  # ties: keep the first in (etp, cp_comm, Ulysses size, recipe, dispatcher) order
        dom = no_worse & (ch[:, None, 0] <= ch[None, :, 0]) & (better | (rank[:, None] < rank[None, :]))
        np.fill_diagonal(dom, False)
        out[opts] = dom.any(axis=0)
    return out[table.inv]


def dominated_recipes(c: Candidates, cluster: Cluster, training: TrainingSpec, constants: Constants | None = None) -> list[int]:
    """Indices of the searched recipes another recipe beats on every term a recipe sets, so on every plan,
    without costing any layer: no slower low-precision GEMMs (rate), no more bytes per operand, per cast
    element or per ZeRO-3 gathered weight, no more cast kernels or kept weight-copy bytes, and weights
    cast as often (once per step, or at every forward). Every cost the estimate sums grows with each of
    these terms (:mod:`shardwise.cost.lowp`, :meth:`shardwise.cost.device.Device.gemm_s`); ties keep the
    first recipe in search order. Only recipes some candidate still uses are compared."""
    if c.recipes == ("none",) or len(c.recipes) < 2:
        return []
    _, devices = _stack_and_devices(c, cluster, training, constants or default_constants())
    terms = np.array([(1.0 / dev.lowp_flops, dev.lowp_bytes, lp.cast_bytes, lp.cast_kernels, lp.gather_bytes, lp.weight_copy_bytes)
                      for dev, lp in devices])
    per_step = np.array([lp.weights_per_step for _, lp in devices])
    present = sorted(set(c["rcp"].tolist()))  # a recipe the GPU cannot run dominates nothing
    out = []
    for b in present:
        for a in present:
            no_worse = a != b and per_step[a] == per_step[b] and bool((terms[a] <= terms[b]).all())
            if no_worse and (bool((terms[a] < terms[b]).any()) or a < b):
                out.append(b)
                break
    return out


def drop_dominated_recipes(c: Candidates, cluster: Cluster, training: TrainingSpec, constants: Constants | None = None) -> None:
    """Drop the plans of :func:`dominated_recipes` (a property of the recipes alone, so it may run on
    layouts before the knobs multiply them), counted as "dominated"."""
    if len(c):  # none left: the GPU runs none of the recipes (the enumeration counted why)
        c.keep(~np.isin(c["rcp"], dominated_recipes(c, cluster, training, constants)), "dominated")


@dataclass(frozen=True)
class ScreenOptions:
    """The job's plan fields that every plan of a search shares (`search_space.EVERY_PLAN`) and that change
    how one is costed. `dp_shard` None: shard over all of dp*cp. `offload_activations`: the share of
    activations offloaded; its memory rule is the estimate's (:func:`shardwise.cost.act_offload.offloaded_peak`,
    the offloaded part counted in host DRAM); its time is not screened (the copies are taken as hidden; the
    exact estimate prices what shows)."""

    flash_attention: bool = True
    overlap_grad_reduce: bool = True
    dp_shard: int | None = None
    offload: str = "none"
    offload_device: str = "cpu"
    offload_activations: float = 0.0

    @classmethod
    def of(cls, plan_fields: Mapping[str, Any]) -> ScreenOptions:
        """The options among a job's fixed plan fields (others ignored; missing ones at their defaults)."""
        return cls(**{f.name: plan_fields[f.name] for f in fields(cls) if f.name in plan_fields})


def screen(c: Candidates, model: ModelSpec, cluster: Cluster, training: TrainingSpec, constants: Constants | None = None,
           table: LayerTable | None = None, options: ScreenOptions = ScreenOptions()) -> dict[str, np.ndarray]:
    """Arrays (one per plan): step_lb_s, step_s (approximation) and memory_bytes (peak per GPU, as the
    estimate counts it); sets each plan's TP overlap mode (the array `tpo` of `c`); `table`: the candidates'
    :func:`layer_table` when the caller has it; `options`: the plan fields all candidates share.
    `host_ok`: whether each plan's offloaded states fit the node's host DRAM, CXL memory and NVMe (as
    :func:`shardwise.train.estimate.host_memory`)."""
    flash_attention, overlap_grad_reduce, dp_shard = options.flash_attention, options.overlap_grad_reduce, options.dp_shard
    offload, offload_device, offload_activations = options.offload, options.offload_device, options.offload_activations
    consts = constants or default_constants()
    stack, recipes = _stack_and_devices(c, cluster, training, consts)
    table = table or layer_table(c, model, cluster, training, consts, flash_attention)
    c.arrays["tpo"] = table.modes[table.inv]  # each plan's TP overlap mode: the fastest for its layers (layer_table)
    n = len(c)
    fiw = [f[:, table.inv] for f in table.fiw]  # 4 x (3, n)
    act = BlockActivations(**{f.name: getattr(table.act, f.name)[table.inv] for f in fields(BlockActivations)})

    lb, approx, mem = np.zeros(n), np.zeros(n), np.zeros(n)
    host_dram, host_nvme, act_host = np.zeros(n), np.zeros(n), np.zeros(n)
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    paged = training.adapter is not None and bool(training.adapter.paged_optimizer)
    frag = fragmentation_share(consts.memory, expandable_segments(training, stack))
    costings = [Costing(model, training, cluster, consts, stack, dev, lowp) for dev, lowp in recipes]
    p2p = np.where(c["pp"] > 1, boundary_p2p_s(cluster, model, training, c.layout()), 0.0)
    gk, ginv = unique_rows([c[k] for k in ("rcp", "pp", "vpp", "sched", "tp", "ep")])
    by_group = np.argsort(ginv, kind="stable")
    bounds = np.searchsorted(ginv[by_group], np.arange(len(gk) + 1))

    def finish(batch: list[_Group], ctx: Costing) -> None:
        """Data parallelism, optimizer and memory of every (rank kind, plan) of `batch`'s groups at once."""
        rows = np.concatenate([np.tile(g.idx, g.kinds) for g in batch])
        layout = c.layout(rows, dp_shard)
        load = RankLoad(*(np.concatenate([getattr(g.load, f) for g in batch]) for f in RankLoad._fields))
        keep = (layout.zero == 3) & (layout.pp > 1) & stack.fsdp_unsharded_with_pp  # cost/stack.py keeps_unsharded
        tail = rank_tail(ctx, layout, load, microbatches=c["m"][rows], offload=offload, offload_device=offload_device,
                         overlap_grad_reduce=overlap_grad_reduce, keep_unsharded=keep, unsharded_grads=keep)
        offset = 0
        for g in batch:
            shape = (g.kinds, len(g.idx))
            part = slice(offset, offset + shape[0] * shape[1])
            offset = part.stop

            def by_kind(x: Num, part: slice = part, shape: tuple[int, int] = shape) -> np.ndarray:
                """(rank kind, plan) array of one of the tail's terms for this group."""
                return np.broadcast_to(x, (len(rows),))[part].reshape(shape)

            if paged:  # adapter jobs: the optimizer states take what room is left (cost/adapters.py)
                states = ModelStateBytes(*(by_kind(x)[g.rank_kind] for x in (tail.states.weights, tail.states.grads,
                                                                            tail.states.optimizer)))
                per_rank = RankTail(states, by_kind(tail.fixed_bytes)[g.rank_kind], 0.0, by_kind(tail.optimizer_s)[g.rank_kind])
                memory = rank_memory(ctx, per_rank, g.activations, frag, paged)
                total, optimizer_s = memory.total, (per_rank.optimizer_s + memory.paging_s).max(axis=0)
            else:
                total, optimizer_s = peak_bytes(by_kind(tail.held_bytes)[g.rank_kind], g.activations, frag), by_kind(tail.optimizer_s).max(axis=0)
            dp_s = by_kind(tail.dp_s).max(axis=0)
            lb[g.idx] = step_parts(ctx, g.pipe_lb, cluster.nodes, dp_s, optimizer_s).total
            approx[g.idx] = step_parts(ctx, g.pipe, cluster.nodes, dp_s, optimizer_s).total
            mem[g.idx] = np.max(total, axis=0)
            if tail.host is not None:
                host_dram[g.idx] = per_node * by_kind(tail.host.dram).max(axis=0)
                host_nvme[g.idx] = per_node * by_kind(tail.host.nvme).max(axis=0)

    groups, pending = [], 0
    for gi, (rcp, pp, vpp, si, tp, ep) in enumerate(gk.tolist()):
        idx = by_group[bounds[gi]:bounds[gi + 1]]
        name = c.schedules[si]
        info = schedule_info(name)
        ranks = pipeline_ranks(model, pp, vpp, name, tp, ep)
        # Per rank per micro-batch F, I, W: counts (pp, 4) against per-block costs (4, 3, k).
        block_fiw = np.stack([f[:, idx] for f in fiw])  # (4, 3, k)
        rank_fiw = np.einsum("rb,bjk->rjk", ranks.counts, block_fiw)  # (pp, 3, k)
        busy = rank_fiw.sum(axis=1)  # (pp, k)
        m = c["m"][idx]
        fwd_first = np.einsum("sb,bk->sk", ranks.first, block_fiw[:, 0, :])  # (pp, k) forward of stages 0..pp-1
        start = np.vstack([np.zeros((1, len(idx))), np.cumsum(fwd_first, axis=0)[:-1]])
        if info.step_time is StepTime.RANK_SPAN:
            pipe_lb = (m * busy).max(axis=0)
        else:
            pipe_lb = (start + m * busy).max(axis=0)
        crit = busy.argmax(axis=0)
        stage_f, stage_i, stage_w = (rank_fiw[crit, j, np.arange(len(idx))] / vpp for j in range(3))
        bubble = info.bubble_units(pp, vpp, m) * (stage_f + stage_i + stage_w) if pp > 1 else 0.0
        pipe = np.maximum(pipe_lb, m * busy.max(axis=0) + bubble) + 2 * (pp - 1) * p2p[idx]
        counts = ranks.counts
        stage_act = (counts[:, :1] * act.dense[idx] + counts[:, 1:2] * act.moe[idx] + counts[:, 2:3] * act.embedding[idx]) / vpp
        units = np.stack([info.inflight(pp, vpp, m, r) for r in range(pp)])
        activations = units * stage_act
        if offload_activations > 0:
            kept = offloaded_peak(offload_activations, activations, stage_act)
            act_host[idx] = per_node * (activations - kept).max(axis=0)
            activations = kept
        holds_output = (np.arange(pp) == ranks.last_rank)[:, None]
        activations = activations + BlockActivations(*(getattr(act, f.name)[idx] for f in fields(BlockActivations))).extra(holds_output)
        # Ranks that hold the same layers share model states, DP time and optimizer step: one row each.
        kinds, rank_kind = np.unique(np.hstack([counts, ranks.params]), axis=0, return_inverse=True)
        kind_fiw = np.einsum("rb,bjk->rjk", kinds[:, :4], block_fiw)  # (kinds, 3, k)
        shape = (len(kinds), len(idx))
        load = RankLoad(np.broadcast_to(kinds[:, 4:5], shape).ravel(), np.broadcast_to(kinds[:, 5:6], shape).ravel(),
                        kind_fiw[:, 0].ravel(), (kind_fiw[:, 1] + kind_fiw[:, 2]).ravel(),
                        np.broadcast_to(kinds[:, :2].sum(axis=1, keepdims=True), shape).ravel())
        groups.append(_Group(idx, len(kinds), rank_kind.ravel(), pipe_lb, pipe, activations, load))
        pending += shape[0] * shape[1]
        if pending >= BATCH_ROWS or gi == len(gk) - 1 or gk[gi + 1, 0] != rcp:  # one rank_tail call per recipe
            finish(groups, costings[rcp])
            groups, pending = [], 0
    tiers = cluster.host
    host_ok = np.ones(n, dtype=bool)
    capacity = host_capacity_bytes(tiers.dram_gib, tiers.cxl_gib)
    if capacity is not None:
        host_ok &= host_dram + act_host <= capacity
    if offload_device == "nvme" and tiers.nvme_tb is not None:
        host_ok &= host_nvme <= tiers.nvme_tb * 1e12
    return {"step_lb_s": lb, "step_s": approx, "memory_bytes": mem, "host_ok": host_ok}


@dataclass(frozen=True)
class _Group:
    """The plans of one (recipe, pp, vpp, schedule, tp, ep) awaiting their ranks' tails: `idx` (the plans),
    `kinds` (ranks holding the same layers share a tail: one row per kind and plan), `rank_kind` (each
    pipeline rank's kind), the pipeline's lower bound and approximation, each rank's peak activations
    (pp x plans) and the load of each (kind, plan), kind-major."""

    idx: np.ndarray
    kinds: int
    rank_kind: np.ndarray
    pipe_lb: np.ndarray
    pipe: np.ndarray
    activations: np.ndarray
    load: RankLoad
