"""Schedule registry: name -> generator, with aliases; :func:`generate_schedule` is the entry point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_PIPELINE_RANKS
from shardwise.pipeline import gen_classic, gen_dualpipe, gen_v
from shardwise.pipeline.ir import Schedule, check_schedule_size, loop_placement, make_schedule, v_placement


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered schedule: canonical name, one-line description with its source, vpp rule."""

    name: str
    description: str
    placement: str  # "loop" or "v"
    vpp_rule: str  # "1", ">=2", ">=1", "2"
    build: Callable[..., Schedule]


_REGISTRY: dict[str, ScheduleInfo] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "")


def register(info: ScheduleInfo, aliases: tuple[str, ...] = ()) -> None:
    """Add a schedule (and aliases) to the registry; names are case-insensitive."""
    _REGISTRY[info.name] = info
    for a in (info.name, *aliases):
        _ALIASES[_key(a)] = info.name


def resolve(name: str) -> str:
    """Canonical name for ``name`` (case-insensitive, aliases accepted)."""
    canon = _ALIASES.get(_key(name)) if isinstance(name, str) else None
    if canon is None:
        raise ShardwiseError(
            f"unknown schedule {shorten(name)}; choose one of {', '.join(list_schedules())} "
            f"(aliases: {', '.join(sorted(a for a in _ALIASES if a not in _REGISTRY))})"
        )
    return canon


def list_schedules() -> list[str]:
    """Canonical schedule names, in registration order."""
    return list(_REGISTRY)


def schedule_info(name: str) -> ScheduleInfo:
    return _REGISTRY[resolve(name)]


def stages_per_rank(name: str, pp: int, vpp: int | None) -> int:
    """Stages each rank holds when ``name`` runs with ``vpp`` (None or 1 = not set): V-shaped schedules hold 2
    (with pp > 1), interleaved defaults to 2; raises :class:`ShardwiseError` for a vpp the schedule does not
    admit (e.g. a V-shaped schedule with vpp 3)."""
    info = schedule_info(name)
    if vpp is None:
        vpp = 2 if info.vpp_rule == ">=2" else 1
    _check_vpp(info.name, info.vpp_rule, int(vpp))
    return 2 if info.placement == "v" and pp > 1 else int(vpp)


def _check_vpp(name: str, rule: str, vpp: int) -> None:
    ok = {"1": vpp == 1, ">=2": vpp >= 2, ">=1": vpp >= 1, "2": vpp in (1, 2)}[rule]
    if not ok:
        hint = {
            "1": "it has one stage per rank (use 'interleaved' or 'bfs' for several)",
            ">=2": "it needs at least two stages per rank (use '1f1b' for one)",
            ">=1": "vpp must be a positive integer",
            "2": "it is V-shaped with exactly two stages per rank (omit vpp or pass 2)",
        }[rule]
        raise ShardwiseError(f"schedule {name!r} does not admit vpp={vpp}: {hint}")


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
        vpp = 2 if info.vpp_rule == ">=2" else 1
    check_counts(pp=pp, microbatches=microbatches, vpp=vpp)
    _check_vpp(info.name, info.vpp_rule, int(vpp))
    per_rank = 2 if info.placement == "v" else int(vpp)
    check_schedule_size(int(pp), per_rank, 3 * int(pp) * per_rank * int(microbatches), f"schedule {info.name!r}")
    unknown = set(kw) - ({"f_s", "i_s", "w_s", "p2p_s", "mem_cap", "activation", "w_retained_fraction",
                          "placement", "objective"} if info.name == "auto" else set())
    if unknown:
        raise ShardwiseError(f"schedule {info.name!r} takes no parameters {sorted(unknown)}")
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


def _auto(pp: int, m: int, vpp: int, **kw: Any) -> Schedule:
    from shardwise.pipeline.auto import auto_schedule

    return auto_schedule(pp, m, vpp, **kw)


register(ScheduleInfo("gpipe", "GPipe: all F then all B (Huang et al. 2019)", "loop", "1",
                      lambda pp, m, v: _loop("gpipe", gen_classic.gpipe(pp, m), pp, m, 1)), ("afab",))
register(ScheduleInfo("1f1b", "1F1B / PipeDream-flush (Narayanan et al. 2021)", "loop", "1",
                      lambda pp, m, v: _loop("1f1b", gen_classic.one_f_one_b(pp, m), pp, m, 1)),
         ("pipedream-flush", "onefoneb"))
register(ScheduleInfo("interleaved", "interleaved 1F1B, depth-first over vpp chunks (Narayanan et al. 2021)",
                      "loop", ">=2",
                      lambda pp, m, v: _loop("interleaved", gen_classic.one_f_one_b(pp, m, v), pp, m, v)),
         ("1f1b-i", "interleaved-1f1b", "interleaved1f1b", "vpp"))
register(ScheduleInfo("bfs", "looped breadth-first (Lamy-Poirier 2023)", "loop", ">=1",
                      lambda pp, m, v: _loop("bfs", gen_classic.looped_bfs(pp, m, v), pp, m, v)),
         ("loopedbfs", "looped-bfs", "breadth-first"))
register(ScheduleInfo("zb-h1", "ZB-H1: 1F1B memory, 1/3 of its bubble (Qi et al. 2024)", "loop", ">=1",
                      lambda pp, m, v: _loop("zb-h1", gen_classic.one_f_one_b(pp, m, v, True), pp, m, v)),
         ("zb1p", "zbh1", "zb-1p", "interleavedzerobubble"))
register(ScheduleInfo("zb-h2", "ZB-H2: ~zero bubble with 2x 1F1B memory (Qi et al. 2024)", "loop", "1",
                      lambda pp, m, v: _loop("zb-h2", gen_classic.zb_h2(pp, m), pp, m, 1)),
         ("zb2p", "zbh2", "zb-2p"))
register(ScheduleInfo("zbv", "ZB-V: ~zero bubble, 1F1B memory, V placement (Qi et al. 2024)", "v", "2",
                      lambda pp, m, v: _v("zbv", gen_v.zbv(pp, m), pp, m)),
         ("zb-v", "zbvzerobubble", "v-zb"))
register(ScheduleInfo("v-half", "V-Half: 1/2 of 1F1B memory (Qi et al. 2024, controllable memory)", "v", "2",
                      lambda pp, m, v: _v_controllable("half", pp, m)), ("vhalf",))
register(ScheduleInfo("v-min", "V-Min: 1/3 of 1F1B memory (Qi et al. 2024, controllable memory)", "v", "2",
                      lambda pp, m, v: _v_controllable("min", pp, m)), ("vmin",))
register(ScheduleInfo("dualpipev", "DualPipeV: DualPipe folded into a V (DeepSeek-V3 report)", "v", "2",
                      lambda pp, m, v: _v("dualpipev", gen_dualpipe.dualpipev(pp, m), pp, m)),
         ("dualpipe-v", "dual-pipe-v"))
register(ScheduleInfo("auto", "greedy search under a memory cap for given stage times (Qi et al. 2024, Sec. 3)",
                      "loop", ">=1", _auto), ("automatic", "zb-auto"))
