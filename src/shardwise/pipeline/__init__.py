"""Pipeline schedules: one IR, every named schedule, a timed and memory-aware simulator.

Knows nothing of models: stage times and activation sizes come from the caller (``train`` uses the
cost model). Public API::

    from shardwise.pipeline import generate_schedule, simulate, list_schedules
    sched = generate_schedule("zbv", pp=8, microbatches=32)
    res = simulate(sched, f_s=1.0, i_s=1.0, w_s=1.0, p2p_s=0.0)
    res.makespan, res.bubble_fraction, res.stage_bubble_ratio, res.peak_activation_microbatches
"""

from shardwise.pipeline.auto import auto_schedule, compare_schedules
from shardwise.pipeline.csvio import dump_csv, load_csv, read_csv_text, write_csv_text
from shardwise.pipeline.ir import Action, Kind, Schedule, from_text, make_schedule, parse_action
from shardwise.pipeline.registry import generate_schedule, list_schedules, resolve, schedule_info
from shardwise.pipeline.simulate import DEFAULT_W_RETAINED_FRACTION, SimResult, simulate
from shardwise.pipeline.validate import check_schedule, validate_schedule

__all__ = [
    "DEFAULT_W_RETAINED_FRACTION",
    "Action",
    "Kind",
    "Schedule",
    "SimResult",
    "auto_schedule",
    "check_schedule",
    "compare_schedules",
    "dump_csv",
    "from_text",
    "generate_schedule",
    "list_schedules",
    "load_csv",
    "make_schedule",
    "parse_action",
    "read_csv_text",
    "resolve",
    "schedule_info",
    "simulate",
    "validate_schedule",
    "write_csv_text",
]
