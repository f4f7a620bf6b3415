"""V-shaped schedules: two stages per rank, rank ``r`` holds stages ``r`` and ``2pp-1-r``.

- ZB-V: the handcrafted zero-bubble V schedule (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
  Sec. 6; the order PyTorch's ``ScheduleZBVZeroBubble`` emits).
- V-Half and V-Min (Qi, Wan, Amar, Lin 2024, "Pipeline Parallelism with Controllable Memory",
  NeurIPS 2024, Sec. 4): a building block of four passes per rank repeated every 6 unit slots; the
  block's lifespan sets the activation memory (about 1/2 and 1/3 of 1F1B). W passes fill the free slots
  of the repeated pattern, oldest first, and each rank runs its passes in slot order.
"""

from __future__ import annotations

from collections import deque
from itertools import accumulate

from shardwise.pipeline.ir import F_CODE, I_CODE, W_CODE


def zbv(pp: int, m: int) -> list[list[int]]:
    """ZB-V (Qi et al. 2024, Sec. 6): warm-up ``2(pp-r)-1`` forwards of chunk 0, then ``r`` pairs of
    chunk-1/chunk-0 forwards, then ``pp-r`` F-I-W triples of chunk 1, a steady phase alternating the
    chunks (F, I, W each), and a cool-down that interleaves the I passes and drains W. Built for
    ``max(m, 2pp-1)`` micro-batches and trimmed to ``m``, as PyTorch does, so any ``m >= 1`` works."""
    n = max(2 * pp - 1, m)
    ranks = []
    for r in range(pp):
        s0, s1 = r, 2 * pp - 1 - r
        acts: list[tuple[int, int, int]] = []
        f0 = f1 = b0 = b1 = 0
        for _ in range(2 * (pp - r) - 1):
            acts.append((s0, f0, F_CODE))
            f0 += 1
        for _ in range(r):
            acts.append((s1, f1, F_CODE))
            f1 += 1
            acts.append((s0, f0, F_CODE))
            f0 += 1
        for _ in range(pp - r):
            acts += [(s1, f1, F_CODE), (s1, b1, I_CODE), (s1, b1, W_CODE)]
            f1 += 1
            b1 += 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                acts.append((s0, f0, F_CODE))
                f0 += 1
            acts += [(s0, b0, I_CODE), (s0, b0, W_CODE)]
            b0 += 1
            acts += [(s1, f1, F_CODE), (s1, b1, I_CODE), (s1, b1, W_CODE)]
            f1 += 1
            b1 += 1
        w0, w1 = b0, b1
        for _ in range(r):
            acts += [(s0, b0, I_CODE), (s1, b1, I_CODE)]
            b0 += 1
            b1 += 1
        for _ in range(pp - r):
            acts += [(s0, b0, I_CODE), (s0, w0, W_CODE)]
            b0 += 1
            w0 += 1
        acts += [(s1, k, W_CODE) for k in range(w1, b1)]
        acts += [(s0, k, W_CODE) for k in range(w0, b0)]
        ranks.append([v for a in acts if a[1] < m for v in a])
    return ranks


def _pattern_v_min(d: int) -> list[tuple[int, int, int, int]]:
    """Slots of (F chunk 0, F chunk 1, B chunk 1, B chunk 0) for micro-batch 0 on each rank (V-Min)."""
    gap = 2 if d % 3 == 0 else 0
    return [(i, 2 * d - i - 1, 2 * d + gap + i, 4 * d + gap - i - 1) for i in range(d)]


def _pattern_v_half(d: int) -> list[tuple[int, int, int, int]]:
    """Slots of (F chunk 0, F chunk 1, B chunk 1, B chunk 0) for micro-batch 0 on each rank (V-Half)."""
    gap = 3 if d % 2 == 0 else 0
    return [(2 * i, 3 * d - i - 2, 3 * d + gap + 2 * i - 1, 6 * d + gap - i - 2) for i in range(d)]


PATTERN_PERIOD = 6  # unit slots per micro-batch per rank: F, I, W for each of the two chunks


