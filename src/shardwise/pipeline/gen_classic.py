"""Generators for the looped-placement schedules: GPipe, 1F1B, interleaved 1F1B, looped BFS, ZB-H1.

Each returns per-rank flat action lists ``[stage, mb, kind, ...]``; :mod:`.registry` wraps them into a
:class:`~shardwise.pipeline.ir.Schedule`. Stage ``s`` lives on rank ``s % pp``.
"""

from __future__ import annotations

from collections import deque

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, W_CODE


def gpipe(pp: int, m: int) -> list[list[int]]:
    """GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using Pipeline
    Parallelism"): all forwards, then all (fused) backwards. Activation memory grows with m."""
    ranks = []
    for r in range(pp):
        acts: list[int] = []
        for k in range(m):
            acts += (r, k, F_CODE)
        for k in range(m):
            acts += (r, k, B_CODE)
        ranks.append(acts)
    return ranks


def looped_bfs(pp: int, m: int, vpp: int) -> list[list[int]]:
    """Looped breadth-first (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism", as in PyTorch's
    ``ScheduleLoopedBFS``): each rank runs all micro-batches through one local stage before the next,
    forwards in stage order, then fused backwards in reverse stage and micro-batch order."""
    ranks = []
    for r in range(pp):
        stages = [c * pp + r for c in range(vpp)]
        acts: list[int] = []
        for s in stages:
            for k in range(m):
                acts += (s, k, F_CODE)
        for s in reversed(stages):
            for k in range(m - 1, -1, -1):
                acts += (s, k, B_CODE)
        ranks.append(acts)
    return ranks


