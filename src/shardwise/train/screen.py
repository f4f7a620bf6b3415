"""Vectorised screening of many plans at once: a lower bound and an approximation of the step time and
an approximation of the peak memory per GPU, for ranking plans before the exact estimate.

Per-layer costs come from the same cached functions the exact estimate uses (:mod:`shardwise.cost.layer`,
one call per distinct (tp, cp, ep, sp, recompute, micro-batch)); stage contents and stage-to-rank maps
from :mod:`shardwise.train.stages` and the schedule's placement; communication exposure, model states
and data-parallel time from the same array-friendly functions as the estimate. What differs is the
pipeline: instead of simulating,

- lower bound: a rank cannot finish before it has done its own work, nor start before the first
  micro-batch's forward has crossed the stages before it: step >= max_r (sum_{s<r} F_s + m * busy_r)
  for schedules timed on the global makespan, >= max_r m * busy_r for those timed on the per-rank span;
- approximation: m * busy_max plus the schedule's bubble with equal stages, in stage units of F+I+W
  (:func:`bubble_units`: 1F1B p-1, interleaved p-1 stage units = (p-1)/v of a rank, ZB-H1 a third of
  it, ZB-H2 and ZB-V ~0 once m >= 2p, V-Half ~1/2 and V-Min ~2/3 of 1F1B; Qi et al. 2024 Table 1;
  Narayanan et al. 2021 Sec. 2.2), with the extra fill of short pipelines (m < p) measured on the
  simulator;
- peak activations per rank: the schedules' in-flight counts in stage units (tested against the
  simulator: never below it): GPipe m, looped BFS v*m, 1F1B min(p - r, m), interleaved
  min(2(p-r-1) + (v-1)p + 1, v*m), ZB-H1 v*min(p, m), ZB-H2 min(2p-1, m), ZB-V min(2p, m+1+r, 2m),
  V-Half min(p+2, 2m), V-Min min(2(p+4)//3, 2m), DualPipeV 2p+1.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.lowp import job_device
from shardwise.cost.layer import PassCost
from shardwise.cost.overlap import exposed_layer_comm
from shardwise.cost.stack import attention_kernel, stack_profile
from shardwise.cost.step import straggler_factor
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.pipeline_timing import POST_VALIDATION, stage_layout
from shardwise.train.assembly import blocks, boundary_p2p_s, rank_tail
from shardwise.train.search_space import RECOMPUTE, Candidates
from shardwise.train.stages import stage_contents, stage_params

FIELDS = [f for f in PassCost.__dataclass_fields__]


def _stack(costs: list[PassCost]) -> SimpleNamespace:
    return SimpleNamespace(**{f: np.array([getattr(c, f) for c in costs]) for f in FIELDS})


@lru_cache(maxsize=256)
def rank_layout(model: ModelSpec, pp: int, vpp: int, schedule: str, tp: int, ep: int):
    """Per rank: (dense layers, MoE layers, embedding, LM head, dense params, expert params) and per
    stage forward order info for the first pp stages (ranks 0..pp-1 hold stages 0..pp-1 in every
    placement)."""
    stages = stage_contents(model, pp * vpp)
    s2r = stage_layout(schedule, pp, vpp)
    counts = np.zeros((pp, 4))
    params = np.zeros((pp, 2))
    for st, r in zip(stages, s2r, strict=True):
        counts[r] += (st.dense_layers, st.moe_layers, st.embedding, st.lm_head)
        params[r] += stage_params(model, st, tp, ep)
    first = np.array([(st.dense_layers, st.moe_layers, st.embedding, st.lm_head) for st in stages[:pp]], dtype=float)
    return counts, params, first, s2r[-1]


def inflight_units(schedule: str, pp: int, vpp: int, m: np.ndarray, rank: int) -> np.ndarray:
    """Peak in-flight micro-batch activations of one stage on `rank` (closed forms in the docstring)."""
    p, r, v = pp, rank, vpp
    table = {
        "gpipe": m,
        "bfs": v * m,
        "1f1b": np.minimum(p - r, m),
        "interleaved": np.minimum(2 * (p - r - 1) + (v - 1) * p + 1, v * m),
        "zb-h1": v * np.minimum(p, m),
        "zb-h2": np.minimum(2 * p - 1, m),
        "zbv": np.minimum(np.minimum(2 * p, m + 1 + r), 2 * m),
        "v-half": np.minimum(p + 2, 2 * m),
        "v-min": np.minimum(2 * (p + 4) // 3, 2 * m),
        "dualpipev": np.full_like(m, 2 * p + 1),
    }
    return table.get(schedule, v * np.minimum(2 * p, m))


def bubble_units(schedule: str, pp: int, vpp: int, m: np.ndarray) -> np.ndarray:
    """Idle time of the step's critical rank in units of one stage's F+I+W, with equal stages and
    F = I = W: fits to the simulator (tested), including the extra fill when m < p (or 2p)."""
    p, v = pp, vpp
    short = np.maximum(0, p - m)
    table = {
        "gpipe": np.full_like(m, p - 1, dtype=float),
        "1f1b": np.full_like(m, p - 1, dtype=float),
        "interleaved": (p - 1) + short * (v - 1.0),
        "bfs": (p - 1) + short * (v - 1.0),
        "zb-h1": (p - 1) / 3 + short * (v - 1) * 2 / 3,
        "zb-h2": (p - 1) / 3 * np.maximum(0, 2 * p - m) / p,
        "zbv": (p - 1) * np.maximum(0, 2 * p - m) / (1.5 * p),
        "v-half": 1.1 * (p - 1) + 0.0 * m,
        "v-min": 4 * (p - 1) / 3 + 0.0 * m,
        "dualpipev": (p - 1) / 3 + 0.0 * m,
    }
    return table.get(schedule, (p - 1) + 0.0 * m)


def screen(
    c: Candidates,
    model: ModelSpec,
    cluster: Cluster,
    training: TrainingSpec,
    constants: Constants | None = None,
    flash_attention: bool = True,
    overlap_grad_reduce: bool = True,
) -> dict[str, np.ndarray]:
    """Arrays (one per plan): step_lb_s, step_s (approximation), memory_bytes (peak per GPU)."""
    consts = constants or default_constants()
    gpu = cluster.gpu
    stack = stack_profile(training.framework, gpu.arch, training.compile, consts)
    dev, lowp = job_device(gpu, training, consts, stack, attention_kernel(training, stack))
    n = len(c)
    sp = (c["sp"] == 1) & (c["tp"] > 1)
    keys = np.stack([c["tp"], c["cp"], c["ep"], sp.astype(np.int64), c["rc"], c["mb"]], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    per_key = [blocks(model, training, cluster, dev, stack, tp, cp, ep, bool(sp_), RECOMPUTE[rc], flash_attention, mb, lowp,
                      moe_consts=consts.moe)
               for tp, cp, ep, sp_, rc, mb in uniq.tolist()]
    dense, moe = [b.dense for b in per_key], [b.moe for b in per_key]
    emb, head = [b.embedding for b in per_key], [b.head for b in per_key]
    acts = [(b.act_dense, b.act_moe, b.act_embedding, b.act_output, b.act_recompute) for b in per_key]
    tpo = stack.tp_comm_overlap
    fiw = [np.stack(exposed_layer_comm(_stack(x), tpo)[:3])[:, inv] for x in (dense, moe, emb, head)]  # 4 x (3, n)
    act = np.array(acts)[inv]  # (n, 5)

    lb, approx, mem = np.zeros(n), np.zeros(n), np.zeros(n)
    mc = consts.memory
    straggle = float(straggler_factor(cluster.nodes, consts.step.straggler_cv))
    p2p = np.where(c["pp"] > 1, boundary_p2p_s(cluster, model, training, c["mb"], c["tp"], c["cp"], c["tp"] * c["cp"] * c["dp"]), 0.0)
    groups_key = np.stack([c["pp"], c["vpp"], c["sched"], c["tp"], c["ep"]], axis=1)
    gk, ginv = np.unique(groups_key, axis=0, return_inverse=True)
    ginv = ginv.ravel()
    for g, (pp, vpp, si, tp, ep) in enumerate(gk.tolist()):
        idx = np.nonzero(ginv == g)[0]
        name = c.schedules[si]
        counts, params, first, last_rank = rank_layout(model, pp, vpp, name, tp, ep)
        per = [f[:, idx] for f in fiw]  # each (3, k)
        # Per rank per micro-batch F, I, W: counts (pp, 4) against per-block costs (4, 3, k).
        block_fiw = np.stack(per)  # (4, 3, k)
        rank_fiw = np.einsum("rb,bjk->rjk", counts, block_fiw)  # (pp, 3, k)
        busy = rank_fiw.sum(axis=1)  # (pp, k)
        m = c["m"][idx]
        fwd_first = np.einsum("sb,bk->sk", first, block_fiw[:, 0, :])  # (pp, k) forward of stages 0..pp-1
        start = np.vstack([np.zeros((1, len(idx))), np.cumsum(fwd_first, axis=0)[:-1]])
        if name in POST_VALIDATION:
            pipe_lb = (m * busy).max(axis=0)
        else:
            pipe_lb = (start + m * busy).max(axis=0)
        crit = busy.argmax(axis=0)
        stage_f, stage_i, stage_w = (rank_fiw[crit, j, np.arange(len(idx))] / vpp for j in range(3))
        bubble = bubble_units(name, pp, vpp, m) * (stage_f + stage_i + stage_w) if pp > 1 else 0.0
        pipe = np.maximum(pipe_lb, m * busy.max(axis=0) + bubble) + 2 * (pp - 1) * p2p[idx]
        # Data parallelism, optimizer and memory per rank: arrays of shape (pp, k).
        cp, dp = c["cp"][idx], c["dp"][idx]
        tail = rank_tail(model, training, cluster, consts, stack, dev, tp=tp, cp=cp, ep=ep, dp=dp, zero=c["zero"][idx],
                         dp_shard=dp * cp, offload="none", overlap_grad_reduce=overlap_grad_reduce, microbatches=m,
                         p_dense=params[:, :1], p_exp=params[:, 1:], fwd_s=rank_fiw[:, 0], bwd_s=rank_fiw[:, 1] + rank_fiw[:, 2],
                         layers=counts[:, :2].sum(axis=1, keepdims=True), lowp=lowp)
        stage_act = (counts[:, :1] * act[idx, 0] + counts[:, 1:2] * act[idx, 1] + counts[:, 2:3] * act[idx, 2]) / vpp
        units = np.stack([inflight_units(name, pp, vpp, m, r) for r in range(pp)])
        activations = units * stage_act + act[idx, 4]
        activations[last_rank] += act[idx, 3]
        total = tail.states.total + tail.fixed_bytes + activations * (1 + mc.fragmentation)
        rest = np.max(tail.dp_s, axis=0) + np.max(tail.optimizer_s, axis=0) + consts.step.step_overhead_s
        lb[idx] = pipe_lb * straggle + rest
        approx[idx] = pipe * straggle + rest
        mem[idx] = np.max(total, axis=0)
    return {"step_lb_s": lb, "step_s": approx, "memory_bytes": mem}