def v_pattern(pp: int, m: int, kind: str, squeeze: bool = True) -> list[list[int]]:
    """V-Half (``kind="half"``) or V-Min (``kind="min"``) from the paper's building block.

    Micro-batch ``k``'s passes on rank ``r`` sit at the pattern slots + ``6k``; W passes take the free
    slots in I order. The peak in-flight count follows from the block's lifespan (paper Sec. 3). With
    ``squeeze`` the warm-up and cool-down are compacted as in the paper (Sec. 4, "squeeze"): passes
    before rank 0's first chunk-0 backward and after its last forward move to the earliest free slot their
    dependencies allow, when that does not raise the peak memory; the steady phase keeps the pattern."""
    pattern = _pattern_v_min(pp) if kind == "min" else _pattern_v_half(pp)
    # per rank, slot of op j*m + k (types j: 0 F chunk 0, 1 F chunk 1, 2 I chunk 1, 3 I chunk 0) and of
    # W number n at 4m + n; w_src[r][n] is the op index of the I that W n completes
    slot: list[list[int]] = []
    w_src: list[list[int]] = []
    for offs in pattern:
        row = [offs[j] + PATTERN_PERIOD * k for j in range(4) for k in range(m)]
        taken = set(row)
        i_ops = sorted(range(2 * m, 4 * m), key=row.__getitem__)
        src, w_slots = [], []
        t, n_i = 0, 0
        while len(w_slots) < 2 * m:
            if t in taken:
                t += 1
                continue
            while n_i < 2 * m and row[i_ops[n_i]] < t:
                n_i += 1
            if n_i > len(w_slots):  # an I finished before this free slot is still waiting for its W
                src.append(i_ops[len(w_slots)])
                w_slots.append(t)
            t += 1
        slot.append(row + w_slots)
        w_src.append(src)
    if squeeze:
        _squeeze(pp, m, slot, w_src)
    ranks = []
    for r in range(pp):
        stages = (r, 2 * pp - 1 - r, 2 * pp - 1 - r, r)
        kinds = (F_CODE, F_CODE, I_CODE, I_CODE)
        acts: list[int] = []
        for op in sorted(range(6 * m), key=slot[r].__getitem__):
            if op >= 4 * m:
                j, k = divmod(w_src[r][op - 4 * m], m)
                acts += (stages[j], k, W_CODE)
            else:
                j, k = divmod(op, m)
                acts += (stages[j], k, kinds[j])
        ranks.append(acts)
    return ranks


def _squeeze(pp: int, m: int, slot: list[list[int]], w_src: list[list[int]]) -> None:
    """Move warm-up and cool-down passes to earlier free slots without raising the peak memory."""
    horizon = max(max(row) for row in slot) + 2
    used = [bytearray(horizon) for _ in range(pp)]
    mem = []  # in-flight micro-batches (F to W) per slot
    for r in range(pp):
        delta = [0] * horizon
        for op, t in enumerate(slot[r]):
            used[r][t] = 1
            if op < 2 * m:
                delta[t] += 1
            elif op >= 4 * m:
                delta[t] -= 1
        mem.append(list(accumulate(delta)))
    peak = max(max(row) for row in mem)

    def dep_slot(r: int, op: int) -> int:
        if op >= 4 * m:
            n = op - 4 * m
            d = slot[r][w_src[r][n]]
            return max(d, slot[r][op - 1]) + 1 if n > 0 else d + 1
        j, k = divmod(op, m)
        d = slot[r][op - 1] if k > 0 else -1
        if j == 0:
            up = slot[r - 1][op] if r > 0 else -1
        elif j == 1:
            up = slot[r + 1][op] if r < pp - 1 else slot[r][k]
        elif j == 2:
            up = slot[r - 1][op] if r > 0 else slot[r][m + k]
        else:
            up = slot[r + 1][op] if r < pp - 1 else slot[r][2 * m + k]
        return max(d, up) + 1

    # rank 0's first chunk-0 backward opens the steady phase and its last forward closes it; passes are
    # handled in slot order (then rank, type, micro-batch) and only those outside that phase may move
    start = (slot[0][3 * m], 0, 3 * m)
    end = (slot[0][m - 1], 0, m - 1)
    movable = sorted(
        key for r in range(pp) for op in range(6 * m) if (key := (slot[r][op], r, op)) < start or key > end
    )
    for t, r, op in movable:
        lo = dep_slot(r, op)
        row, busy = mem[r], used[r]
        is_f = op < 2 * m
        for t2 in range(lo, t):
            if busy[t2] or (is_f and max(row[t2:t]) + 1 > peak):
                continue
            busy[t], busy[t2] = 0, 1
            if is_f or op >= 4 * m:
                d = 1 if is_f else -1
                for x in range(t2, t):
                    row[x] += d
            slot[r][op] = t2
            break


def pattern_is_collision_free(pp: int, kind: str) -> bool:
    """True when the four passes of the block occupy distinct slots modulo the period on every rank."""
    pattern = _pattern_v_min(pp) if kind == "min" else _pattern_v_half(pp)
    return all(len({o % PATTERN_PERIOD for o in offs}) == 4 for offs in pattern)
