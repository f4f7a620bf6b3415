"""The seam between the cost model and the schedule engine: per-stage F/I/W times in; step time,
bubble and peak activations per rank out, from the exact event simulation of the schedule's IR
(:mod:`shardwise.pipeline`).

Which time is the step time depends on the schedule (its ``step_time``,
:class:`shardwise.pipeline.schedule_info.StepTime`): the global makespan for classic schedules, the
longest per-rank span for the zero-bubble family run with optimizer post-validation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from shardwise.errors import ShardwiseError
from shardwise.memo import quick_init
from shardwise.pipeline import SimResult, generate_schedule, resolve, schedule_info, simulate
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, Schedule
from shardwise.pipeline.registry import stages_per_rank
from shardwise.pipeline.schedule_info import StepTime
from shardwise.pipeline.steady import simulate_steady
from shardwise.specs.training import TrainPlan


@quick_init
@dataclass(frozen=True)
class PipelineTiming:
    step_s: float  # pipelined forward/backward part of the step, in the sense of `bubble_definition`
    makespan_s: float  # global makespan
    span_s: float  # longest per-rank span
    critical_rank: int  # the rank whose time sets step_s
    rank_busy_s: tuple[float, ...]
    pp_comm_s: float  # what point-to-point transfers add to step_s
    peak_activation: tuple[float, ...]  # per rank, in the units of the per-stage activations given
    stage_to_rank: tuple[int, ...]
    bubble_definition: str
    bubble_fraction: float  # idle share of the global makespan
    stage_bubble_ratio: float  # idle share of the longest per-rank span
    simulated_microbatches: int | None = None  # set when the steady state was extrapolated (pipeline.steady)
    exact: bool = True
    #: the arguments of :func:`simulate_pipeline` that reproduce this timing (for traces)
    inputs: tuple = field(default=(), compare=False, repr=False)

    @property
    def bubble_s(self) -> float:
        """Idle time of the critical rank within step_s, point-to-point waits excluded."""
        return max(0.0, self.step_s - self.pp_comm_s - self.rank_busy_s[self.critical_rank])


@lru_cache(maxsize=512)
def cached_schedule(name: str, pp: int, microbatches: int, vpp: int, group: int | None = None) -> Schedule:
    """Generated IR of a named schedule (pure: cached). A V-shaped schedule takes vpp 2 as given; `group`:
    an interleaved schedule's micro-batches per round (TrainPlan.microbatch_group; None: its default)."""
    return generate_schedule(name, pp, microbatches, vpp, **({"group": group} if group else {}))


def check_group(plan: TrainPlan, microbatches: int) -> None:
    """microbatch_group (N) is a knob of the interleaved depth-first schedules: 1 <= N <= micro-batches."""
    if plan.microbatch_group is None:
        return
    if "group" not in schedule_info(plan.schedule).parameters or plan.vpp < 2:
        raise ShardwiseError(f"parallel.microbatch_group: only interleaved schedules (interleaved, zb-h1 with vpp >= 2) "
                             f"group micro-batches (schedule {plan.schedule}, vpp {plan.vpp}); leave it out")
    if plan.microbatch_group > microbatches:
        raise ShardwiseError(f"parallel.microbatch_group: {plan.microbatch_group} exceeds the {microbatches} micro-batches "
                             f"of a step; use at most {microbatches}")


def plan_stages_per_rank(plan: TrainPlan) -> int:
    """Stages per pipeline rank the plan's schedule runs (V-shaped: 2); a schedule or vpp it does not
    admit is a ShardwiseError naming the job field."""
    try:
        if plan.pp == 1:  # no pipeline: the schedule only has to exist
            resolve(plan.schedule)
            return plan.vpp
        return stages_per_rank(plan.schedule, plan.pp, plan.vpp)
    except ShardwiseError as exc:
        where = "parallel.schedule" if str(exc).startswith("unknown schedule") else "parallel.vpp"
        raise ShardwiseError(f"{where}: {exc}") from None


