"""The steady-state extrapolation (pipeline/steady.py) equals the full simulation, for every schedule.

Stage times are small integers, so every sum the simulator forms is exact in floating point and the
extrapolated figures must equal the fully simulated ones bit for bit — no tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.pipeline import (
    Schedule,
    SimResult,
    auto_schedule,
    generate_schedule,
    list_schedules,
    schedule_info,
    simulate,
)
from shardwise.pipeline.steady import find_cycle, simulate_steady

NAMED = [n for n in list_schedules() if n != "auto"]
REPRESENTATIVE = 4  # the sample is then 8 micro-batches per virtual stage


def _vpp(name: str, pick: int) -> int | None:
    rule = schedule_info(name).vpp_rule
    if rule.fixed or rule.highest == rule.lowest:
        return None
    return rule.lowest + pick % 2


@st.composite
def cases(draw, names=tuple(NAMED)):
    name = draw(st.sampled_from(names))
    pp = draw(st.integers(2, 5))
    vpp = _vpp(name, draw(st.integers(0, 1)))
    stages = pp * schedule_info(name).stages_per_rank(pp, vpp)
    times = st.lists(st.integers(0, 5), min_size=stages, max_size=stages)
    f = np.array(draw(times), float) + 1.0  # forwards take at least 1
    i, w = np.array(draw(times), float) + 1.0, np.array(draw(times), float)
    p2p = float(draw(st.integers(0, 2)))
    act = np.array(draw(times), float) + 1.0
    grouped = (vpp or 1) > 1 and schedule_info(name).rounds_of_pp
    granularity = pp if grouped else 1
    sample = -(-max(REPRESENTATIVE, 8 * stages) // granularity) * granularity
    m = draw(st.integers(2 * sample + 1, 5 * sample))
    m = -(-m // granularity) * granularity
    kw = {"f_s": f, "i_s": i, "w_s": w, "p2p_s": p2p, "activation": act, "w_retained_fraction": 0.5}
    return name, pp, vpp, stages, granularity, m, kw


def _same(a: SimResult, b: SimResult) -> None:
    assert a.makespan == b.makespan
    assert a.rank_spans == b.rank_spans and a.rank_busy == b.rank_busy
    assert a.peak_activation == b.peak_activation
    assert a.peak_activation_microbatches == b.peak_activation_microbatches
    assert a.critical_rank == b.critical_rank and a.stage_span == b.stage_span
    assert a.bubble_fraction == b.bubble_fraction and a.bubble_ratio == b.bubble_ratio
    assert a.stage_bubble_ratio == b.stage_bubble_ratio


@settings(max_examples=60, deadline=None)
@given(cases())
def test_extrapolation_equals_full_simulation(case):
    name, pp, vpp, stages, g, m, kw = case

    def build(k: int) -> Schedule:
        return generate_schedule(name, pp, k, vpp)

    got = simulate_steady(build, m, kw, stages, g, REPRESENTATIVE)
    assert got.exact  # extrapolated (or, where the steady state settles late, simulated in full)
    _same(got, simulate(build(m), **kw))


@pytest.mark.parametrize("name", NAMED)
def test_every_schedule_is_extrapolated(name):
    """Far beyond the sample every schedule is extrapolated, and still equals the full simulation."""
    pp, vpp = 3, _vpp(name, 0)
    stages = pp * schedule_info(name).stages_per_rank(pp, vpp)
    g = pp if (vpp or 1) > 1 and schedule_info(name).rounds_of_pp else 1
    rng = np.random.default_rng(7)
    kw = {"f_s": rng.integers(1, 5, stages).astype(float), "i_s": rng.integers(1, 5, stages).astype(float),
          "w_s": rng.integers(0, 3, stages).astype(float), "p2p_s": 1.0}
    m = 40 * 8 * stages * g

    def build(k: int) -> Schedule:
        return generate_schedule(name, pp, k, vpp)

    got = simulate_steady(build, m, kw, stages, g, REPRESENTATIVE)
    assert got.extrapolated_from is not None and got.extrapolated_from < m // 10 and got.exact
    _same(got, simulate(build(m), **kw))


@pytest.mark.parametrize("vpp", [1, 2])
def test_auto_schedule_is_searched_at_the_sample_size(vpp):
    """`auto` is a greedy search per micro-batch count, so the extrapolation repeats the steady state of the
    schedule found at the sample size; the full search at the target count may pick another variant. The
    step times agree closely (the steady state is what both repeat)."""
    pp, stages = 2, 2 * vpp
    f, i, w = np.array([2.0, 1, 3, 1][:stages]), np.array([1.0, 3, 2, 2][:stages]), np.array([1.0, 1, 0, 2][:stages])
    kw = {"f_s": f, "i_s": i, "w_s": w, "p2p_s": 1.0}

    def build(k: int) -> Schedule:
        return auto_schedule(pp, k, vpp, f, i, w, 1.0, placement="v" if vpp == 2 else "loop", objective="stage")

    m = 8 * stages * 2 + 7
    got = simulate_steady(build, m, kw, stages, 1, REPRESENTATIVE)
    full = simulate(build(m), **kw)
    assert got.extrapolated_from is not None
    assert got.stage_span == pytest.approx(full.stage_span, rel=0.02)


def test_cycle_longer_than_one_microbatch():
    """1F1B on 3 ranks with these stage times settles into a cycle of 2 micro-batches (increments
    alternate 39, 36 per pp micro-batches): the extrapolation must find it, not assume 1."""
    f, i, w = np.array([5.0, 5, 1]), np.array([3.0, 4, 2]), np.array([2.0, 2, 2])
    kw = {"f_s": f, "i_s": i, "w_s": w, "p2p_s": 2.0}
    sample = simulate(generate_schedule("1f1b", 3, 60), **kw)
    assert find_cycle(sample) not in (None, 1)
    got = simulate_steady(lambda k: generate_schedule("1f1b", 3, k), 1001, kw, 3, 1, REPRESENTATIVE)
    _same(got, simulate(generate_schedule("1f1b", 3, 1001), **kw))


def test_small_counts_are_simulated_in_full():
    kw = {"f_s": 1.0, "i_s": 1.0, "w_s": 1.0}
    res = simulate_steady(lambda k: generate_schedule("zbv", 4, k), 40, kw, 8)
    assert res.extrapolated_from is None and len(res.starts) == 4
