"""Planner: exact top-K, determinism, bounds, Pareto front, the screen's closed forms."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.pipeline import generate_schedule, schedule_info, simulate
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.pareto import pareto_front
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.screen import screen
from shardwise.train.search_space import enumerate_plans

MODEL, CLUSTER, TRAINING = load_model("llama-3.1-8b"), make_cluster("H100", 8), TrainingSpec(seq_len=4096, global_batch=32)


@pytest.fixture(scope="module")
def result():
    return plan_search(MODEL, CLUSTER, TRAINING, top_k=3, max_exact=512)


def test_deterministic(result):
    again = plan_search(MODEL, CLUSTER, TRAINING, top_k=3, max_exact=512)
    assert [e.to_dict() for e in again.top] == [e.to_dict() for e in result.top]
    assert again.front == result.front and again.rejected == result.rejected


def test_top_is_sorted_and_beats_random_feasible_plans(result):
    steps = [e.step_time_s for e in result.top]
    assert steps == sorted(steps) and not result.notes  # the bound closed the search within the budget
    c = enumerate_plans(MODEL, CLUSTER, TRAINING)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(c), 25, replace=False):
        e = estimate(job_from_plan(MODEL, CLUSTER, TRAINING, c.plan_dict(i)))
        if e.fits:
            assert e.step_time_s >= result.top[0].step_time_s * (1 - 1e-9)


def test_screen_lower_bound_is_valid_and_memory_close():
    c = enumerate_plans(MODEL, make_cluster("A100-80GB", 16), TrainingSpec(seq_len=4096, global_batch=64))
    s = screen(c, MODEL, make_cluster("A100-80GB", 16), TrainingSpec(seq_len=4096, global_batch=64))
    rng = np.random.default_rng(1)
    for i in rng.choice(len(c), 40, replace=False):
        e = estimate(job_from_plan(MODEL, make_cluster("A100-80GB", 16), TrainingSpec(seq_len=4096, global_batch=64), c.plan_dict(i)))
        assert s["step_lb_s"][i] <= e.step_time_s * (1 + 1e-9)
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=0.2)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b", "interleaved", "bfs", "zb-h1", "zb-h2", "zbv", "v-half", "v-min", "dualpipev"]),
       pp=st.sampled_from([2, 4, 8]), m_mult=st.sampled_from([1, 2, 4]))
def test_inflight_closed_forms_never_below_the_simulator(name, pp, m_mult):
    v = 2 if name in ("interleaved", "zbv", "v-half", "v-min", "dualpipev") else 1
    m = pp * m_mult
    try:
        sched = generate_schedule(name, pp, m, v)
    except ShardwiseError:  # the schedule does not admit (pp, m, vpp)
        return
    sim = simulate(sched, 1.0, 1.0, 1.0, 0.0)
    for r in range(pp):
        closed = float(schedule_info(name).inflight(pp, v, np.array([m]), r)[0])
        assert closed >= sim.peak_activation_microbatches[r] - 1e-9
        assert closed <= 1.5 * sim.peak_activation_microbatches[r] + 1


@pytest.mark.parametrize("name,v", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-h2", 1), ("zbv", 2)])
def test_bubble_units_match_the_simulator(name, v):
    for pp in (4, 8):
        for m in (pp, 2 * pp, 4 * pp):
            sched = generate_schedule(name, pp, m, v)
            sim = simulate(sched, 1.0, 1.0, 1.0, 0.0)
            per_rank = v if name not in ("zbv",) else 2
            time = sim.stage_span if name in ("zb-h1", "zb-h2", "zbv") else sim.makespan
            measured = (time - m * 3 * per_rank) / 3
            assert float(schedule_info(name).bubble_units(pp, v, np.array([m]))[0]) == pytest.approx(measured, abs=0.35 * pp)


def test_pareto_front_hand_example():
    tput = np.array([10, 8, 12, 12, 5])
    mem = np.array([50, 30, 70, 80, 30])
    assert pareto_front(tput, mem).tolist() == [1, 0, 2]


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=40))
def test_pareto_front_is_exactly_the_undominated_set(points):
    a = np.array(points)
    front = set(pareto_front(a[:, 0], a[:, 1]).tolist())
    for i, (t, m) in enumerate(points):
        dominated = any((t2 >= t and m2 <= m) and (t2 > t or m2 < m) for t2, m2 in points)
        duplicate_of_kept = any(j in front and points[j] == (t, m) for j in range(len(points)) if j != i)
        assert (i in front) == (not dominated and not (duplicate_of_kept and i not in front))


def test_front_contains_the_best_plan(result):
    best = result.top[0]
    assert any(p["exact"] and p["step_time_s"] == best.step_time_s for p in result.front)
    mems = [p["peak_memory_gib"] for p in result.front]
    tputs = [p["tokens_per_s_per_gpu"] for p in result.front]
    assert mems == sorted(mems) and tputs == sorted(tputs)


def test_screen_memory_is_exact_where_the_inflight_count_is():
    """GPipe and 1F1B with one stage per rank: the in-flight counts are exact closed forms and the
    screen's memory assembly is the estimate's (train/assembly.py), so the two agree to rounding."""
    cluster, training = make_cluster("A100-80GB", 16), TrainingSpec(seq_len=4096, global_batch=64)
    c = enumerate_plans(MODEL, cluster, training, schedules=("gpipe", "1f1b"))
    s = screen(c, MODEL, cluster, training)
    picked = [i for i in range(len(c)) if c["vpp"][i] == 1][:: max(1, len(c) // 60)]
    assert len(picked) >= 20
    for i in picked:
        e = estimate(job_from_plan(MODEL, cluster, training, c.plan_dict(i)))
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=1e-9), c.plan_dict(i)


@pytest.mark.parametrize("gpus, seq, batch", [(8, 4096, 32), (16, 8192, 64)])
def test_stop_rule_heuristic_finds_the_exhaustive_best(gpus, seq, batch):
    """The planner stops once max(lower bound, APPROX_TRUST x approximation) cannot beat its K-th best:
    a heuristic, not a bound. Against estimating every plan that fits exactly, its best plan is the best
   ."""
    cluster, training = make_cluster("A100-80GB", gpus), TrainingSpec(seq_len=seq, global_batch=batch)
    res = plan_search(MODEL, cluster, training, top_k=3)
    c = enumerate_plans(MODEL, cluster, training)
    s = screen(c, MODEL, cluster, training)
    fits = np.nonzero(s["memory_bytes"] <= cluster.usable_memory_bytes)[0]
    best = min(estimate(job_from_plan(MODEL, cluster, training, c.plan_dict(i)), split_p2p=False).step_time_s for i in fits)
    assert res.top[0].step_time_s == pytest.approx(best, rel=1e-9)
