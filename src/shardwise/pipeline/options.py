"""A schedule and its simulation from the options a user gives: the one reading of `schedule simulate`'s
inputs that the CLI (flags) and the web API (fields) share."""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import Schedule
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
                   imported: Schedule | None = None) -> tuple[Schedule, tuple[Times, Times, Times]]:
    """The named schedule (`auto` is searched for these times) or an imported one (validated), and the
    per-stage F/I/W times."""
    times = (parse_times(f, "f"), parse_times(i, "i"), parse_times(w, "w"))
    if imported is not None:
        return validate_schedule(imported), times
    kw = {}
    if schedule_info(schedule).takes_costs:
        kw = {"f_s": times[0], "i_s": times[1], "w_s": times[2], "p2p_s": comm, "mem_cap": mem_cap,
              "w_retained_fraction": w_retained}
    elif mem_cap is not None:
        raise ShardwiseError("--mem-cap only applies to --schedule auto")
    return generate_schedule(schedule, pp, microbatches, vpp, **kw), times


def simulate_options(schedule: str = "1f1b", pp: int = 4, microbatches: int = 8, vpp: int | None = None,
                     f: Times | str = 1.0, i: Times | str = 1.0, w: Times | str = 1.0, comm: float = 0.0,
                     mem_cap: float | None = None, w_retained: float = 1.0, imported: Schedule | None = None) -> SimResult:
    """`schedule simulate`: build the schedule, then time it (`SimResult.to_dict()` is its JSON)."""
    sched, times = build_schedule(schedule, pp, microbatches, vpp, f, i, w, comm, mem_cap, w_retained, imported)
    return simulate(sched, *times, p2p_s=comm, w_retained_fraction=w_retained)