def pipeline_timing(
    schedule: str,
    pp: int,
    vpp: int,
    microbatches: int,
    f_s: list[float],
    i_s: list[float],
    w_s: list[float],
    p2p_s: float | tuple[float, ...],
    activation: list[float],
    w_retained_fraction: float = 1.0,
    activation_cap: float | None = None,
    split_p2p: bool = True,
    group: int | None = None,
) -> PipelineTiming:
    """Simulate `schedule` on per-virtual-stage costs; `p2p_s` is one hop time or one per stage
    boundary (links that differ, as between GPU groups). `activation_cap` (per rank, in the units of
    `activation`) is the memory limit the `auto` schedule is searched under. `split_p2p` runs a second
    simulation without transfers to tell point-to-point time from bubble (otherwise both are bubble).
    `group`: an interleaved schedule's micro-batches per round (TrainPlan.microbatch_group).
    Pure, so cached: plans that differ only outside the pipeline (ZeRO stage, say) share one simulation."""
    cap = activation_cap if schedule_info(schedule).takes_costs else None
    hops = tuple(float(x) for x in p2p_s) if isinstance(p2p_s, tuple | list) else float(p2p_s)
    return _timed(resolve(schedule), pp, vpp, microbatches, tuple(f_s), tuple(i_s), tuple(w_s), hops,
                  tuple(activation), float(w_retained_fraction), cap, split_p2p, group)


def _longest(p2p_s: float | tuple[float, ...]) -> float:
    """One hop time, or the longest of one per stage boundary."""
    return max(p2p_s, default=0.0) if isinstance(p2p_s, tuple) else p2p_s


def _builder(name: str, pp: int, vpp: int, f_s: float | Sequence[float], i_s: float | Sequence[float],
             w_s: float | Sequence[float], p2p_s: float | tuple, activation: Sequence[float] | None,
             w_retained_fraction: float, activation_cap: float | None, group: int | None = None) -> Callable[[int], Schedule]:
    """The schedule IR for a micro-batch count (``auto``: searched under ``activation_cap`` for these costs,
    for its step time, on the placement its record gives for ``vpp``; with one hop time per boundary, the longest)."""
    info = schedule_info(name)
    if info.takes_costs:
        objective = "stage" if info.step_time is StepTime.RANK_SPAN else "makespan"

        def build(m: int) -> Schedule:
            return generate_schedule(name, pp, m, vpp, f_s=f_s, i_s=i_s, w_s=w_s, p2p_s=_longest(p2p_s),
                                     mem_cap=activation_cap, activation=activation, w_retained_fraction=w_retained_fraction,
                                     objective=objective)
        return build
    return lambda m: cached_schedule(name, pp, m, vpp, group)


def simulate_pipeline(name: str, pp: int, vpp: int, microbatches: int, f_s: float | Sequence[float],
                      i_s: float | Sequence[float], w_s: float | Sequence[float], p2p_s: float,
                      activation: Sequence[float] | None,
                      w_retained_fraction: float = 1.0, activation_cap: float | None = None,
                      group: int | None = None) -> tuple[Schedule, SimResult]:
    """The schedule IR (``auto``: searched under ``activation_cap``) and its full simulation (a trace
    draws every action). With one stage every schedule but GPipe is F then B per micro-batch (what
    :func:`pipeline_timing` assumes)."""
    if pp == 1 and name != "gpipe":
        name, vpp = "1f1b", 1
    sched = _builder(name, pp, vpp, f_s, i_s, w_s, p2p_s, activation, w_retained_fraction, activation_cap, group)(microbatches)
    return sched, simulate(sched, f_s, i_s, w_s, p2p_s, activation, w_retained_fraction)


