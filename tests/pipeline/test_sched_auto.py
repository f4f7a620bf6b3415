"""The automatic schedule and the comparison table."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.pipeline import check_schedule, compare_schedules, generate_schedule, simulate
from shardwise.pipeline.auto import auto_schedule
from shardwise.pipeline.options import simulate_options


def test_auto_is_registered_with_its_parameters():
    sched = generate_schedule("auto", 4, 8, f_s=1.0, i_s=1.0, w_s=1.0)
    assert sched.name == "auto" and check_schedule(sched) == []
    assert sched.params["mem_cap"] == 4  # default: 1F1B's p micro-batches
    assert max(simulate(sched).peak_activation_microbatches) <= 4


@pytest.mark.parametrize("p, m", [(4, 8), (4, 16), (8, 32)])
def test_auto_matches_zb_h1_at_1f1b_memory(p, m):
    """At 1F1B's memory and T_F = T_B = T_W the zero-bubble paper's ZB-1p equals ZB-H1 (its Table 5)."""
    auto = simulate(generate_schedule("auto", p, m))
    zb = simulate(generate_schedule("zb-h1", p, m))
    ref = simulate(generate_schedule("1f1b", p, m))
    assert auto.makespan <= zb.makespan + 1e-9 < ref.makespan


def test_auto_with_twice_the_memory_reaches_zero_stage_bubble():
    sched = generate_schedule("auto", 4, 16, mem_cap=8, objective="stage")
    res = simulate(sched)
    assert res.stage_bubble_ratio == pytest.approx(0.0, abs=1e-9)
    assert max(res.peak_activation_microbatches) <= 8


def test_auto_uses_the_given_times_and_activation_units():
    f, i, w = [1.0, 1.0, 1.0, 1.5], 1.2, 0.6
    sched = generate_schedule("auto", 4, 12, f_s=f, i_s=i, w_s=w, p2p_s=0.05, activation=[2.0] * 4, mem_cap=8.0)
    res = simulate(sched, f, i, w, p2p_s=0.05, activation=[2.0] * 4)
    assert max(res.peak_activation) <= 8.0
    assert res.makespan <= simulate(generate_schedule("1f1b", 4, 12), f, i, w, p2p_s=0.05).makespan


def test_auto_on_the_v_placement():
    sched = auto_schedule(4, 8, 2, 0.5, 0.5, 0.5, mem_cap=4, placement="v")
    assert sched.placement == "v" and check_schedule(sched) == []
    res = simulate(sched, 0.5, 0.5, 0.5)
    assert max(res.peak_activation_rank_microbatches) <= 4
    assert res.makespan <= simulate(generate_schedule("zbv", 4, 8), 0.5, 0.5, 0.5).makespan + 1e-9


@pytest.mark.parametrize(
    "kw, match",
    [({"mem_cap": 0.5}, "below one micro-batch"), ({"mem_cap": -1}, "positive"),
     ({"placement": "x"}, "placement"), ({"objective": "speed"}, "objective"), ({"f_s": [1, 2]}, "per-stage")],
)
def test_auto_bad_parameters(kw, match):
    with pytest.raises(ShardwiseError, match=match):
        generate_schedule("auto", 4, 8, **kw)


def test_auto_v_placement_needs_vpp_two():
    with pytest.raises(ShardwiseError, match="vpp=2"):
        auto_schedule(4, 8, 1, placement="v")


def test_compare_table_has_every_schedule_and_consistent_figures():
    rows = compare_schedules(4, 8)
    names = [r["schedule"] for r in rows]
    assert names[-1] == "auto" and len(names) == 11
    by = {r["schedule"]: r for r in rows}
    assert by["1f1b"]["bubble_fraction"] == pytest.approx(3 / 11)
    assert by["interleaved"]["bubble_ratio"] == pytest.approx(3 / 16)
    assert by["zbv"]["stage_bubble_ratio"] == pytest.approx(0.0, abs=1e-12)
    assert by["zb-h2"]["peak_activation_rank_microbatches"] == 7
    assert by["auto"]["makespan"] <= by["1f1b"]["makespan"]
    for r in rows:
        assert set(r) >= {"makespan", "bubble_fraction", "bubble_ratio", "stage_bubble_ratio",
                          "peak_activation_rank_microbatches"}


def test_compare_reports_inadmissible_schedules_instead_of_failing():
    rows = {r["schedule"]: r for r in compare_schedules(4, 6, names=["1f1b", "dualpipev", "interleaved"])}
    assert "error" in rows["dualpipev"] and "2*pp" in rows["dualpipev"]["error"]
    assert "makespan" in rows["1f1b"]


@settings(max_examples=25, deadline=None)
@given(pp=st.integers(2, 6), extra=st.integers(0, 12), vpp=st.sampled_from([2, 3]),
       times=st.lists(st.floats(0.3, 2.0), min_size=3, max_size=3), comm=st.sampled_from([0.0, 0.05, 0.3]),
       cap=st.one_of(st.none(), st.floats(1.0, 12.0)), retained=st.sampled_from([0.5, 1.0]))
def test_auto_in_compare_is_never_worse_than_a_named_schedule_at_the_same_memory(pp, extra, vpp, times, comm, cap,
                                                                                 retained):
    """A named schedule whose peak fits auto's cap (default pp micro-batches of a rank's slice) is never
    faster than auto's row, whatever its layout (one stage per rank, vpp looped, V)."""
    f, i, w = times
    rows = compare_schedules(pp, pp + extra, vpp, f, i, w, comm, cap, retained)
    auto = next(r for r in rows if r["schedule"] == "auto")
    limit = pp if cap is None else cap
    for r in rows:
        if r["schedule"] != "auto" and "error" not in r and r["peak_activation_rank_microbatches"] <= limit + 1e-9:
            assert "error" not in auto, auto
            assert auto["makespan"] <= r["makespan"] * (1 + 1e-9), (r, auto)
            assert auto["peak_activation_rank_microbatches"] <= limit + 1e-9
    if "error" not in auto:  # `schedule simulate --schedule auto` with the row's vpp and placement gives the row
        again = simulate_options("auto", pp, pp + extra, auto["vpp"], f, i, w, comm, cap, retained,
                                 placement=auto["placement"])
        assert again.makespan == pytest.approx(auto["makespan"], rel=1e-12)
