"""The exact timing core: a longest-path pass over the schedule's dependency graph.

Each rank runs its compute actions in IR order, one at a time; an action starts at
``max(rank free, end of its dependency + hop latency)``. Dependencies (zero-bubble paper, Qi et al.
2024, Sec. 2; the same as PyTorch's ``_simulate_comms_compute`` uses):

- ``F(s, mb)`` needs ``F(s-1, mb)``;
- ``I(s, mb)`` or ``B(s, mb)`` needs ``I/B(s+1, mb)``; the last stage needs its own ``F(S-1, mb)``;
- ``W(s, mb)`` needs ``I(s, mb)`` (same rank).

A hop costs ``p2p_s`` when the two stages live on different ranks and 0 otherwise (V placement puts
stages ``pp-1`` and ``pp`` on one rank). Each action is visited once; a rank blocked on an unfinished
dependency parks itself on it and is woken when it completes, so the pass is O(actions). Ranks left
unfinished at the end are deadlocked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, KINDS, W_CODE, Schedule


@dataclass(frozen=True)
class Compiled:
    """Dependency arrays of a schedule's compute actions, per rank (comm/marker actions dropped)."""

    num_stages: int
    microbatches: int
    index: tuple[np.ndarray, ...]  # positions of compute actions in ``Schedule.codes[r]``
    kind: tuple[np.ndarray, ...]  # kind code 0..3 (F, I, W, B)
    stage: tuple[np.ndarray, ...]
    mb: tuple[np.ndarray, ...]
    dep: tuple[list[int], ...]  # dependency action id, -1 for none
    cross: tuple[np.ndarray, ...]  # bool: dependency lives on another rank
    out: tuple[list[int], ...]  # action id this action completes


_COMPILED: dict[int, tuple[Schedule, Compiled]] = {}


def compile_schedule(sched: Schedule) -> Compiled:
    """Compile (and cache) the dependency arrays of ``sched``; raises on out-of-range indices."""
    hit = _COMPILED.get(id(sched))
    if hit is not None and hit[0] is sched:
        return hit[1]
    S, M = sched.num_stages, sched.microbatches
    SM = S * M
    s2r = np.asarray(sched.stage_to_rank, dtype=np.int64)
    idx_l, kind_l, stage_l, mb_l, dep_l, cross_l, out_l = [], [], [], [], [], [], []
    for rank, arr in enumerate(sched.codes):
        k = arr[:, 2] if len(arr) else np.zeros(0, dtype=np.int32)
        sel = np.nonzero(k <= B_CODE)[0]
        kk = arr[sel, 2].astype(np.int64)
        ss = arr[sel, 0].astype(np.int64)
        mm = arr[sel, 1].astype(np.int64)
        bad = (ss < 0) | (ss >= S) | (mm < 0) | (mm >= M)
        if bad.any():
            j = int(np.nonzero(bad)[0][0])
            raise ShardwiseError(
                f"rank {rank} action {ss[j]}{KINDS[kk[j]].value}{mm[j]} is out of range: stages are 0..{S - 1} "
                f"and micro-batches 0..{M - 1}; fix the index or the micro-batch count"
            )
        wrong = s2r[ss] != rank
        if wrong.any():
            j = int(np.nonzero(wrong)[0][0])
            raise ShardwiseError(
                f"rank {rank} runs stage {ss[j]} but the stage-to-rank map puts stage {ss[j]} on rank "
                f"{s2r[ss[j]]}; move the action or fix the map"
            )
        is_f = kk == F_CODE
        is_bwd = (kk == I_CODE) | (kk == B_CODE)
        is_w = kk == W_CODE
        dep = np.full(len(sel), -1, dtype=np.int64)
        cross = np.zeros(len(sel), dtype=bool)
        f_up = is_f & (ss > 0)
        dep[f_up] = (ss[f_up] - 1) * M + mm[f_up]
        cross[f_up] = s2r[ss[f_up] - 1] != rank
        b_mid = is_bwd & (ss < S - 1)
        dep[b_mid] = SM + (ss[b_mid] + 1) * M + mm[b_mid]
        cross[b_mid] = s2r[np.minimum(ss[b_mid] + 1, S - 1)] != rank
        b_last = is_bwd & (ss == S - 1)
        dep[b_last] = (S - 1) * M + mm[b_last]
        dep[is_w] = SM + ss[is_w] * M + mm[is_w]
        slot = np.where(is_f, 0, np.where(is_w, 2, 1))
        out = slot * SM + ss * M + mm
        idx_l.append(sel)
        kind_l.append(kk)
        stage_l.append(ss)
        mb_l.append(mm)
        dep_l.append(dep.tolist())
        cross_l.append(cross)
        out_l.append(out.tolist())
    comp = Compiled(S, M, tuple(idx_l), tuple(kind_l), tuple(stage_l), tuple(mb_l), tuple(dep_l),
                    tuple(cross_l), tuple(out_l))
    if len(_COMPILED) > 64:
        _COMPILED.clear()
    _COMPILED[id(sched)] = (sched, comp)
    return comp


def run(comp: Compiled, durations: list[list[float]], latencies: list[list[float]]) -> tuple[list[list[float]], list[int]]:
    """Time every compute action. Returns ``(starts, progress)``: per rank the start times (list) and
    how many actions completed (``progress[r] < len`` means rank ``r`` is deadlocked)."""
    R = len(comp.dep)
    end = [-1.0] * (3 * comp.num_stages * comp.microbatches)
    waiter = [-1] * len(end)
    ptr = [0] * R
    tfree = [0.0] * R
    starts = [[0.0] * len(d) for d in comp.dep]
    ctx = [(comp.dep[r], comp.out[r], durations[r], latencies[r], starts[r], len(comp.dep[r])) for r in range(R)]
    stack = list(range(R - 1, -1, -1))
    pop, push = stack.pop, stack.append
    while stack:
        r = pop()
        i, t = ptr[r], tfree[r]
        dep_r, out_r, dur_r, lat_r, st, n = ctx[r]
        while i < n:
            d = dep_r[i]
            if d >= 0:
                e = end[d]
                if e < 0.0:
                    waiter[d] = r
                    break
                e += lat_r[i]
                if e > t:  # noqa: PLR1730 - an if is faster than max() in this loop
                    t = e
            st[i] = t
            t += dur_r[i]
            o = out_r[i]
            end[o] = t
            if waiter[o] >= 0:
                push(waiter[o])
                waiter[o] = -1
            i += 1
        ptr[r] = i
        tfree[r] = t
    return starts, ptr


def blocked_actions(sched: Schedule, comp: Compiled, progress: list[int]) -> list[str]:
    """Describe, per deadlocked rank, the action it is stuck on and what that action waits for."""
    out = []
    for r, p in enumerate(progress):
        if p >= len(comp.dep[r]):
            continue
        k, s, m = int(comp.kind[r][p]), int(comp.stage[r][p]), int(comp.mb[r][p])
        d = comp.dep[r][p]
        SM, M = comp.num_stages * comp.microbatches, comp.microbatches
        slot, rest = divmod(d, SM)
        ds, dm = divmod(rest, M)
        dk = ("F", "I/B", "W")[slot]
        out.append(f"rank {r} waits at {s}{KINDS[k].value}{m} for {ds}{dk}{dm}")
    return out
