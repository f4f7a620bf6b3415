"""Memory-capped greedy list scheduling: the zero-bubble paper's heuristic (Qi et al. 2024, Sec. 3.1).

Time advances event by event. Whenever a rank is free it starts, in this priority:

1. an input-gradient pass I whose dependency is done (I is on the critical path);
2. a forward F whose input has arrived, if the rank's activation memory stays within its cap;
3. a pending weight-gradient pass W (W fills what would otherwise be a bubble, and frees memory).

Memory is counted with a reservation so that multi-stage placements cannot deadlock: admitting a
micro-batch on a rank (its forward on the rank's first local stage) reserves that micro-batch's
activations for all local stages. The oldest unfinished micro-batch can then always progress, so any cap
of at least one micro-batch per rank completes. ``lookahead`` makes a rank hold back an F or W that would
still be running when a known I becomes ready (the paper's "allow bubble before B" switch).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import F_CODE, I_CODE, W_CODE

INF = float("inf")


@dataclass(frozen=True)
class Policy:
    """Knobs of the greedy: ``lookahead`` (see module doc), ``depth_first`` (prefer the later local
    stage among ready forwards, as interleaved 1F1B does; else the earlier one, breadth-first),
    ``warmup_step``: when > 0, rank ``r`` admits at most ``cap - warmup_step * r`` micro-batches before
    its first I (the paper's rule that each stage warms up with fewer forwards than the one before;
    1 gives ZB-H1's staircase, 2 ZB-H2's); ``warmup_to_first_i``: before its first I a rank admits a
    forward only if it ends before that I can arrive, computed from the pass times as if nothing waited
    (the paper's warm-up rule, its "no bubble before the first B")."""

    lookahead: bool = False
    depth_first: bool = True
    warmup_step: int = 0
    warmup_to_first_i: bool = False


def greedy_order(
    pp: int,
    m: int,
    stage_to_rank: Sequence[int],
    f: np.ndarray,
    i: np.ndarray,
    w: np.ndarray,
    p2p_s: float,
    activation: np.ndarray,
    cap: Sequence[float],
    w_retained_fraction: float = 1.0,
    policy: Policy = Policy(),
) -> list[list[int]]:
    """Per-rank flat action lists ``[stage, mb, kind, ...]`` built by the greedy (see module doc).

    ``cap[r]`` is rank ``r``'s activation cap in the units of ``activation``. Raises
    :class:`ShardwiseError` when a cap is below one micro-batch of the rank's stages.
    """
    S = len(stage_to_rank)
    s2r = list(stage_to_rank)
    local = [[s for s in range(S) if s2r[s] == r] for r in range(pp)]
    a = [float(x) for x in activation]
    rho = float(w_retained_fraction)
    resv = [sum(a[s] for s in local[r]) for r in range(pp)]
    for r in range(pp):
        if cap[r] + 1e-12 < resv[r]:
            raise ShardwiseError(
                f"memory cap {cap[r]:g} on rank {r} is below one micro-batch of its stages ({resv[r]:g}); "
                "raise the cap to at least one micro-batch"
            )
    first = [loc[0] for loc in local]
    warm_left = [INF] * pp  # admissions allowed before the rank's first I
    if policy.warmup_step > 0:
        for r in range(pp):
            warm_left[r] = max(1, int((cap[r] + 1e-9) // resv[r]) - policy.warmup_step * r)
    started_i = [False] * pp
    first_i_at = [INF] * pp  # earliest arrival of micro-batch 0's I on each rank, nothing waiting
    if policy.warmup_to_first_i:
        t_f = 0.0
        for s in range(S):
            t_f += (p2p_s if s > 0 and s2r[s - 1] != s2r[s] else 0.0) + float(f[s])
        t_i = t_f
        for s in range(S - 1, -1, -1):
            first_i_at[s2r[s]] = min(first_i_at[s2r[s]], t_i)
            t_i += float(i[s]) + (p2p_s if s > 0 and s2r[s - 1] != s2r[s] else 0.0)
    lat = [[0.0] * S for _ in range(2)]  # lat[0][s]: hop into F(s); lat[1][s]: hop into I(s)
    for s in range(S):
        lat[0][s] = p2p_s if s > 0 and s2r[s - 1] != s2r[s] else 0.0
        lat[1][s] = p2p_s if s < S - 1 and s2r[s + 1] != s2r[s] else 0.0
    fl, il, wl = [float(x) for x in f], [float(x) for x in i], [float(x) for x in w]
    ready_f = [[INF] * m for _ in range(S)]
    ready_i = [[INF] * m for _ in range(S)]
    ready_f[0] = [0.0] * m
    next_f, next_i = [0] * S, [0] * S
    wq: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    wq_head = [0] * pp
    mem = [0.0] * pp
    free_at = [0.0] * pp
    order: list[list[int]] = [[] for _ in range(pp)]
    heap = [(0.0, r, r) for r in range(pp)]
    seq = pp
    remaining = 3 * S * m
    f_order = [sorted(loc, reverse=policy.depth_first) for loc in local]

    pop, push = heapq.heappop, heapq.heappush
    lookahead = policy.lookahead
    while heap:
        t, _, r = pop(heap)
        if t < free_at[r]:
            continue
        # candidate input-gradient pass: the earliest-ready one
        best_i, t_next_i = -1, INF
        for s in local[r]:
            k = next_i[s]
            if k < next_f[s]:
                ri = ready_i[s][k]
                if ri <= t and (best_i < 0 or ri < ready_i[best_i][next_i[best_i]]):
                    best_i = s
                elif t < ri < t_next_i:
                    t_next_i = ri
        choice = None
        if best_i >= 0:
            choice = (best_i, next_i[best_i], I_CODE)
        else:
            for s in f_order[r]:
                k = next_f[s]
                if k < m and ready_f[s][k] <= t:
                    if s == first[r] and (mem[r] + resv[r] > cap[r] + 1e-12 or (not started_i[r] and (
                            warm_left[r] <= 0 or (mem[r] > 0 and t + fl[s] > first_i_at[r] + 1e-12)))):
                        continue
                    if lookahead and t + fl[s] > t_next_i:
                        continue
                    choice = (s, k, F_CODE)
                    break
            if choice is None and wq_head[r] < len(wq[r]):
                s, k = wq[r][wq_head[r]]
                if not (lookahead and t + wl[s] > t_next_i and t_next_i < INF):
                    choice = (s, k, W_CODE)
                    wq_head[r] += 1
        if choice is None:
            if t_next_i < INF:
                push(heap, (t_next_i, seq, r))
                seq += 1
            continue
        s, k, kind = choice
        order[r] += choice
        remaining -= 1
        if kind == F_CODE:
            end = t + fl[s]
            next_f[s] += 1
            if s == first[r]:
                mem[r] += resv[r]
                warm_left[r] -= 1
            if s < S - 1:
                ready = ready_f[s + 1][k] = end + lat[0][s + 1]
                r2 = s2r[s + 1]
                if free_at[r2] <= ready:  # a busy rank re-decides when it frees up anyway
                    push(heap, (ready, seq, r2))
                    seq += 1
            else:
                ready_i[s][k] = end
        elif kind == I_CODE:
            end = t + il[s]
            next_i[s] += 1
            started_i[r] = True
            mem[r] -= (1.0 - rho) * a[s]
            wq[r].append((s, k))
            if s > 0:
                ready = ready_i[s - 1][k] = end + lat[1][s - 1]
                r2 = s2r[s - 1]
                if free_at[r2] <= ready:
                    push(heap, (ready, seq, r2))
                    seq += 1
        else:
            end = t + wl[s]
            mem[r] -= rho * a[s]
        free_at[r] = end
        push(heap, (end, seq, r))
        seq += 1

    if remaining:
        raise ShardwiseError(
            f"the greedy scheduler could not place {remaining} passes under memory caps {list(cap)}; "
            "raise the memory cap"
        )
    return order
