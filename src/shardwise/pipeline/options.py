"""A schedule and its simulation from the options a user gives: the one reading of `schedule simulate`'s
inputs that the CLI (flags) and the web API (fields) share."""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import Schedule, loop_placement, v_placement
from shardwise.pipeline.registry import generate_schedule, schedule_info
from shardwise.pipeline.simulate import SimResult, simulate
from shardwise.pipeline.validate import validate_schedule

Times = float | list[float]


def parse_times(value: str | float | Sequence[float], label: str) -> Times:
    """``"1"`` or ``1`` -> 1.0; ``"1,1,1.2"`` or ``[1, 1, 1.2]`` -> a per-stage list."""
    if isinstance(value, bool):
        raise ShardwiseError(f"--{label} takes a number or comma-separated per-stage numbers; got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    try:
        vals = [float(x) for x in value.split(",") if x.strip()] if isinstance(value, str) else [float(x) for x in value]
    except (TypeError, ValueError):
        raise ShardwiseError(f"--{label} takes a number or comma-separated per-stage numbers; got {value!r}") from None
    if not vals:
        raise ShardwiseError(f"--{label} is empty")
    return vals[0] if len(vals) == 1 else vals


def build_schedule(schedule: str, pp: int, microbatches: int, vpp: int | None, f: Times | str, i: Times | str,
                   w: Times | str, comm: float = 0.0, mem_cap: float | None = None, w_retained: float = 1.0,
                   imported: Schedule | None = None, placement: str | None = None) -> tuple[Schedule, tuple[Times, Times, Times]]:
    """The named schedule (`auto` is searched for these times) or an imported one (validated), and the
    per-stage F/I/W times. Times are those of a rank's slice of the model, as `schedule compare` takes
    them (one number, or ``pp`` per-rank numbers, split evenly over the rank's stages), or one number per
    stage (``pp x vpp`` numbers). ``placement`` (auto only): ``loop`` or ``v``; default v with two stages per
    rank, else loop (``schedule compare`` names the one its auto row used)."""
    given = (parse_times(f, "f"), parse_times(i, "i"), parse_times(w, "w"))
    if imported is not None:
        sched = validate_schedule(imported)
        return sched, tuple(stage_times(x, _stage_ranks(sched), label) for x, label in zip(given, "fiw", strict=True))
    info = schedule_info(schedule)
    if info.takes_costs:
        v = info.vpp_rule.held(pp, vpp or info.vpp_rule.default)
        placement = placement or info.placement_at(v)
        if placement not in ("loop", "v"):
            raise ShardwiseError(f"--placement takes loop or v; got {placement!r}")
        ranks = v_placement(pp) if placement == "v" and v == 2 else loop_placement(pp, v)
        times = tuple(stage_times(x, ranks, label) for x, label in zip(given, "fiw", strict=True))
        kw = {"f_s": times[0], "i_s": times[1], "w_s": times[2], "p2p_s": comm, "mem_cap": mem_cap,
              "w_retained_fraction": w_retained, "placement": placement}
        return generate_schedule(schedule, pp, microbatches, vpp, **kw), times
    if mem_cap is not None:
        raise ShardwiseError("--mem-cap only applies to --schedule auto")
    if placement is not None:
        raise ShardwiseError("--placement only applies to --schedule auto (named schedules have their own)")
    sched = generate_schedule(schedule, pp, microbatches, vpp)
    return sched, tuple(stage_times(x, _stage_ranks(sched), label) for x, label in zip(given, "fiw", strict=True))


def _stage_ranks(sched: Schedule) -> list[int]:
    """The rank of each stage of a generated or imported schedule."""
    ranks = [0] * sched.num_stages
    for r in range(sched.pp):
        for st in sched.rank_stages(r):
            ranks[st] = r
    return ranks


def stage_times(x: Times, stage_rank: Sequence[int], label: str) -> Times:
    """Per-stage times from a rank slice's time (one number, or one per rank: split evenly over the rank's
    stages) or from per-stage times (one per stage, as given)."""
    stages, pp = len(stage_rank), max(stage_rank) + 1
    per_rank = stages // pp
    if isinstance(x, float):
        return x / per_rank if per_rank > 1 else x
    if len(x) == stages:
        return x
    if len(x) == pp:
        return [x[r] / per_rank for r in stage_rank]
    raise ShardwiseError(f"--{label} takes one number, {pp} per-rank numbers or {stages} per-stage numbers; got {len(x)}")


def simulate_options(schedule: str = "1f1b", pp: int = 4, microbatches: int = 8, vpp: int | None = None,
                     f: Times | str = 1.0, i: Times | str = 1.0, w: Times | str = 1.0, comm: float = 0.0,
                     mem_cap: float | None = None, w_retained: float = 1.0, imported: Schedule | None = None,
                     placement: str | None = None) -> SimResult:
    """`schedule simulate`: build the schedule, then time it (`SimResult.to_dict()` is its JSON)."""
    sched, times = build_schedule(schedule, pp, microbatches, vpp, f, i, w, comm, mem_cap, w_retained, imported, placement)
    return simulate(sched, *times, p2p_s=comm, w_retained_fraction=w_retained)