def interleave_group(pp: int, m: int) -> int:
    """Micro-batches per round in the depth-first interleaved order.

    Megatron-LM (Narayanan et al. 2021) needs ``m % pp == 0`` and uses groups of ``pp``. PyTorch's
    ``ScheduleInterleaved1F1B`` relaxes it: ``rounds = max(1, m // pp)``, group ``m // rounds``, valid
    when ``m % rounds == 0`` (equal to Megatron's whenever ``m % pp == 0``). We use the relaxed rule.
    """
    rounds = max(1, m // pp)
    if m % rounds:
        ok = [x for x in range(max(1, m - 2 * pp), m + 2 * pp + 1) if x % max(1, x // pp) == 0]
        raise ShardwiseError(
            f"interleaved schedules group micro-batches in rounds of about pp: with pp={pp} and "
            f"microbatches={m} there are {rounds} rounds, which do not divide {m}. Use a multiple of pp "
            f"(as Megatron-LM requires) or one of {ok[:8]}"
        )
    return m // rounds


def one_f_one_b(pp: int, m: int, vpp: int = 1, zero_bubble: bool = False, group: int | None = None) -> list[list[int]]:
    """1F1B and its interleaved / zero-bubble variants.

    - ``vpp == 1``, fused: 1F1B (PipeDream-flush; Narayanan et al. 2021, Sec. 2.2.1): rank ``r`` runs
      ``pp-1-r`` warm-up forwards, then one forward / one backward, then the remaining backwards.
    - ``vpp >= 2``, fused: interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2): depth-first order over
      local chunks in groups of ``group`` micro-batches (N; default :func:`interleave_group`); warm-up
      ``(vpp-1)*N + 2*(pp-1-r)`` (Megatron-LM's formula, ``get_pp_rank_microbatches``). The order is
      Megatron-LM's schedule table (``get_schedule_table``): each group of N micro-batches through every
      chunk, the last group taking what is left. Megatron-LM admits pp <= N <= m; Llama 3 (Dubey et al.
      2024 Sec. 3.3.2) makes N tunable below pp too ("fewer micro-batches than stages"), at the price of
      dependency waits, which the simulation times.
    - ``zero_bubble``: ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2.1, Fig. 3 top):
      backward split into I and W; warm-up ``(vpp-1)*N + (pp-1-r)``; rank ``r`` delays its W passes
      by ``r`` steps so every rank keeps 1F1B's in-flight count. With ``vpp >= 2`` this is PyTorch's
      ``ScheduleInterleavedZeroBubble``.
    """
    if group is not None and not 1 <= group <= m:
        raise ShardwiseError(f"microbatch_group must be in 1..{m} (the micro-batches of a step); got {group}")
    g = (group or interleave_group(pp, m)) if vpp > 1 else m
    if vpp > 1 and 0 < m % g < pp:
        raise ShardwiseError(
            f"microbatch_group {g}: the last group would hold {m % g} micro-batches, fewer than pp={pp}, and the "
            f"depth-first order would wait on itself (Megatron-LM refuses it too); use a group that divides the "
            f"{m} micro-batches or leaves at least pp over")
    table = schedule_table(m, vpp, g)
    return [_one_f_one_b_rank(pp, vpp, g, table, zero_bubble, r) for r in range(pp)]


def schedule_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in forward order: each group of `group` micro-batches through every chunk in
    turn, the last group the micro-batches left (Megatron-LM ``get_schedule_table``)."""
    table: list[tuple[int, int]] = []
    for start in range(0, m, group):
        end = m if start + group >= m else start + group
        table += [(k, c) for c in range(vpp) for k in range(start, end)]
    return table


def _one_f_one_b_rank(pp: int, vpp: int, g: int, table: list[tuple[int, int]], zero_bubble: bool, r: int) -> list[int]:
    """Rank ``r``'s order for :func:`one_f_one_b` (group size ``g``, forward order ``table``)."""
    total = len(table)
    m = total // vpp
    bwd_kind = I_CODE if zero_bubble else B_CODE
    # Below N = pp - 1 the ranks' warm-ups may differ by at most what one group covers (2N slots of 1F1B):
    # else rank 0's warm-up waits for a forward that rank pp-1 reaches only after a backward rank 0 holds.
    lag = min(pp - 1 - r, g)
    if vpp == 1 and not zero_bubble:
        warm = min(pp - 1 - r, m)
    elif zero_bubble:
        warm = min((vpp - 1) * g + lag, total)
    else:
        warm = min((vpp - 1) * g + 2 * lag, total)

    def order(k: int, backward: bool) -> tuple[int, int]:
        mb, chunk = table[k]
        if backward:
            chunk = vpp - 1 - chunk
        return chunk * pp + r, mb

    acts: list[int] = []
    pending: deque[tuple[int, int]] = deque()

    def backward(j: int) -> None:
        s, k = order(j, True)
        acts.extend((s, k, bwd_kind))
        if zero_bubble:
            pending.append((s, k))
            if j >= r:  # ZB-H1: rank r starts its W passes r steps late
                ws, wk = pending.popleft()
                acts.extend((ws, wk, W_CODE))

    for k in range(warm):
        acts.extend((*order(k, False), F_CODE))
    for j in range(total - warm):
        acts.extend((*order(warm + j, False), F_CODE))
        backward(j)
    for j in range(total - warm, total):
        backward(j)
    while pending:
        ws, wk = pending.popleft()
        acts.extend((ws, wk, W_CODE))
    return acts


def zb_h2(pp: int, m: int) -> list[list[int]]:
    """ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2.2, Fig. 3 bottom): rank ``r`` warms
    up with ``2(pp-1-r)`` extra forwards (so up to ``2pp-1`` micro-batches in flight), then runs F, I and
    W per micro-batch with W held back until ``2(pp-1)`` steps in, the deferred W passes filling the
    tail. This is the authors' hand schedule (``get_hand_schedule(warmup_c=2)`` in their repository's
    ``efficiency.py``), with the warm-up capped at ``m`` so any ``m >= 1`` works; the per-rank span is
    ``m(F+B+W) + (pp-1)(F + B + 2 T_comm - 2W)`` for their profiled times, 0 bubble at F = B = W."""
    ranks = []
    for r in range(pp):
        warm = min(2 * (pp - r - 1), m)
        acts: list[int] = []
        nf = nw = 0
        for _ in range(warm):
            acts += (r, nf, F_CODE)
            nf += 1
        for i in range(m):
            if warm + i < m:
                acts += (r, nf, F_CODE)
                nf += 1
            acts += (r, i, I_CODE)
            if warm + i >= 2 * (pp - 1):
                acts += (r, nw, W_CODE)
                nw += 1
        for k in range(nw, m):
            acts += (r, k, W_CODE)
        ranks.append(acts)
    return ranks
