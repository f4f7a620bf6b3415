"""Simulator semantics on hand-checkable cases, and the validator."""

import json

import numpy as np
import pytest

from shardwise.errors import ShardwiseError
from shardwise.pipeline import check_schedule, from_text, generate_schedule, simulate, validate_schedule


def test_two_rank_1f1b_timeline_by_hand():
    # rank 0: 0F0 0F1 0B0 0B1 ; rank 1: 1F0 1B0 1F1 1B1 ; F=1, B=2, hop 0.5
    res = simulate(generate_schedule("1f1b", 2, 2), 1.0, 1.0, 1.0, p2p_s=0.5)
    t0 = res.timeline(0)
    t1 = res.timeline(1)
    assert [a["action"] for a in t0] == ["0F0", "0F1", "0B0", "0B1"]
    # 1F0 waits one hop for 0F0; 0B0 waits for 1B0 (ends 4.5) plus a hop; 0B1 for 1B1 (7.5) plus a hop
    assert [(a["start"], a["end"]) for a in t0] == [(0, 1), (1, 2), (5, 7), (8, 10)]
    assert [(a["start"], a["end"]) for a in t1] == [(1.5, 2.5), (2.5, 4.5), (4.5, 5.5), (5.5, 7.5)]
    assert res.makespan == 10 and res.rank_spans == [10.0, 6.0] and res.rank_busy == [6.0, 6.0]
    assert res.bubble_fraction == pytest.approx(1 - 12 / 20)
    assert res.bubble_ratio == pytest.approx(8 / 12)
    assert res.critical_rank == 0 and res.stage_bubble_ratio == pytest.approx(4 / 10)


def test_same_rank_hops_are_free_in_the_v():
    """ZB-V puts stages p-1 and p on rank p-1: F(p-1) -> F(p) costs no hop, the other crossings do."""
    sched = generate_schedule("zbv", 2, 1)  # stages 0,3 on rank 0 and 1,2 on rank 1
    res = simulate(sched, 1.0, 1.0, 1.0, p2p_s=10.0)
    starts = {a["action"]: a["start"] for r in range(2) for a in res.timeline(r)}
    assert starts["1F0"] == 11.0  # 0F0 ends at 1, one hop
    assert starts["2F0"] == 12.0  # right after 1F0 on the same rank
    assert starts["3F0"] == 23.0  # hop back to rank 0
    assert starts["3I0"] == 24.0  # last stage needs its own F only
    assert starts["2I0"] == 35.0  # 3I0 ends at 25, one hop
    assert starts["1I0"] == 37.0  # same rank as 2I0, but the IR runs 2W0 in between
    assert starts["0I0"] == 48.0


def test_uneven_stages_and_explicit_fused_backward():
    sched = generate_schedule("1f1b", 4, 8)
    f = [1.5, 1.0, 1.0, 2.0]  # embedding on the first stage, LM head on the last
    res = simulate(sched, f, 1.0, 1.0)
    assert res.rank_busy == pytest.approx([8 * (x + 2.0) for x in f])
    slower = simulate(sched, f, 1.0, 1.0, b_s=3.0)
    assert slower.rank_busy == pytest.approx([8 * (x + 3.0) for x in f])
    assert slower.makespan > res.makespan


def test_activation_memory_deltas():
    # rank 0 of ZB-H1 with p=2, m=2: 0F0 0F1 0I0 0W0 0I1 0W1
    sched = generate_schedule("zb-h1", 2, 2)
    assert [str(a) for a in sched.ranks[0]] == ["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"]
    for rho, expect in ((1.0, 2.0), (0.25, 2.0)):
        assert simulate(sched, w_retained_fraction=rho).peak_activation_microbatches[0] == expect
    # rank 1: 1F0 1I0 1F1 1I1 1W0 1W1 -> with rho the W-retained part stacks up
    assert simulate(sched, w_retained_fraction=1.0).peak_activation_microbatches[1] == 2.0
    assert simulate(sched, w_retained_fraction=0.25).peak_activation_microbatches[1] == 1.25
    res = simulate(sched, activation=[3.0, 5.0])
    assert res.peak_activation == [6.0, 10.0] and res.peak_activation_microbatches == [2.0, 2.0]


