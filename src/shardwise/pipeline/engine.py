"""The exact timing core: a longest-path pass over the schedule's dependency graph.

Each rank runs its compute actions in IR order, one at a time; an action starts at
``max(rank free, end of its dependency + hop latency)``. Dependencies (zero-bubble paper, Qi et al.
2024, Sec. 2; the same as PyTorch's ``_simulate_comms_compute`` uses):

- ``F(s, mb)`` needs ``F(s-1, mb)``;
- ``I(s, mb)`` or ``B(s, mb)`` needs ``I/B(s+1, mb)``; the last stage needs its own ``F(S-1, mb)``;
- ``W(s, mb)`` needs ``I(s, mb)`` (same rank).

A hop costs ``p2p_s`` when the two stages live on different ranks and 0 otherwise (V placement puts
stages ``pp-1`` and ``pp`` on one rank).

Two passes. :func:`compile_schedule` runs the event loop once on the structure alone: ranks are taken
from a stack, each runs its actions until one waits on an unfinished dependency, parks on it and is
woken when it completes, so the loop is O(actions); ranks left unfinished are deadlocked. Whether a
dependency has finished when a rank reaches it depends only on which actions ran before, never on how
long they took, so that visit order is the same for every set of durations; it is cached with the
schedule (keyed by the schedule object: its micro-batch count, stages and placement). :func:`run_order`
then times one set of durations by walking that order once: each action's rank predecessor and
dependency are final when it is reached, so ``start = max(end of predecessor, end of dependency +
hop)`` is the longest path to it (a topological-order pass; Cormen et al., "Introduction to
Algorithms", 3rd ed., Sec. 24.2). The starts are those of the event loop, operation for operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, KINDS, W_CODE, Schedule


@dataclass(frozen=True)
class Compiled:
    """Dependency arrays of a schedule's compute actions, per rank (comm/marker actions dropped), and the
    order the event loop visits them in (the same for all durations: see the module docstring)."""

    num_stages: int
    microbatches: int
    index: tuple[np.ndarray, ...]  # positions of compute actions in ``Schedule.codes[r]``
    kind: tuple[np.ndarray, ...]  # kind code 0..3 (F, I, W, B)
    stage: tuple[np.ndarray, ...]
    mb: tuple[np.ndarray, ...]
    dep: tuple[list[int], ...]  # dependency action id, -1 for none
    cross: tuple[np.ndarray, ...]  # bool: dependency lives on another rank
    out: tuple[list[int], ...]  # action id this action completes
    #: per visited action, in visit order: (end slot of the rank's previous action, end slot of the
    #: dependency, hop slot, duration slot, own end slot); the slot ``sentinel`` stays 0.0 (none)
    order: list[tuple[int, int, int, int, int]] = field(repr=False, default_factory=list)
    progress: tuple[int, ...] = ()  # actions each rank completes (fewer than it has: deadlocked)
    offsets: tuple[int, ...] = ()  # rank r's actions are [offsets[r], offsets[r + 1]) in rank order
    #: rank order -> visit order (a gather turns :func:`run_order`'s starts into rank order)
    to_rank: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    slot: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))  # duration slot, rank order
    #: duration slot per rank and position, padded with slot ``4 * S`` (which holds 0) to the longest rank
    padded_slot: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    actions: tuple[np.ndarray, ...] = ()  # per rank (n, 3): stage, mb, kind (read-only, shared)
    first_dep: tuple[int, ...] = ()  # per rank with actions: end slot of its first action's dependency
    last_out: tuple[int, ...] = ()  # per rank with actions: end slot of its last action
    #: per rank with actions: visit position of its first action, of its last action, and the last one's
    #: duration slot (a rank's span from :func:`run_order`'s starts without reordering them all)
    first_visit: tuple[int, ...] = ()
    first_hop: tuple[int, ...] = ()  # per rank with actions: hop slot of its first action's dependency
    last_visit: tuple[int, ...] = ()
    last_slot: tuple[int, ...] = ()
    deadlocked: bool = False  # some rank cannot finish (progress short of its actions)

    @property
    def sentinel(self) -> int:
        return 3 * self.num_stages * self.microbatches



_COMPILED: dict[int, tuple[Schedule, Compiled]] = {}
_COMPILED_MAX = 256


def _visit_order(dep: tuple[list[int], ...], out: tuple[list[int], ...], n_ids: int) -> tuple[list[int], list[int]]:
    """The order in which the event loop completes actions: ranks are taken from a stack, each runs its
    actions in IR order until one waits on an unfinished dependency, parks on it, and is pushed back when
    that dependency completes. Whether a dependency has finished depends only on which actions ran
    before, never on their durations, so one pass over the structure gives the order for every set of
    durations. Returns the visited actions as positions in rank order (rank r's action i is
    ``sum(len(dep[q]) for q < r) + i``) and per rank how many actions completed."""
    R = len(dep)
    done = bytearray(n_ids)
    waiter = [-1] * n_ids
    ptr = [0] * R
    base = [0] * R
    for r in range(1, R):
        base[r] = base[r - 1] + len(dep[r - 1])
    visits: list[int] = []
    stack = list(range(R - 1, -1, -1))
    while stack:
        r = stack.pop()
        i = start = ptr[r]
        dep_r, out_r = dep[r], out[r]
        n = len(dep_r)
        while i < n:
            d = dep_r[i]
            if d >= 0 and not done[d]:
                waiter[d] = r
                break
            o = out_r[i]
            done[o] = 1
            if waiter[o] >= 0:
                stack.append(waiter[o])
                waiter[o] = -1
            i += 1
        visits.extend(range(base[r] + start, base[r] + i))
        ptr[r] = i
    return visits, ptr


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, dtype=np.int64)


def compile_schedule(sched: Schedule) -> Compiled:
    """Compile (and cache) the dependency arrays and visit order of ``sched``; raises on out-of-range
    indices."""
    hit = _COMPILED.get(id(sched))
    if hit is not None and hit[0] is sched:
        return hit[1]
    S, M = sched.num_stages, sched.microbatches
    SM = S * M
    s2r = np.asarray(sched.stage_to_rank, dtype=np.int64)
    idx_l, kind_l, stage_l, mb_l, dep_l, cross_l, out_l, lat_l = [], [], [], [], [], [], [], []
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
        # hop slot: 0 (no hop) or 1 + the stage boundary the dependency crosses (below the stage for F,
        # above it for I/B); see simulate's latency table
        boundary = np.clip(np.where(is_f, ss - 1, ss), 0, max(S - 2, 0))
        lat_l.append(np.where(cross, 1 + boundary, 0).astype(np.int64))
        idx_l.append(sel)
        kind_l.append(kk)
        stage_l.append(ss)
        mb_l.append(mm)
        dep_l.append(dep.tolist())
        cross_l.append(cross)
        out_l.append(out.tolist())
    n_ids = 3 * SM
    sentinel = n_ids
    visits, progress = _visit_order(tuple(dep_l), tuple(out_l), n_ids)
    counts = [len(d) for d in dep_l]
    offsets = [0]
    for n in counts:
        offsets.append(offsets[-1] + n)
    # per action in rank order, then taken in visit order: (end slot of the rank's previous action,
    # of the dependency, hop slot, duration slot, own end slot)
    pos = np.asarray(visits, dtype=np.int64)
    out_all = _concat([np.asarray(o, dtype=np.int64) for o in out_l])
    prev_all = np.empty_like(out_all)
    prev_all[1:] = out_all[:-1]
    prev_all[[offsets[r] for r in range(len(counts)) if counts[r]]] = sentinel  # a rank's first action
    dep_all = _concat([np.asarray(d, dtype=np.int64) for d in dep_l])
    dep_all = np.where(dep_all >= 0, dep_all, sentinel)
    lat_all = _concat(lat_l)
    slot_all = _concat([kk * S + ss for kk, ss in zip(kind_l, stage_l)])
    order = list(zip(prev_all[pos].tolist(), dep_all[pos].tolist(), lat_all[pos].tolist(), slot_all[pos].tolist(),
                     out_all[pos].tolist()))
    to_rank = np.zeros(offsets[-1], dtype=np.int64)
    to_rank[pos] = np.arange(len(visits))
    slot_l = [slot_all[offsets[r]:offsets[r + 1]] for r in range(len(counts))]
    flat_slot = slot_all
    padded = np.full((len(counts), max(counts, default=0)), 4 * S, dtype=np.int64)
    for r, sl in enumerate(slot_l):
        padded[r, :len(sl)] = sl
    acts = []
    for kk, ss, mm in zip(kind_l, stage_l, mb_l):
        a = np.stack([ss, mm, kk], axis=1) if len(kk) else np.zeros((0, 3), dtype=np.int64)
        a.flags.writeable = False
        acts.append(a)
    first_dep = tuple(dep_l[r][0] if dep_l[r][0] >= 0 else sentinel for r in range(len(counts)) if counts[r])
    last_out = tuple(out_l[r][-1] for r in range(len(counts)) if counts[r])
    nonempty = [r for r in range(len(counts)) if counts[r]]
    first_visit = tuple(to_rank[[offsets[r] for r in nonempty]].tolist())
    last_visit = tuple(to_rank[[offsets[r + 1] - 1 for r in nonempty]].tolist())
    last_slot = tuple(slot_all[[offsets[r + 1] - 1 for r in nonempty]].tolist())
    first_hop = tuple(lat_all[[offsets[r] for r in nonempty]].tolist())
    comp = Compiled(S, M, tuple(idx_l), tuple(kind_l), tuple(stage_l), tuple(mb_l), tuple(dep_l),
                    tuple(cross_l), tuple(out_l), order, tuple(progress), tuple(offsets), to_rank, flat_slot, padded,
                    tuple(acts), first_dep, last_out, first_visit, first_hop, last_visit, last_slot,
                    any(p < n for p, n in zip(progress, counts)))
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[id(sched)] = (sched, comp)
    return comp


def run_order(order: list[tuple[int, int, int, int, int]], durations: list[float], hops: list[float], sentinel: int) -> list[float]:
    """Start time of every visited action, in visit order (:attr:`Compiled.order`). ``durations[slot]``
    (slot ``kind * S + stage``), ``hops[slot]`` (slot 0 must be 0.0). An action starts at ``max(end of
    the rank's previous action, end of its dependency + hop)``, both final when it is reached."""
    end = [0.0] * (sentinel + 1)  # end[sentinel] stays 0.0
    starts: list[float] = []
    put = starts.append
    for p, d, h, k, o in order:
        t = end[p]
        e = end[d] + hops[h]
        if e > t:  # noqa: PLR1730 - an if is faster than max() in this loop
            t = e
        put(t)
        end[o] = t + durations[k]
    return starts


def run_order_pair(order: list[tuple[int, int, int, int, int]], durations: list[float], hops: list[float],
                   sentinel: int) -> tuple[list[float], list[float]]:
    """:func:`run_order` and, in the same walk, the timing with every hop free: returns the starts with
    hops and the end of every action without (indexed by end slot), each the value a separate pass
    computes."""
    end = [0.0] * (sentinel + 1)
    free = [0.0] * (sentinel + 1)
    starts: list[float] = []
    put = starts.append
    for p, d, h, k, o in order:
        t = end[p]
        e = end[d] + hops[h]
        if e > t:  # noqa: PLR1730
            t = e
        put(t)
        dk = durations[k]
        end[o] = t + dk
        t = free[p]
        e = free[d]
        if e > t:  # noqa: PLR1730
            t = e
        free[o] = t + dk
    return starts, free


def run_order_ends(order: list[tuple[int, int, int, int, int]], durations: list[float], hops: list[float],
                   sentinel: int) -> tuple[list[float], list[float]]:
    """:func:`run_order_pair` without the per-action starts: the end of every action with hops and without,
    indexed by end slot (what a summary needs; recording each start costs a tenth of the walk)."""
    end = [0.0] * (sentinel + 1)
    free = [0.0] * (sentinel + 1)
    for p, d, h, k, o in order:
        t = end[p]
        e = end[d] + hops[h]
        dk = durations[k]
        end[o] = (e if e > t else t) + dk  # no start to keep: the conditional expression, faster than max()
        t = free[p]
        e = free[d]
        free[o] = (e if e > t else t) + dk
    return end, free


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