@lru_cache(maxsize=2048)
def _timed(name: str, pp: int, vpp: int, microbatches: int, f_s: tuple, i_s: tuple, w_s: tuple, p2p_s: float | tuple,
           activation: tuple, w_retained_fraction: float, activation_cap: float | None, split_p2p: bool,
           group: int | None = None) -> PipelineTiming:
    inputs = (name, pp, vpp, microbatches, f_s, i_s, w_s, p2p_s, activation, w_retained_fraction, activation_cap, group)
    if pp == 1:
        busy = sum(f_s) + sum(i_s) + sum(w_s)
        total = microbatches * busy
        peak = (sum(activation) if name != "gpipe" else microbatches * sum(activation),)
        return PipelineTiming(total, total, total, 0, (total,), 0.0, peak, tuple([0] * len(f_s)),
                              StepTime.MAKESPAN.value, 0.0, 0.0,
                              inputs=inputs)
    info = schedule_info(name)
    build = _builder(name, pp, vpp, f_s, i_s, w_s, p2p_s, activation, w_retained_fraction, activation_cap, group)
    stages = len(f_s)
    # Interleaved orders group micro-batches by pp (or the plan's group) once there are many: counts that are
    # not multiples of it (admitted only below pp^2 by default) are simulated in full.
    grouped = vpp > 1 and info.rounds_of_pp
    period = (group or pp) if grouped else 1
    steady = microbatches % period == 0
    kw = {"f_s": f_s, "i_s": i_s, "w_s": w_s, "activation": activation, "w_retained_fraction": w_retained_fraction}

    split = _longest(p2p_s) > 0 and split_p2p

    def timed(p2p: float | tuple, without_hops: bool = False) -> SimResult:
        if not steady:
            return simulate(build(microbatches), p2p_s=p2p, without_hops=without_hops, timeline=False, **kw)
        return simulate_steady(build, microbatches, {**kw, "p2p_s": p2p, "without_hops": without_hops, "timeline": False},
                               stages, period, grow=not info.takes_costs)  # auto searches per count: one sample size only

    # The timing without hops tells point-to-point time from bubble; a simulation that is not extrapolated
    # gives it from the same pass (SimResult.without_hops), otherwise it is a second simulation.
    res = timed(p2p_s, split)
    span_rule = info.step_time is StepTime.RANK_SPAN
    if split:
        if res.without_hops is not None:
            free_makespan, free_span = res.without_hops
        else:
            free = timed(0.0)
            free_makespan, free_span = free.makespan, free.stage_span
        pp_comm = (res.stage_span - free_span) if span_rule else (res.makespan - free_makespan)
    else:
        pp_comm = 0.0
    if span_rule:
        crit = max(range(pp), key=lambda r: res.rank_spans[r])
        step = res.stage_span
    else:
        crit = max(range(pp), key=lambda r: res.rank_busy[r])
        step = res.makespan
    return PipelineTiming(
        step_s=step,
        makespan_s=res.makespan,
        span_s=res.stage_span,
        critical_rank=crit,
        rank_busy_s=tuple(res.rank_busy),
        pp_comm_s=max(0.0, pp_comm),
        peak_activation=tuple(res.peak_activation),
        stage_to_rank=info.stage_to_rank(pp, vpp),
        bubble_definition=info.step_time.value,
        bubble_fraction=res.bubble_fraction,
        stage_bubble_ratio=res.stage_bubble_ratio,
        simulated_microbatches=res.extrapolated_from,
        exact=res.exact,
        inputs=inputs,
    )


@lru_cache(maxsize=256)
def forward_backward_gaps(inputs: tuple) -> tuple[tuple[float, ...], ...]:
    """Per virtual stage, the seconds from each micro-batch's forward end to its backward start (I or a
    fused B) in the full simulation of the schedule `inputs` (:attr:`PipelineTiming.inputs`): the time an
    activation offload can hide in (cost/act_offload.py). One stage (pp 1): F then B, no gap."""
    name, pp, vpp, m, f_s, i_s, w_s, p2p_s, activation, w_retained, cap, group = inputs
    if pp == 1:
        return tuple((0.0,) * m for _ in f_s)
    _, res = simulate_pipeline(name, pp, vpp, m, f_s, i_s, w_s, p2p_s, activation, w_retained, cap, group)
    f_end: dict[tuple[int, int], float] = {}
    b_start: dict[tuple[int, int], float] = {}
    for acts, starts, ends in zip(res.actions, res.starts, res.ends, strict=True):
        for (s, mb, k), t0, t1 in zip(acts.tolist(), starts.tolist(), ends.tolist(), strict=True):
            if k == F_CODE:
                f_end[(s, mb)] = t1
            elif k in (I_CODE, B_CODE):
                b_start[(s, mb)] = t0
    return tuple(tuple(max(0.0, b_start[(s, j)] - f_end[(s, j)]) for j in range(m) if (s, j) in f_end and (s, j) in b_start)
                 for s in range(len(f_s)))