def test_to_dict_is_json_with_the_documented_keys():
    res = simulate(generate_schedule("zbv", 4, 8), 0.5, 0.5, 0.5)
    d = json.loads(json.dumps(res.to_dict()))
    for key in ("makespan", "bubble_fraction", "bubble_ratio", "stage_bubble_ratio",
                "peak_activation_microbatches", "ranks", "rank_spans", "rank_busy"):
        assert key in d
    assert len(d["ranks"]) == 4 and len(d["peak_activation_microbatches"]) == 4
    first = d["ranks"][0][0]
    assert set(first) == {"action", "stage", "microbatch", "kind", "start", "end"}
    assert sum(len(r) for r in d["ranks"]) == 3 * 8 * 8
    assert "ranks" not in res.to_dict(timeline=False)


@pytest.mark.parametrize(
    "kw, match",
    [({"f_s": [1.0, 2.0]}, "4 per-stage values"), ({"i_s": -1.0}, ">= 0"), ({"p2p_s": float("nan")}, "p2p_s"),
     ({"w_retained_fraction": 1.5}, r"\[0, 1\]"), ({"activation": [1, 1, 1]}, "activation")],
)
def test_bad_simulation_inputs(kw, match):
    with pytest.raises(ShardwiseError, match=match):
        simulate(generate_schedule("1f1b", 4, 8), **kw)


# --- validator -----------------------------------------------------------------------------------------

def test_generated_schedules_validate():
    for name in ("gpipe", "1f1b", "interleaved", "bfs", "zb-h1", "zb-h2", "zbv", "v-half", "v-min", "dualpipev"):
        assert check_schedule(generate_schedule(name, 4, 8)) == [], name


@pytest.mark.parametrize(
    "text, match",
    [
        ("0F0 0B0\n1F0\n", r"needs one fused B or one I and one W.*\(1,0\): B x0"),
        ("0F0 0F0 0B0\n1F0 1B0\n", "duplicated forward"),
        ("0F0 0W0 0I0\n1F0 1I0 1W0\n", "W before its I"),
        ("0B0 0F0\n1F0 1B0\n", "B before its F"),
        ("0F0 0B0 0I0 0W0\n1F0 1B0\n", r"B x1, I x1, W x1"),
        ("0F0 0B0 0F1 0B1\n1F1 1F0 1B0 1B1\n", "deadlock: rank 0 waits at 0B0 for 1I/B0"),
    ],
)
def test_validator_reports_what_is_wrong(text, match):
    sched = from_text(text)
    assert any(__import__("re").search(match, p) for p in check_schedule(sched)), check_schedule(sched)
    with pytest.raises(ShardwiseError, match="invalid"):
        validate_schedule(sched)


def test_deadlock_is_reported_by_the_simulator_too():
    sched = from_text("0F0 0B0 0F1 0B1\n1F1 1B1 1F0 1B0\n")
    assert check_schedule(sched)[0].startswith("deadlock")
    with pytest.raises(ShardwiseError, match="deadlocks: .*rank 1 waits at 1F1 for 0F1"):
        simulate(sched)


def test_action_on_the_wrong_rank_for_the_declared_map():
    sched = generate_schedule("1f1b", 2, 2)
    swapped = type(sched)(sched.name, 2, 2, (1, 0), sched.codes)
    assert "belongs to rank" in check_schedule(swapped)[0]
    with pytest.raises(ShardwiseError, match="stage-to-rank map puts stage 0 on rank 1"):
        simulate(swapped)


def test_out_of_range_microbatch_named():
    sched = from_text("0F0 0F5 0B0 0B5\n1F0 1F5 1B0 1B5\n", microbatches=2)
    assert "outside" in check_schedule(sched)[0]
    assert np.isfinite(simulate(generate_schedule("1f1b", 2, 2)).makespan)
