"""Schedule registry: name -> :class:`~shardwise.pipeline.schedule_info.ScheduleInfo`, with aliases;
:func:`generate_schedule` is the entry point.

Adding a schedule is a generator (a ``gen_*.py`` returning per-rank action lists) and one
:func:`register` call here with its record. The screen's closed forms of each record, with equal stages
and F = I = W, in stage units (tested against the simulator):

- bubble of the critical rank: 1F1B and GPipe p-1; interleaved and looped BFS p-1 stage units = (p-1)/v
  of a rank; ZB-H1 a third of 1F1B's; ZB-H2 and ZB-V ~0 once m >= 2p; V-Half ~1/2 and V-Min ~2/3 of 1F1B's
  rank time (Qi et al. 2024 Table 1; Narayanan et al. 2021 Sec. 2.2), with the extra fill of short
  pipelines (m < p) measured on the simulator;
- peak in-flight micro-batches of a stage on rank r: GPipe m, looped BFS v*m, 1F1B min(p - r, m),
  interleaved min(2(p-r-1) + (v-1)p + 1, v*m), ZB-H1 v*min(p, m), ZB-H2 min(2p-1, m),
  ZB-V min(2p, m+1+r, 2m), V-Half min(p+2, 2m), V-Min min(2(p+4)//3, 2m), DualPipeV 2p+1.

``auto`` is searched per job; its closed forms are assumptions (1F1B's bubble, at most 2p in flight).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_PIPELINE_RANKS
from shardwise.pipeline import gen_classic, gen_dualpipe, gen_v
from shardwise.pipeline.ir import Schedule, check_schedule_size, loop_placement, make_schedule, v_placement
from shardwise.pipeline.schedule_info import (
    ANY_STAGES,
    LOOP,
    ONE_STAGE,
    SEVERAL_STAGES,
    V_SHAPED,
    ScheduleInfo,
    StepTime,
    V,
)

_REGISTRY: dict[str, ScheduleInfo] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "")


def register(info: ScheduleInfo, aliases: tuple[str, ...] = ()) -> None:
    """Add a schedule (and aliases) to the registry; names are case-insensitive."""
    _REGISTRY[info.name] = info
    for a in (info.name, *aliases):
        _ALIASES[_key(a)] = info.name


def unregister(name: str) -> None:
    """Remove a schedule and its aliases (for tests that register one of their own)."""
    canon = resolve(name)
    del _REGISTRY[canon]
    for alias in [a for a, c in _ALIASES.items() if c == canon]:
        del _ALIASES[alias]


def resolve(name: str) -> str:
    """Canonical name for ``name`` (case-insensitive, aliases accepted)."""
    # a name already in normal form (every key is one, and _key leaves it as it is) skips normalising
    canon = (_ALIASES.get(name) or _ALIASES.get(_key(name))) if isinstance(name, str) else None
    if canon is None:
        raise ShardwiseError(
            f"unknown schedule {shorten(name)}; choose one of {', '.join(list_schedules())} "
            f"(aliases: {', '.join(sorted(a for a in _ALIASES if a not in _REGISTRY))})"
        )
    return canon


def list_schedules() -> list[str]:
    """Canonical schedule names, in registration order."""
    return list(_REGISTRY)


def planner_schedules() -> tuple[str, ...]:
    """The schedules `train plan` searches by default, in their ``planner_order``."""
    planned = [i for i in _REGISTRY.values() if i.planner_order is not None]
    return tuple(i.name for i in sorted(planned, key=lambda i: i.planner_order))


def schedule_info(name: str) -> ScheduleInfo:
    return _REGISTRY[resolve(name)]


def stages_per_rank(name: str, pp: int, vpp: int | None) -> int:
    """Stages each rank holds when ``name`` runs with ``vpp`` (None or 1 = not set): V-shaped schedules hold 2
    (with pp > 1), interleaved defaults to 2; raises :class:`ShardwiseError` for a vpp the schedule does not
    admit (e.g. a V-shaped schedule with vpp 3)."""
    return schedule_info(name).stages_per_rank(pp, vpp)


def check_counts(**counts: object) -> None:
    """Each of pp, microbatches, vpp must be a positive integer (pp within MAX_PIPELINE_RANKS)."""
    for label, val in counts.items():
        if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or val < 1:
            raise ShardwiseError(f"{label} must be a positive integer; got {shorten(val)}")
    if counts.get("pp", 1) > MAX_PIPELINE_RANKS:  # type: ignore[operator]
        check_schedule_size(int(counts["pp"]), 1, 0, "the schedule")  # type: ignore[arg-type]


def generate_schedule(name: str, pp: int, microbatches: int, vpp: int | None = None, **kw: Any) -> Schedule:
    """Build the named schedule's IR for ``pp`` ranks and ``microbatches`` micro-batches.

    ``vpp`` is the number of stages per rank; it defaults to 2 for ``interleaved`` and 1 otherwise.
    V-shaped schedules (zbv, v-half, v-min, dualpipev) always have 2 stages per rank and accept
    ``vpp`` 1 (read as "not set") or 2. Extra keywords go to the generator (``auto`` takes stage times and a
    memory cap). Raises :class:`ShardwiseError` for unknown names or (pp, microbatches, vpp) the
    schedule does not admit.
    """
    info = schedule_info(name)
    if vpp is None:
        vpp = info.vpp_rule.default
    check_counts(pp=pp, microbatches=microbatches, vpp=vpp)
    info.vpp_rule.check(info.name, int(vpp))
    per_rank = info.vpp_rule.fixed or int(vpp)
    check_schedule_size(int(pp), per_rank, 3 * int(pp) * per_rank * int(microbatches), f"schedule {info.name!r}")
    unknown = set(kw) - info.parameters
    if unknown:
        raise ShardwiseError(f"schedule {info.name!r} takes no parameters {sorted(unknown)}")
    if "placement" in info.parameters:  # auto: searched on the placement its record gives for this vpp
        kw.setdefault("placement", info.placement_at(int(vpp)))
    return info.build(int(pp), int(microbatches), int(vpp), **kw)


def _loop(name: str, ranks: list[list[int]], pp: int, m: int, vpp: int, **params: Any) -> Schedule:
    return make_schedule(name, pp, m, loop_placement(pp, vpp), ranks, params)


def _v(name: str, ranks: list[list[int]], pp: int, m: int) -> Schedule:
    return make_schedule(name, pp, m, v_placement(pp), ranks)


def _v_controllable(kind: str, pp: int, m: int) -> Schedule:
    """V-Half / V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): the paper's V-shape
    building block (per-rank memory (pp+2)//2 and (pp+4)//3 micro-batches of a rank's slice) with its
    warm-up and cool-down squeezed (see :func:`.gen_v.v_pattern`)."""
    name = "v-half" if kind == "half" else "v-min"
    return _v(name, gen_v.v_pattern(pp, m, kind), pp, m)


def _short(p: int, m: np.ndarray) -> np.ndarray:
    """Micro-batches a pipeline of p stages is short of p (the extra fill when m < p)."""
    return np.maximum(0, p - m)


register(ScheduleInfo(
    "gpipe", "GPipe: all F then all B (Huang et al. 2019)",
    lambda pp, m, v: _loop("gpipe", gen_classic.gpipe(pp, m), pp, m, 1),
    ONE_STAGE, LOOP, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: m,
    bubble_units=lambda p, v, m: np.full_like(m, p - 1, dtype=float),
    planner_order=9, torch_class="ScheduleGPipe", uneven_split=True), ("afab",))
register(ScheduleInfo(
    "1f1b", "1F1B / PipeDream-flush (Narayanan et al. 2021)",
    lambda pp, m, v: _loop("1f1b", gen_classic.one_f_one_b(pp, m), pp, m, 1),
    ONE_STAGE, LOOP, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: np.minimum(p - r, m),
    bubble_units=lambda p, v, m: np.full_like(m, p - 1, dtype=float),
    planner_order=0, torch_class="Schedule1F1B", torch_vpp=(1, 1), uneven_split=True), ("pipedream-flush", "onefoneb"))
register(ScheduleInfo(
    "interleaved", "interleaved 1F1B, depth-first over vpp chunks (Narayanan et al. 2021)",
    lambda pp, m, v, group=None: _loop("interleaved", gen_classic.one_f_one_b(pp, m, v, group=group), pp, m, v),
    SEVERAL_STAGES, LOOP, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: np.minimum(2 * (p - r - 1) + (v - 1) * p + 1, v * m),
    bubble_units=lambda p, v, m: (p - 1) + _short(p, m) * (v - 1.0),
    rounds_of_pp=True, planner_order=1, compare_with_vpp=True, parameters=frozenset({"group"}),
    torch_class="ScheduleInterleaved1F1B"),
    ("1f1b-i", "interleaved-1f1b", "interleaved1f1b", "vpp"))
register(ScheduleInfo(
    "bfs", "looped breadth-first (Lamy-Poirier 2023)",
    lambda pp, m, v: _loop("bfs", gen_classic.looped_bfs(pp, m, v), pp, m, v),
    ANY_STAGES, LOOP, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: v * m,
    bubble_units=lambda p, v, m: (p - 1) + _short(p, m) * (v - 1.0),
    planner_order=8, compare_with_vpp=True, torch_class="ScheduleLoopedBFS"),
    ("loopedbfs", "looped-bfs", "breadth-first"))
register(ScheduleInfo(
    "zb-h1", "ZB-H1: 1F1B memory, 1/3 of its bubble (Qi et al. 2024)",
    lambda pp, m, v, group=None: _loop("zb-h1", gen_classic.one_f_one_b(pp, m, v, True, group=group), pp, m, v),
    ANY_STAGES, LOOP, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: v * np.minimum(p, m),
    bubble_units=lambda p, v, m: (p - 1) / 3 + _short(p, m) * (v - 1) * 2 / 3,
    rounds_of_pp=True, planner_order=2, parameters=frozenset({"group"}),
    torch_class="ScheduleInterleavedZeroBubble", torch_vpp=(2, None), uneven_split=True),
    ("zb1p", "zbh1", "zb-1p", "interleavedzerobubble"))
register(ScheduleInfo(
    "zb-h2", "ZB-H2: ~zero bubble with 2x 1F1B memory (Qi et al. 2024)",
    lambda pp, m, v: _loop("zb-h2", gen_classic.zb_h2(pp, m), pp, m, 1),
    ONE_STAGE, LOOP, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: np.minimum(2 * p - 1, m),
    bubble_units=lambda p, v, m: (p - 1) / 3 * np.maximum(0, 2 * p - m) / p,
    planner_order=3, uneven_split=True), ("zb2p", "zbh2", "zb-2p"))
register(ScheduleInfo(
    "zbv", "ZB-V: ~zero bubble, 1F1B memory, V placement (Qi et al. 2024)",
    lambda pp, m, v: _v("zbv", gen_v.zbv(pp, m), pp, m),
    V_SHAPED, V, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: np.minimum(np.minimum(2 * p, m + 1 + r), 2 * m),
    bubble_units=lambda p, v, m: (p - 1) * np.maximum(0, 2 * p - m) / (1.5 * p),
    planner_order=4, torch_class="ScheduleZBVZeroBubble"), ("zb-v", "zbvzerobubble", "v-zb"))
register(ScheduleInfo(
    "v-half", "V-Half: 1/2 of 1F1B memory (Qi et al. 2024, controllable memory)",
    lambda pp, m, v: _v_controllable("half", pp, m),
    V_SHAPED, V, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: np.minimum(p + 2, 2 * m),
    bubble_units=lambda p, v, m: 1.1 * (p - 1) + 0.0 * m,
    planner_order=5), ("vhalf",))
register(ScheduleInfo(
    "v-min", "V-Min: 1/3 of 1F1B memory (Qi et al. 2024, controllable memory)",
    lambda pp, m, v: _v_controllable("min", pp, m),
    V_SHAPED, V, StepTime.RANK_SPAN,
    inflight=lambda p, v, m, r: np.minimum(2 * (p + 4) // 3, 2 * m),
    bubble_units=lambda p, v, m: 4 * (p - 1) / 3 + 0.0 * m,
    planner_order=6), ("vmin",))
register(ScheduleInfo(
    "dualpipev", "DualPipeV: DualPipe folded into a V (DeepSeek-V3 report)",
    lambda pp, m, v: _v("dualpipev", gen_dualpipe.dualpipev(pp, m), pp, m),
    V_SHAPED, V, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: np.full_like(m, 2 * p + 1),
    bubble_units=lambda p, v, m: (p - 1) / 3 + 0.0 * m,
    min_microbatches_per_rank=2, planner_order=7, torch_class="ScheduleDualPipeV"), ("dualpipe-v", "dual-pipe-v"))
