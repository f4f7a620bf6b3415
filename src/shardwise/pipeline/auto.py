"""Automatic schedule search and the side-by-side comparison of every schedule.

``auto`` follows the zero-bubble paper's automatic scheduling (Qi et al. 2024, Sec. 3.1): for the given
stage times and a per-rank activation-memory cap it runs the memory-capped greedy of
:mod:`.listsched` under a few policy variants (with and without look-ahead; depth- or breadth-first for
multi-stage placements), times each candidate exactly with :func:`.simulate`, and keeps the best for
the chosen objective. The paper refines its heuristic with an ILP; we do not (the greedy is what the
paper uses as the ILP's starting point).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import Schedule, check_schedule_size, loop_placement, make_schedule, v_placement
from shardwise.pipeline.listsched import Policy, greedy_order
from shardwise.pipeline.registry import check_counts, generate_schedule, list_schedules, register, schedule_info
from shardwise.pipeline.schedule_info import ANY_STAGES, V_WHEN_TWO, ScheduleInfo, StepTime
from shardwise.pipeline.simulate import DEFAULT_W_RETAINED_FRACTION, _per_stage, simulate

OBJECTIVES = ("makespan", "stage")


def auto_schedule(
    pp: int,
    microbatches: int,
    vpp: int = 1,
    f_s: float | Sequence[float] = 1.0,
    i_s: float | Sequence[float] = 1.0,
    w_s: float | Sequence[float] = 1.0,
    p2p_s: float = 0.0,
    mem_cap: float | None = None,
    activation: Sequence[float] | None = None,
    w_retained_fraction: float = DEFAULT_W_RETAINED_FRACTION,
    placement: str = "loop",
    objective: str = "makespan",
) -> Schedule:
    """Best greedy schedule under a per-rank activation cap.

    Times are per stage of this layout (``pp * vpp`` stages). ``mem_cap`` is per rank in micro-batches
    of the rank's whole model slice (1F1B needs ``pp``; the default) or, when ``activation`` is given,
    in the units of ``activation``. ``placement``: ``"loop"`` (stage s on rank s % pp) or ``"v"``
    (needs vpp = 2). ``objective``: ``"makespan"`` (global step time) or ``"stage"`` (longest rank
    span, the zero-bubble paper's measure with optimizer post-validation).
    """
    if placement not in ("loop", "v"):
        raise ShardwiseError(f"auto placement must be 'loop' or 'v'; got {placement!r}")
    if placement == "v" and vpp != 2:
        raise ShardwiseError(f"auto with placement 'v' needs vpp=2 (two stages per rank); got vpp={vpp}")
    if objective not in OBJECTIVES:
        raise ShardwiseError(f"auto objective must be one of {OBJECTIVES}; got {objective!r}")
    S = pp * vpp
    check_schedule_size(pp, vpp, 3 * S * microbatches, "schedule 'auto'")
    s2r = v_placement(pp) if placement == "v" else loop_placement(pp, vpp)
    f = _per_stage(f_s, S, "forward time f_s")
    i = _per_stage(i_s, S, "input-gradient time i_s")
    w = _per_stage(w_s, S, "weight-gradient time w_s")
    if activation is None:
        a = np.ones(S)
        cap_units = float(pp if mem_cap is None else mem_cap) * vpp
    else:
        a = _per_stage(activation, S, "activation")
        per_rank = max(sum(a[s] for s in range(S) if s2r[s] == r) for r in range(pp))
        cap_units = float(pp * per_rank if mem_cap is None else mem_cap)
    if not np.isfinite(cap_units) or cap_units <= 0:
        raise ShardwiseError(f"mem_cap must be a positive number; got {mem_cap!r}")
    cap_reported = cap_units / vpp if activation is None else cap_units
    candidates: list[tuple[str, list[list[int]]]] = []
    warmups = [(0, False), (0, True)] + ([(1, False), (2, False)] if vpp == 1 else [])
    for pol in (Policy(lookahead=la, depth_first=df, warmup_step=st, warmup_to_first_i=wf)
                for st, wf in warmups for la in (False, True) for df in ((True, False) if vpp > 1 else (True,))):
        ranks = greedy_order(pp, microbatches, s2r, f, i, w, float(p2p_s), a, [cap_units] * pp,
                             w_retained_fraction, pol)
        label = (f"greedy(lookahead={pol.lookahead}, depth_first={pol.depth_first}, "
                 f"warmup_step={pol.warmup_step}, warmup_to_first_i={pol.warmup_to_first_i})")
        candidates.append((label, ranks))
    all_forward_first = microbatches * float(max(a)) * vpp > cap_units  # gpipe/bfs hold all m: skip them
    candidates += _named_seeds(pp, microbatches, vpp, s2r, skip=("gpipe", "bfs") if all_forward_first else ())
    best, best_key = None, None
    for source, ranks in candidates:
        sched = make_schedule("auto", pp, microbatches, s2r, ranks, {
            "mem_cap": cap_reported, "placement": placement, "objective": objective, "source": source})
        res = simulate(sched, f, i, w, p2p_s, a, w_retained_fraction)
        if max(res.peak_activation) > cap_units * (1 + 1e-9):
            continue
        key = (res.makespan, res.stage_span) if objective == "makespan" else (res.stage_span, res.makespan)
        if best_key is None or key < best_key:
            best, best_key = sched, key
    return best


def _named_seeds(pp: int, m: int, vpp: int, s2r: list[int], skip: Sequence[str] = ()) -> list[tuple[str, list]]:
    """Named schedules with the same placement, offered to ``auto`` as candidates (kept only if they
    respect the memory cap under the caller's times)."""
    seeds = []
    for name in list_schedules():
        if schedule_info(name).takes_costs or name in skip:
            continue
        try:
            sched = generate_schedule(name, pp, m, vpp)
        except ShardwiseError:
            continue
        if list(sched.stage_to_rank) == list(s2r):
            seeds.append((name, [arr for arr in sched.codes]))
    return seeds


def compare_schedules(
    pp: int,
    microbatches: int,
    vpp: int = 2,
    f_s: float | Sequence[float] = 1.0,
    i_s: float | Sequence[float] = 1.0,
    w_s: float | Sequence[float] = 1.0,
    p2p_s: float = 0.0,
    mem_cap: float | None = None,
    w_retained_fraction: float = DEFAULT_W_RETAINED_FRACTION,
    names: Sequence[str] | None = None,
) -> list[dict]:
    """Simulate every schedule (or ``names``) on the same model and return one row per schedule.

    Times are per rank slice (one number, or ``pp`` numbers); a schedule with ``v`` stages per rank
    splits a rank's time evenly over them (``vpp`` is used by interleaved and bfs, V schedules use 2).
    Peak activation is in micro-batches of a rank's slice (1F1B's rank 0 = pp). A schedule that does
    not admit the configuration gets a row with ``error`` set instead of figures. ``auto`` is searched
    on every layout the named rows use (one stage per rank, ``vpp`` looped stages, the V) under the cap
    ``mem_cap`` (default pp) and keeps the shortest makespan, so it is never slower than a named schedule
    whose peak fits that cap (each is one of its seeds, timed the same way).
    """
    check_counts(pp=pp, microbatches=microbatches, vpp=vpp)
    check_schedule_size(pp, max(vpp, 2), 3 * pp * max(vpp, 2) * microbatches, "schedule compare")
    rows = []
    for name in names or list_schedules():
        info = schedule_info(name)
        if info.takes_costs:
            layouts = list(dict.fromkeys([(1, "loop"), (vpp, "loop"), (2, "v")]))
        else:
            v = info.vpp_rule.fixed or (vpp if info.compare_with_vpp else info.vpp_rule.default)
            layouts = [(v, info.placement_at(v))]
        tried = [_compare_row(info.name, pp, microbatches, v, placement, (f_s, i_s, w_s), p2p_s, mem_cap,
                              w_retained_fraction, info.takes_costs) for v, placement in layouts]
        done = [r for r in tried if "error" not in r]
        rows.append(min(done, key=lambda r: (r["makespan"], r["stage_span"])) if done else tried[0])
    return rows


def _compare_row(name: str, pp: int, m: int, v: int, placement: str, rank_times: tuple, p2p_s: float,
                 mem_cap: float | None, w_retained_fraction: float, takes_costs: bool) -> dict:
    """One row of :func:`compare_schedules`: the schedule on ``v`` stages per rank placed by ``placement``."""
    row: dict = {"schedule": name, "vpp": v}
    try:
        times = [_rank_to_stage(x, pp, v, placement, label) for x, label in zip(rank_times, ("f_s", "i_s", "w_s"))]
        kw = {}
        if takes_costs:
            kw = {"f_s": times[0], "i_s": times[1], "w_s": times[2], "p2p_s": p2p_s, "mem_cap": mem_cap,
                  "w_retained_fraction": w_retained_fraction, "placement": placement}
        sched = generate_schedule(name, pp, m, v, **kw)
        res = simulate(sched, *times, p2p_s=p2p_s, w_retained_fraction=w_retained_fraction)
    except ShardwiseError as exc:
        return row | {"error": str(exc)}
    if takes_costs:
        row["placement"] = placement
    return row | {"makespan": res.makespan, "stage_span": res.stage_span, "bubble_fraction": res.bubble_fraction,
                  "bubble_ratio": res.bubble_ratio, "stage_bubble_ratio": res.stage_bubble_ratio,
                  "peak_activation_rank_microbatches": max(res.peak_activation_rank_microbatches)}


def _rank_to_stage(x: float | Sequence[float], pp: int, v: int, placement: str, label: str) -> np.ndarray:
    """Per-rank-slice times -> per-stage times for a layout with ``v`` stages per rank."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim == 0:
        return np.full(pp * v, float(arr) / v)
    if arr.shape != (pp,):
        raise ShardwiseError(f"{label} must be one number or {pp} per-rank values; got {arr.size}")
    s2r = v_placement(pp) if placement == "v" else loop_placement(pp, v)
    return np.array([arr[s2r[s]] / v for s in range(pp * v)])


# Registered here, not in the registry: auto searches the registry's named schedules, so it is the one
# schedule that depends on the others (the package imports this module, so it is always registered).
register(ScheduleInfo(
    "auto", "greedy search under a memory cap for given stage times (Qi et al. 2024, Sec. 3)",
    auto_schedule, ANY_STAGES, V_WHEN_TWO, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: v * np.minimum(2 * p, m),
    bubble_units=lambda p, v, m: (p - 1) + 0.0 * m,
    parameters=frozenset({"f_s", "i_s", "w_s", "p2p_s", "mem_cap", "activation", "w_retained_fraction",
                          "placement", "objective"})), ("automatic", "zb-auto"))
