"""V-shaped schedules: two stages per rank, rank ``r`` holds stages ``r`` and ``2pp-1-r``.

- ZB-V: the handcrafted zero-bubble V schedule (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
  Sec. 6; the order PyTorch's ``ScheduleZBVZeroBubble`` emits).
- V-Half and V-Min (Qi, Wan, Amar, Lin 2024, "Pipeline Parallelism with Controllable Memory",
  NeurIPS 2024, Sec. 4): a building block of four passes per rank repeated every 6 unit slots; the
  block's lifespan sets the activation memory (about 1/2 and 1/3 of 1F1B). W passes fill the free slots
  of the repeated pattern, oldest first, and each rank runs its passes in slot order.
"""

from __future__ import annotations

import numpy as np

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
    ks = np.arange(m)
    slot: list[list[int]] = []
    w_src: list[list[int]] = []
    for offs in pattern:
        row = np.concatenate([offs[j] + PATTERN_PERIOD * ks for j in range(4)])
        i_ops = 2 * m + np.argsort(row[2 * m:], kind="stable")
        is_free = np.ones(int(row.max()) + 2 * m + 2, dtype=bool)
        is_free[row] = False
        free = np.nonzero(is_free)[0]
        # W n takes the first free slot after its I and after W n-1
        first = np.searchsorted(free, row[i_ops], side="right") - np.arange(2 * m)
        w_slots = free[np.maximum.accumulate(first) + np.arange(2 * m)]
        slot.append(np.concatenate([row, w_slots]).tolist())
        w_src.append(i_ops.tolist())
    if squeeze:
        _squeeze(pp, m, slot, w_src)
    ranks = []
    kinds = np.array([F_CODE, F_CODE, I_CODE, I_CODE] + [W_CODE] * 2)
    for r in range(pp):
        src = np.concatenate([np.arange(4 * m), np.asarray(w_src[r])])  # the pass, or a W's I
        j, k = src // m, src % m
        stages = np.array([r, 2 * pp - 1 - r, 2 * pp - 1 - r, r])[j]
        kind = np.where(np.arange(6 * m) >= 4 * m, W_CODE, kinds[j])
        order = np.argsort(np.asarray(slot[r]), kind="stable")
        ranks.append(np.stack([stages, k, kind], axis=1)[order])
    return ranks


def _squeeze(pp: int, m: int, slot: list[list[int]], w_src: list[list[int]]) -> None:
    """Move warm-up and cool-down passes to earlier free slots without raising the peak memory."""
    sl = np.asarray(slot)
    horizon = int(sl.max()) + 2
    rows = np.arange(pp)[:, None]
    delta = np.zeros((pp, horizon), dtype=np.int64)
    np.add.at(delta, (rows, sl[:, : 2 * m]), 1)
    np.add.at(delta, (rows, sl[:, 4 * m:]), -1)
    mem = np.cumsum(delta, axis=1)  # in-flight micro-batches (F to W) per slot
    peak = int(mem.max())
    busy_np = np.zeros((pp, horizon), dtype=np.uint8)
    busy_np[rows, sl] = 1
    used = [bytearray(row.tobytes()) for row in busy_np]

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
    n_ops = 6 * m
    key = sl * (pp * n_ops) + rows * n_ops + np.arange(n_ops)
    start, end = key[0, 3 * m], key[0, m - 1]
    movable = np.sort(key[(key < start) | (key > end)])
    for kk in movable.tolist():
        t, rest = divmod(kk, pp * n_ops)
        r, op = divmod(rest, n_ops)
        lo = dep_slot(r, op)
        row, busy = mem[r], used[r]
        is_f = op < 2 * m
        if is_f and lo < t:  # a forward moved to t2 holds one more micro-batch over [t2, t): stay under the peak
            window = row[lo:t]
            if window.max() >= peak:
                lo += int(np.flatnonzero(window >= peak)[-1]) + 1
        t2 = busy.find(0, lo, t)
        if t2 < 0:
            continue
        busy[t], busy[t2] = 0, 1
        if is_f:
            row[t2:t] += 1
        elif op >= 4 * m:
            row[t2:t] -= 1
        slot[r][op] = t2


def pattern_is_collision_free(pp: int, kind: str) -> bool:
    """True when the four passes of the block occupy distinct slots modulo the period on every rank."""
    pattern = _pattern_v_min(pp) if kind == "min" else _pattern_v_half(pp)
    return all(len({o % PATTERN_PERIOD for o in offs}) == 4 for offs in pattern)
