"""Every registered schedule's record (ScheduleInfo) is complete and agrees with what its generator builds:
the vpp rule and the admissible micro-batch counts with what the generator accepts, the placement with the
generated stage-to-rank map, the closed forms with the simulator, the step time with the family's papers."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.errors import ShardwiseError
from shardwise.pipeline import Schedule, generate_schedule, list_schedules, schedule_info, simulate
from shardwise.pipeline.registry import planner_schedules
from shardwise.pipeline.schedule_info import LOOP, V_WHEN_TWO, ScheduleInfo, StepTime, V, VppRule

ALL = list_schedules()


def _builds(name: str, pp: int, m: int, vpp: int) -> Schedule | None:
    try:
        return generate_schedule(name, pp, m, vpp)
    except ShardwiseError:
        return None


@pytest.mark.parametrize("name", ALL)
def test_every_field_is_defined(name):
    info = schedule_info(name)
    assert isinstance(info, ScheduleInfo) and info.name == name
    assert info.description and any(ch.isdigit() for ch in info.description)  # cites its source (a year)
    assert isinstance(info.vpp_rule, VppRule) and info.vpp_rule.admits(info.vpp_rule.default)
    assert info.placement in (LOOP, V, V_WHEN_TWO)
    assert isinstance(info.step_time, StepTime)
    m = np.arange(1, 17)
    for pp in (2, 4):
        for v in info.vpp_rule.options((1, 2, 3, 4), 64):
            bubble = info.bubble_units(pp, v, m)
            assert np.shape(bubble) == m.shape and np.all(np.isfinite(bubble)) and np.all(bubble >= 0)
            for r in range(pp):
                inflight = info.inflight(pp, v, m, r)
                assert np.shape(inflight) == m.shape and np.all(inflight >= 1)
            assert info.admits(np.full(len(m), pp), m, np.full(len(m), v)).shape == m.shape


@pytest.mark.parametrize("name", ALL)
def test_vpp_rule_and_admissible_counts_match_the_generator(name):
    info = schedule_info(name)
    counts = range(1, 10) if info.takes_costs else range(1, 13)
    for pp in (2, 3, 4):
        for vpp in (1, 2, 3):
            for m in counts:
                expected = info.vpp_rule.admits(vpp) and bool(info.admits(pp, m, vpp))
                assert (_builds(name, pp, m, vpp) is not None) == expected, (name, pp, m, vpp)


@pytest.mark.parametrize("name", ALL)
def test_placement_and_stages_per_rank_match_the_generated_schedule(name):
    info = schedule_info(name)
    for pp in (2, 4):
        for vpp in info.vpp_rule.options((1, 2, 3), 64):
            sched = generate_schedule(name, pp, 4 * pp, vpp)
            assert info.stage_to_rank(pp, vpp) == tuple(sched.stage_to_rank)
            assert sched.placement == info.placement_at(vpp)
            assert info.stages_per_rank(pp, vpp) == sched.vpp


@pytest.mark.parametrize("name", ALL)
def test_inflight_closed_form_is_never_below_the_simulator(name):
    info = schedule_info(name)
    for pp in (2, 4):
        for vpp in info.vpp_rule.options((1, 2, 3), 64):
            for m in (pp, 2 * pp, 4 * pp):
                sched = _builds(name, pp, m, vpp)
                if sched is None:
                    continue
                peak = simulate(sched, 1.0, 1.0, 1.0, 0.0).peak_activation_microbatches
                closed = [float(info.inflight(pp, sched.vpp, np.array([m]), r)[0]) for r in range(pp)]
                assert all(c >= p - 1e-9 for c, p in zip(closed, peak, strict=True)), (name, pp, vpp, m, closed, peak)


def test_step_time_follows_the_papers():
    """Zero-bubble schedules are timed on the per-rank span (optimizer post-validation, Qi et al. 2024
    Sec. 4); the classic ones and DualPipeV, whose report synchronises the optimizer step, on the makespan."""
    span = {n for n in ALL if schedule_info(n).step_time is StepTime.RANK_SPAN}
    assert span == {"zb-h1", "zb-h2", "zbv", "v-half", "v-min", "auto"}


def test_the_planner_searches_every_fixed_order_by_default():
    assert set(planner_schedules()) == {n for n in ALL if not schedule_info(n).takes_costs}
    assert planner_schedules()[0] == "1f1b"  # ties between equal plans go to the simplest schedule
