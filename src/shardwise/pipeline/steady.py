"""Timing of a schedule with many micro-batches, from a few simulations of a representative number.

Every generator emits a warm-up, a steady phase that repeats one per-rank pattern of actions, and a
cool-down whose shape does not depend on the micro-batch count. The event simulation is a max-plus
recurrence (start = max(rank free, dependency end + hop)), so its steady phase becomes periodic after a
transient: for some cycle of ``c`` micro-batches, every action of micro-batch ``k + c`` starts exactly
``D`` after the same action of micro-batch ``k`` (``D`` per phase for GPipe) (eventual periodicity of max-plus linear systems:
Baccelli, Cohen, Olsder, Quadrat 1992, "Synchronization and Linearity", Ch. 3). From then on each
further cycle adds ``D`` to the makespan and to every rank's span, a fixed amount of work to every
rank, and nothing to the peak activation memory. So, for ``m`` micro-batches:

1. simulate ``b`` micro-batches (``b`` representative: ``SIMULATED_MICROBATCHES``, at least 8 per
   virtual stage: fewer can look periodic before the phases of breadth-first orders settle) and find the shortest cycle ``c`` over which the interior of the timeline repeats
   (:func:`find_cycle`); double ``b`` while there is none (a long transient);
2. simulate ``m1``, ``m1 + c`` and ``m1 + 2c`` with ``m1 = b + (m - b) mod c`` and check that both
   cycles add the same amounts;
3. extend ``m1`` by ``(m - m1) / c`` cycles. Every reported quantity is then the one the full
   simulation gives, to float round-off (tests/reliability/test_steady.py checks equality on integer
   times for every schedule).

If no cycle is found within ``MAX_SCHEDULE_ACTIONS`` simulated actions the last two samples are
extended anyway and the result says so (``exact`` False); its error is bounded by the transient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import lcm

import numpy as np

from shardwise.limits import MAX_SCHEDULE_ACTIONS, SIMULATED_MICROBATCHES
from shardwise.pipeline.ir import B_CODE, Schedule
from shardwise.pipeline.simulate import SimResult, simulate


def _start_table(res: SimResult, stages: int) -> np.ndarray:
    """Start time of every compute action as (stage, slot F/backward/W, micro-batch); NaN where none."""
    table = np.full((stages, 3, res.microbatches), np.nan)
    for acts, starts in zip(res.actions, res.starts, strict=True):
        if len(acts):
            slot = np.minimum(acts[:, 2], 2)
            slot = np.where(acts[:, 2] == B_CODE, 1, slot)
            table[acts[:, 0], slot, acts[:, 1]] = starts
    return table


def _same(a: np.ndarray, b: float | np.ndarray, scale: float) -> bool:
    return bool(np.all(np.abs(a - b) <= 1e-9 * scale + 1e-12))


def find_cycle(res: SimResult, granularity: int = 1) -> int | None:
    """Shortest ``c`` (a multiple of ``granularity``) over which, in the interior of the timeline
    (micro-batches b/4 .. 3b/4), each kind of action of each stage starts a constant time later every ``c``
    micro-batches (one constant for 1F1B-like orders; one per phase for GPipe's all-forward-then-all-backward);
    None when the steady phase has not settled."""
    table = _start_table(res, res.num_stages)
    m = res.microbatches
    lo, hi = m // 4, (3 * m) // 4
    probe = table[0, 0, lo:hi]  # forwards of stage 0: one row to find candidates fast
    scale = float(np.nanmax(np.abs(table))) if np.isfinite(table).any() else 1.0
    for c in range(granularity, (hi - lo) // 3 + 1, granularity):
        d = probe[c:] - probe[:-c]
        if not _same(d, d[0], scale):
            continue
        rows = (table[:, :, lo + c:hi] - table[:, :, lo:hi - c]).reshape(-1, hi - lo - c)
        rows = rows[np.isfinite(rows).all(axis=1)]
        if _same(rows, rows[:, :1], scale):
            return c
    return None


def _extend(r1: SimResult, r2: SimResult, cycles: int, microbatches: int, exact: bool) -> SimResult:
    """r1 plus `cycles` times the change from r1 to r2, every derived figure recomputed as simulate() does."""
    def grow(a, b):
        return [x + cycles * (y - x) for x, y in zip(a, b, strict=True)]

    makespan = r1.makespan + cycles * (r2.makespan - r1.makespan)
    spans, busy = grow(r1.rank_spans, r2.rank_spans), grow(r1.rank_busy, r2.rank_busy)
    total_busy = float(sum(busy))
    idle = max(r1.pp * makespan - total_busy, 0.0)
    crit = max(range(r1.pp), key=lambda r: (spans[r], spans[r] - busy[r]))
    return replace(
        r1,
        microbatches=microbatches,
        makespan=makespan,
        rank_spans=spans,
        rank_busy=busy,
        bubble_fraction=idle / (r1.pp * makespan) if makespan > 0 else 0.0,
        bubble_ratio=idle / total_busy if total_busy > 0 else 0.0,
        stage_bubble_ratio=max(spans[crit] - busy[crit], 0.0) / spans[crit] if spans[crit] > 0 else 0.0,
        critical_rank=crit,
        peak_activation=grow(r1.peak_activation, r2.peak_activation),
        peak_activation_microbatches=grow(r1.peak_activation_microbatches, r2.peak_activation_microbatches),
        starts=[], ends=[], actions=[],
        extrapolated_from=r1.microbatches,
        exact=exact,
        without_hops=None,
    )


def _increments_agree(r1: SimResult, r2: SimResult, r3: SimResult) -> bool:
    def vec(r: SimResult) -> np.ndarray:
        return np.array([r.makespan, *r.rank_spans, *r.rank_busy, *r.peak_activation])

    a, b, c = vec(r1), vec(r2), vec(r3)
    return _same((c - b) - (b - a), 0.0, float(np.max(np.abs(c))))


def simulate_steady(
    build: Callable[[int], Schedule],
    microbatches: int,
    simulate_kw: dict,
    stages: int,
    granularity: int = 1,
    representative: int = SIMULATED_MICROBATCHES,
    grow: bool = True,
) -> SimResult:
    """`simulate(build(microbatches), **simulate_kw)`, computed from a few simulations of about
    `representative` micro-batches when `microbatches` is larger (see the module docstring). `stages`:
    virtual stages of the schedule; `granularity`: the micro-batch counts the schedule admits are
    multiples of it (interleaved with many micro-batches: pp). `grow` False: no larger samples when the
    first does not settle (for schedules searched per count, such as `auto`, whose search is costly)."""
    g = max(1, granularity)
    b = -(-max(representative, 8 * stages) // g) * g

    if microbatches <= 2 * b:
        return simulate(build(microbatches), **simulate_kw)
    # an extrapolated result has no timing without hops and no timeline; the samples need theirs (find_cycle)
    sample_kw = {k: v for k, v in simulate_kw.items() if k not in ("without_hops", "timeline")}

    def run(m: int, kw: dict = sample_kw) -> SimResult:
        return simulate(build(m), **kw)

    def affordable(m: int) -> bool:
        return 3 * stages * m <= MAX_SCHEDULE_ACTIONS

    while True:
        sample = run(b)
        c = find_cycle(sample, g)
        if c is not None:
            c = lcm(c, g)
            m1 = b + (microbatches - b) % c
            r1 = sample if m1 == b else run(m1)
            r2, r3 = run(m1 + c), run(m1 + 2 * c)
            if _increments_agree(r1, r2, r3):
                return _extend(r2, r3, (microbatches - m1 - c) // c, microbatches, exact=True)
        if 4 * b >= microbatches and affordable(microbatches):
            return run(microbatches, simulate_kw)
        if not grow or not affordable(4 * b):  # no settled cycle within the budget: extend the last cycle found
            c = c or g
            m1 = b + (microbatches - b) % c
            r1, r2 = run(m1), run(m1 + c)
            return _extend(r1, r2, (microbatches - m1) // c, microbatches, exact=False)
        b *= 2
