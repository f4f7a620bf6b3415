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


def v_pattern(pp: int, m: int, kind: str) -> list[list[int]]:
    """V-Half (``kind="half"``) or V-Min (``kind="min"``) from the paper's building block.

    Micro-batch ``k``'s passes on rank ``r`` sit at the pattern slots + ``6k``; W passes take the free
    slots in I order. The peak in-flight count follows from the block's lifespan (paper Sec. 3).
    The paper additionally "squeezes" warm-up and cool-down; we keep the pattern order and let the
    simulator start each pass as early as its dependencies allow (see docs/schedules.md)."""
    pattern = _pattern_v_min(pp) if kind == "min" else _pattern_v_half(pp)
    ranks = []
    for r, offs in enumerate(pattern):
        stages = (r, 2 * pp - 1 - r, 2 * pp - 1 - r, r)
        kinds = (F_CODE, F_CODE, I_CODE, I_CODE)
        slots: dict[int, tuple[int, int, int]] = {}
        for k in range(m):
            for j in range(4):
                slots[offs[j] + PATTERN_PERIOD * k] = (stages[j], k, kinds[j])
        acts: list[int] = []
        pending: deque[tuple[int, int]] = deque()
        for t in range(max(slots) + 1):
            a = slots.get(t)
            if a is not None:
                acts += a
                if a[2] == I_CODE:
                    pending.append((a[0], a[1]))
            elif pending:
                s, k = pending.popleft()
                acts += (s, k, W_CODE)
        while pending:
            s, k = pending.popleft()
            acts += (s, k, W_CODE)
        ranks.append(acts)
    return ranks


def pattern_is_collision_free(pp: int, kind: str) -> bool:
    """True when the four passes of the block occupy distinct slots modulo the period on every rank."""
    pattern = _pattern_v_min(pp) if kind == "min" else _pattern_v_half(pp)
    return all(len({o % PATTERN_PERIOD for o in offs}) == 4 for offs in pattern)
