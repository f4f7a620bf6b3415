"""Timed, memory-aware simulation of any schedule IR.

Bubble conventions (both reported, never mixed):

- on the *global makespan* (first start to last end over all ranks, the step time when the optimizer
  step synchronises the stages): ``bubble_fraction = idle / (pp * makespan)`` and
  ``bubble_ratio = idle / compute`` with ``idle = pp * makespan - sum(busy)``. For 1F1B with equal
  stages these are ``(p-1)/(m+p-1)`` and ``(p-1)/m`` (Narayanan et al. 2021, Sec. 2.2).
- on the *longest per-rank span* (first to last action of one rank, the steady step time when the
  optimizer step does not synchronise stages; Qi et al. 2024 "Zero Bubble PP", Sec. 3 and Table 5):
  ``stage_bubble_ratio = (span - busy) / span`` of the rank with the longest span, i.e. the paper's
  ``(cost - m(T_F+T_B+T_W)) / cost``.

Activation memory (Qi et al. 2024, Table 1): F adds the stage's activations ``a_s``; I frees
``(1 - w_retained_fraction) * a_s``; W frees the rest; a fused B frees all of ``a_s``. Memory on a rank
depends only on its action order, so the peak is the largest prefix sum of those deltas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_ACTION_TIME, MAX_ACTIVATION_AMOUNT
from shardwise.pipeline.engine import blocked_actions, compile_schedule, run_order, run_order_ends, run_order_pair
from shardwise.pipeline.ir import KINDS, Schedule

#: Default fraction of a micro-batch's stage activations held from I until W. 1.0 is the accounting of
#: the V-schedule paper's memory counts (a micro-batch is in flight from F to its W); the zero-bubble
#: paper's Table 1 gives M_W = 32sbh of M_B = 34sbh + 5as^2b per layer, i.e. about 0.9.
DEFAULT_W_RETAINED_FRACTION = 1.0


@dataclass
class SimResult:
    """Outcome of :func:`simulate`. Times are in the units of the durations given (seconds in the API)."""

    name: str
    pp: int
    vpp: int
    num_stages: int
    microbatches: int
    makespan: float
    rank_spans: list[float]
    rank_busy: list[float]
    bubble_fraction: float
    bubble_ratio: float
    stage_bubble_ratio: float
    critical_rank: int
    peak_activation: list[float]
    peak_activation_microbatches: list[float]
    starts: list[np.ndarray] = field(repr=False)
    ends: list[np.ndarray] = field(repr=False)
    actions: list[np.ndarray] = field(repr=False)  # per rank (n, 3): stage, mb, kind code (compute only)
    p2p_s: float | list[float] = 0.0
    extrapolated_from: int | None = None  # micro-batches actually simulated (see pipeline.steady), None: all
    exact: bool = True  # False only when a steady state did not settle within the simulation budget
    #: (makespan, longest rank span) of the same schedule with every hop free, when asked for
    #: (``simulate(..., without_hops=True)``; a second simulation at ``p2p_s=0`` gives the same numbers)
    without_hops: tuple[float, float] | None = None

    def hop_s(self, stage: int, kind: str) -> float:
        """Seconds of the hop into ``stage``'s action of ``kind`` from the neighbouring stage (below it
        for F, above it for a backward)."""
        if not isinstance(self.p2p_s, list):
            return self.p2p_s
        if not self.p2p_s:
            return 0.0
        b = stage - 1 if kind == "F" else stage
        return self.p2p_s[min(max(b, 0), len(self.p2p_s) - 1)]

    @property
    def stage_span(self) -> float:
        """Longest per-rank span (the zero-bubble paper's step 'cost')."""
        return max(self.rank_spans)

    @property
    def peak_activation_rank_microbatches(self) -> list[float]:
        """Peak per rank in units of one micro-batch's activations of the whole slice a rank holds
        (stage units / stages per rank): 1F1B's rank 0 is ``pp``; comparable across vpp."""
        v = max(self.vpp, 1)
        return [p / v for p in self.peak_activation_microbatches]

    def timeline(self, rank: int) -> list[dict]:
        """Rank ``rank``'s actions with start and end, in execution order."""
        acts = self.actions[rank].tolist()
        st, en = self.starts[rank].tolist(), self.ends[rank].tolist()
        return [
            {"action": f"{s}{KINDS[k].value}{m}", "stage": s, "microbatch": m, "kind": KINDS[k].value,
             "start": a, "end": b}
            for (s, m, k), a, b in zip(acts, st, en)
        ]

    def to_dict(self, timeline: bool = True) -> dict:
        """JSON-ready summary; ``ranks`` holds each rank's timeline unless ``timeline=False``."""
        d = {
            "schedule": self.name,
            "pp": self.pp,
            "vpp": self.vpp,
            "num_stages": self.num_stages,
            "microbatches": self.microbatches,
            "p2p_s": self.p2p_s,
            "makespan": self.makespan,
            "stage_span": self.stage_span,
            "bubble_fraction": self.bubble_fraction,
            "bubble_ratio": self.bubble_ratio,
            "stage_bubble_ratio": self.stage_bubble_ratio,
            "critical_rank": self.critical_rank,
            "rank_spans": list(self.rank_spans),
            "rank_busy": list(self.rank_busy),
            "peak_activation": list(self.peak_activation),
            "peak_activation_microbatches": list(self.peak_activation_microbatches),
            "peak_activation_rank_microbatches": self.peak_activation_rank_microbatches,
        }
        if timeline:
            d["ranks"] = [self.timeline(r) for r in range(self.pp)]
        return d


def _per_stage(value: float | Sequence[float], S: int, what: str, limit: float = MAX_ACTION_TIME) -> list[float]:
    """One value per stage, finite, >= 0 and at most `limit` (times: MAX_ACTION_TIME; activation amounts,
    which may be bytes: MAX_ACTIVATION_AMOUNT), as a list of floats (plain Python: a handful of numbers
    is checked faster without numpy)."""
    if type(value) is tuple and len(value) == S and all(type(x) is float and 0.0 <= x <= limit for x in value):
        return list(value)  # the estimate's stage costs, checked in one pass (a bad value takes the path below)
    if isinstance(value, int | float | np.number):
        vals = [float(value)] * S
    else:
        arr = np.asarray(value, dtype=float)
        if arr.ndim == 0:
            vals = [float(arr)] * S
        elif arr.shape != (S,):
            raise ShardwiseError(
                f"{what} must be one number or {S} per-stage values (the schedule has {S} stages); got "
                f"{arr.size} values"
            )
        else:
            vals = arr.tolist()
    for x in vals:
        if not 0.0 <= x <= limit:  # False for NaN as well
            raise ShardwiseError(f"{what} must be finite, >= 0 and at most {limit:g}; got {shorten(vals)}")
    return vals


def simulate(
    sched: Schedule,
    f_s: float | Sequence[float] = 1.0,
    i_s: float | Sequence[float] = 1.0,
    w_s: float | Sequence[float] = 1.0,
    p2p_s: float = 0.0,
    activation: Sequence[float] | None = None,
    w_retained_fraction: float = DEFAULT_W_RETAINED_FRACTION,
    b_s: float | Sequence[float] | None = None,
    without_hops: bool = False,
    timeline: bool = True,
) -> SimResult:
    """Time ``sched`` and track activation memory.

    ``f_s``, ``i_s``, ``w_s``: forward, input-gradient and weight-gradient durations, one number or one
    per stage (first/last stages may be heavier). ``b_s``: fused-backward duration, default ``i_s + w_s``.
    ``p2p_s``: seconds per cross-rank hop (latency + bytes/bandwidth), one number or one per stage
    boundary (``S - 1`` values: entry ``b`` is the hop between stages ``b`` and ``b + 1``, both ways, for
    links that differ, e.g. between GPU groups); same-rank hops are free.
    ``activation``: per-stage amount F adds (default 1 = one micro-batch's activations of one stage).
    ``without_hops``: also time the schedule with free hops, in the same pass (``SimResult.without_hops``).
    ``timeline=False`` leaves ``starts``, ``ends`` and ``actions`` empty (the summary alone: an estimate
    needs no per-action times, and ordering them is a good part of the cost after the walk).
    Raises :class:`ShardwiseError` on bad inputs or a deadlocking schedule.
    """
    S = sched.num_stages
    f = _per_stage(f_s, S, "forward time f_s")
    i = _per_stage(i_s, S, "input-gradient time i_s")
    w = _per_stage(w_s, S, "weight-gradient time w_s")
    b = [x + y for x, y in zip(i, w)] if b_s is None else _per_stage(b_s, S, "full-backward time b_s")
    one_hop = isinstance(p2p_s, int | float) or np.ndim(p2p_s) == 0  # the isinstance first: np.ndim is slow on a number
    hop = None if one_hop else _per_stage(p2p_s, S - 1, "p2p_s (seconds per cross-rank hop)")
    if hop is None and not (math.isfinite(p2p_s) and 0 <= p2p_s <= MAX_ACTION_TIME):
        raise ShardwiseError(f"p2p_s (seconds per cross-rank hop) must be finite, >= 0 and at most {MAX_ACTION_TIME:g}; got {p2p_s}")
    if not 0.0 <= w_retained_fraction <= 1.0:
        raise ShardwiseError(f"w_retained_fraction must be in [0, 1]; got {w_retained_fraction}")
    a = [1.0] * S if activation is None else _per_stage(activation, S, "activation", MAX_ACTIVATION_AMOUNT)
    comp = compile_schedule(sched)
    if comp.deadlocked:
        raise ShardwiseError(
            f"schedule {sched.name!r} deadlocks: " + "; ".join(blocked_actions(sched, comp, list(comp.progress)))
            + ". Reorder the actions so every dependency can run first"
        )
    # duration slot kind * S + stage (kinds F, I, W, B; slot 4S: 0 for padding); hop slot 0: none,
    # 1 + b: the boundary between stages b and b + 1 (engine.compile_schedule)
    durations = f + i + w + b + [0.0]
    hops = [0.0] + (hop if hop is not None else [float(p2p_s)] * max(S - 1, 1))
    starts_v = end = free = None
    if without_hops and not timeline:  # the summary alone: the ends give every figure below
        end, free = run_order_ends(comp.order, durations, hops, comp.sentinel)
    elif without_hops:
        starts_v, free = run_order_pair(comp.order, durations, hops, comp.sentinel)
    else:
        starts_v = run_order(comp.order, durations, hops, comp.sentinel)

    R, off = sched.pp, comp.offsets
    d_all = np.asarray(durations)[comp.slot]
    st_l = en_l = []
    if timeline:
        st_all = np.fromiter(starts_v, float, len(starts_v))[comp.to_rank]  # visit order -> rank order
        en_all = st_all + d_all
        st_l = [st_all[off[r]:off[r + 1]] for r in range(R)]
        en_l = [en_all[off[r]:off[r + 1]] for r in range(R)]
    counts = [off[r + 1] - off[r] for r in range(R)]
    # np.add.reduce and friends: the ufuncs that .sum(), .cumsum() and .max() call, without their Python wrappers
    if all(n == counts[0] for n in counts):  # equal rows: numpy sums each row as it sums one rank's array
        busy = np.add.reduce(d_all.reshape(R, counts[0]), axis=1).tolist()
    else:
        busy = [float(d.sum()) for d in np.split(d_all, off[1:-1])]
    # Memory depends only on each rank's action order: prefix sums of the per-action deltas, one row
    # per rank (padding adds 0), the peak their maximum (or 0).
    rho = float(w_retained_fraction)
    keep = -(1 - rho)
    deltas = np.array([[1.0] * S + [keep] * S + [-rho] * S + [-1.0] * S + [0.0],
                       a + [keep * x for x in a] + [-rho * x for x in a] + [-x for x in a] + [0.0]])
    prefix = np.add.accumulate(deltas.take(comp.padded_slot, axis=1).reshape(2 * R, -1), axis=1)
    peaks = np.maximum.reduce(prefix, axis=1).tolist() if prefix.shape[1] else [0.0] * (2 * R)
    peak_u = [max(0.0, x) for x in peaks[:R]]
    peak_a = [max(0.0, x) for x in peaks[R:]]
    nonempty = [r for r in range(R) if counts[r]]
    if starts_v is not None:  # st_all's and en_all's values, without indexing numpy
        firsts = [starts_v[i] for i in comp.first_visit]
        lasts = [starts_v[i] + durations[k] for i, k in zip(comp.last_visit, comp.last_slot)]
    else:  # a rank's first action starts when its dependency's end and hop allow (the walk's max with 0.0)
        firsts = [max(end[d] + hops[h], 0.0) for d, h in zip(comp.first_dep, comp.first_hop)]
        lasts = [end[o] for o in comp.last_out]
    # starts and ends never decrease along a rank: its span is its last end - its first start
    spans = [0.0] * R
    for r, x, y in zip(nonempty, firsts, lasts):
        spans[r] = y - x
    without = None
    if free is not None:
        f_first = [free[d] for d in comp.first_dep]  # a first action waits only for its dependency (0 if none)
        f_last = [free[o] for o in comp.last_out]
        f_span = max((y - x for x, y in zip(f_first, f_last)), default=0.0)
        without = (max(max(f_last) - min(f_first), 0.0) if f_first else 0.0, f_span)
    makespan = max(max(lasts) - min(firsts), 0.0) if firsts else 0.0
    total_busy = float(sum(busy))
    idle = max(sched.pp * makespan - total_busy, 0.0)  # >= 0 exactly; clamp float round-off
    crit = max(range(sched.pp), key=lambda r: (spans[r], spans[r] - busy[r]))
    span_c = spans[crit]
    return SimResult(
        name=sched.name,
        pp=sched.pp,
        vpp=sched.vpp,
        num_stages=S,
        microbatches=sched.microbatches,
        makespan=makespan,
        rank_spans=spans,
        rank_busy=busy,
        bubble_fraction=idle / (sched.pp * makespan) if makespan > 0 else 0.0,
        bubble_ratio=idle / total_busy if total_busy > 0 else 0.0,
        stage_bubble_ratio=max(span_c - busy[crit], 0.0) / span_c if span_c > 0 else 0.0,
        critical_rank=crit,
        peak_activation=peak_a,
        peak_activation_microbatches=peak_u,
        starts=st_l,
        ends=en_l,
        actions=list(comp.actions) if timeline else [],
        p2p_s=float(p2p_s) if hop is None else hop,
        without_hops=without,
    )
