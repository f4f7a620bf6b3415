"""The planner's hybrid context parallelism (cp_comm a2a+p2p: Ulysses all-to-all inside groups of u ranks,
a ring across them; USP / Megatron-Core hierarchical CP) and the job's `parallel` fields it keeps fixed:
every Ulysses size the estimate accepts is searched, the screen costs each as the estimate does, and no
field of a job's `parallel` section is ignored."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import make_cluster
from shardwise.specs.job import check_plan
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.estimate import estimate
from shardwise.train.plan_inputs import plan_inputs, run_plan
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.screen import ScreenOptions, screen
from shardwise.train.search_space import CP_COMMS, EVERY_PLAN, FIXED_AXES, REASONS, enumerate_plans

HYBRID = CP_COMMS.index("a2a+p2p")
# 12 heads: heads per TP rank 12 (tp 1), 6 (tp 2), 3 (tp 4); Ulysses sizes must divide them.
TWELVE = {"name": "twelve-heads", "layers": 4, "hidden": 768, "heads": 12, "kv_heads": 12, "ffn": 2048, "vocab": 1000}
LONG = TrainingSpec(seq_len=32768, global_batch=16)


def _hybrid(c):
    return np.nonzero(c["cpc"] == HYBRID)[0]


def test_each_ulysses_size_that_divides_cp_and_the_heads_is_searched():
    """For each cp and tp: exactly the u with 1 < u < cp, u | cp and u | heads/tp (check_plan's rule)."""
    model = load_model(TWELVE)
    c = enumerate_plans(model, make_cluster("H100", 32), LONG, fixed={"pp": 1})
    found = {(int(c["tp"][i]), int(c["cp"][i]), int(c["uly"][i])) for i in _hybrid(c)}
    expected = {(tp, cp, u) for tp in (1, 2, 4) for cp in (4, 8, 16) for u in (2, 4, 8)
                if u < cp and (12 // tp) % u == 0 and 32 % (tp * cp) == 0}
    assert found == expected
    assert (2, 8, 4) not in found and (4, 4, 2) not in found  # 6 and 3 heads per TP rank
    assert c.rejected[REASONS["cp_ulysses"]] > 0
    for i in _hybrid(c)[::7]:
        plan = c.plan_dict(i)
        assert plan["ulysses"] == c["uly"][i]
        checked = check_plan(model, make_cluster("H100", 32), LONG, TrainPlan(**plan))
        assert checked.cp_a2a == plan["ulysses"]
    with pytest.raises(ShardwiseError, match="a2a\\+p2p needs the 6 attention heads per TP rank divisible by ulysses = 4"):
        check_plan(model, make_cluster("H100", 32), LONG, TrainPlan(tp=2, cp=8, cp_comm="a2a+p2p", ulysses=4))


def test_the_other_schemes_carry_their_all_to_all_ranks_and_no_ulysses():
    c = enumerate_plans(load_model("llama-3.1-8b"), make_cluster("H100", 16), TrainingSpec(seq_len=16384, global_batch=16))
    for scheme, ranks in (("p2p", 1), ("allgather", 1), ("a2a", c["cp"])):
        rows = c["cpc"] == CP_COMMS.index(scheme)
        assert rows.any() and np.array_equal(c["uly"][rows], np.broadcast_to(ranks, rows.shape)[rows])
    assert all("ulysses" not in c.plan_dict(i) for i in np.nonzero(c["cpc"] != HYBRID)[0][::97])


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_screen_costs_a_hybrid_plan_as_the_estimate_does(seed):
    """Without a pipeline the screen's step is the estimate's (compute, exposed CP traffic, DP and optimizer
    step) and with 1F1B's closed form its memory too: a hybrid plan's Ulysses size reaches its cost."""
    model, cluster = load_model("llama-3.1-8b"), make_cluster("H100", 32)
    c = enumerate_plans(model, cluster, LONG, fixed={"pp": 1, "cp_comm": "a2a+p2p"})
    s = screen(c, model, cluster, LONG)
    i = int(np.random.default_rng(seed).integers(len(c)))
    e = estimate(job_from_plan(model, cluster, LONG, c.plan_dict(i)))
    assert s["step_s"][i] == pytest.approx(e.step_time_s, rel=1e-9), c.plan_dict(i)
    assert s["step_lb_s"][i] == pytest.approx(e.step_time_s, rel=1e-9)
    assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=1e-9)


def test_the_screen_matches_the_estimate_on_pipelined_hybrid_plans():
    model, cluster = load_model("llama-3.1-8b"), make_cluster("H100", 32)
    c = enumerate_plans(model, cluster, LONG, schedules=("1f1b",), fixed={"cp_comm": "a2a+p2p", "pp": 2})
    s = screen(c, model, cluster, LONG)
    picked = np.nonzero(c["vpp"] == 1)[0][:: max(1, len(c) // 25)]
    assert len({int(c["uly"][i]) for i in picked}) > 1
    for i in picked:
        e = estimate(job_from_plan(model, cluster, LONG, c.plan_dict(i)))
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=1e-9), c.plan_dict(i)
        assert s["step_lb_s"][i] <= e.step_time_s * (1 + 1e-9)


def test_the_planner_can_choose_a_hybrid_plan():
    """cp 16 over two nodes: the search ranks the hybrid plans with the rest; its best is no slower than the
    best hybrid plan, and reproduces."""
    model, cluster = load_model("llama-3.1-8b"), make_cluster("H100", 16)
    res = plan_search(model, cluster, LONG, fixed={"cp": 16}, top_k=3, max_exact=32)
    best = res.top[0]
    again = estimate(job_from_plan(model, cluster, LONG, {k: v for k, v in best.plan.items() if k not in EVERY_PLAN}))
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-9)
    hybrid = plan_search(model, cluster, LONG, fixed={"cp": 16, "cp_comm": "a2a+p2p"}, top_k=1, max_exact=16).top[0]
    assert hybrid.plan["cp_comm"] == "a2a+p2p" and hybrid.plan["ulysses"] in (2, 4, 8)
    assert best.step_time_s <= hybrid.step_time_s * (1 + 1e-9)


# --- the job's `parallel` fields ----------------------------------------------------------------------

MODEL, CLUSTER = load_model("llama-3.1-8b"), make_cluster("H100", 16)
TRAINING = TrainingSpec(seq_len=8192, global_batch=32)


def test_every_plan_field_is_taken():
    assert set(FIXED_AXES) | set(EVERY_PLAN) == set(TrainPlan.model_fields)
    with pytest.raises(ShardwiseError, match="parallel.bogus: not a plan field"):
        enumerate_plans(MODEL, CLUSTER, TRAINING, fixed={"bogus": 1})


def test_a_fixed_ulysses_size_is_kept():
    c = enumerate_plans(MODEL, CLUSTER, TRAINING, fixed={"cp_comm": "a2a+p2p", "ulysses": 2})
    assert set(c["uly"].tolist()) == {2} and set(c["cpc"].tolist()) == {HYBRID}
    assert set(c["cp"].tolist()) == {2, 4, 8, 16}  # u = cp is allowed when the job asks (the ring has one rank)
    assert c.rejected[REASONS["ulysses_cp"]] > 0  # cp 1
    best = plan_search(MODEL, CLUSTER, TRAINING, fixed={"cp_comm": "a2a+p2p", "ulysses": 2}, top_k=1, max_exact=8).top[0]
    assert best.plan["ulysses"] == 2 and best.plan["cp_comm"] == "a2a+p2p"
    with pytest.raises(ShardwiseError, match="parallel.ulysses: only used with cp_comm a2a\\+p2p"):
        enumerate_plans(MODEL, CLUSTER, TRAINING, fixed={"ulysses": 2})
    with pytest.raises(ShardwiseError, match="ulysses does not divide cp"):
        plan_search(MODEL, CLUSTER, TRAINING, fixed={"cp_comm": "a2a+p2p", "ulysses": 3})


def test_a_fixed_dp_is_kept():
    c = enumerate_plans(MODEL, CLUSTER, TRAINING, fixed={"dp": 4})
    assert set(c["dp"].tolist()) == {4} and c.rejected[REASONS["dp_fixed"]] > 0
    assert plan_search(MODEL, CLUSTER, TRAINING, fixed={"dp": 4}, top_k=1, max_exact=8).top[0].plan["dp"] == 4


def test_a_fixed_dp_shard_is_carried_and_costed():
    """HSDP over 2 ranks: every plan's dp*cp is a multiple of 2, the screen's memory is the estimate's, and
    the states are sharded over 2 ranks, not all of dp*cp."""
    c = enumerate_plans(MODEL, CLUSTER, TRAINING, schedules=("1f1b",), fixed={"dp_shard": 2, "zero": 3})
    assert ((c["dp"] * c["cp"]) % 2 == 0).all() and c.rejected[REASONS["dp_shard"]] > 0
    s = screen(c, MODEL, CLUSTER, TRAINING, options=ScreenOptions(dp_shard=2))
    full = screen(c, MODEL, CLUSTER, TRAINING)
    for i in np.nonzero(c["vpp"] == 1)[0][:: max(1, len(c) // 15)]:
        e = estimate(job_from_plan(MODEL, CLUSTER, TRAINING, c.plan_dict(i), {"dp_shard": 2}))
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=1e-9)
        assert s["memory_bytes"][i] >= full["memory_bytes"][i] * (1 - 1e-12)
    best = plan_search(MODEL, CLUSTER, TRAINING, fixed={"dp_shard": 2}, top_k=1, max_exact=8).top[0]
    assert best.plan["dp_shard"] == 2


def test_a_fixed_offload_is_carried_and_needs_zero():
    c = enumerate_plans(MODEL, CLUSTER, TRAINING, schedules=("1f1b",), fixed={"offload": "optimizer"})
    assert set(c["zero"].tolist()) == {1, 2, 3} and c.rejected[REASONS["offload_zero"]] > 0
    s = screen(c, MODEL, CLUSTER, TRAINING, options=ScreenOptions(offload="optimizer"))
    for i in np.nonzero((c["vpp"] == 1) & (c["pp"] == 1))[0][:: 40]:
        e = estimate(job_from_plan(MODEL, CLUSTER, TRAINING, c.plan_dict(i), {"offload": "optimizer"}))
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=1e-9)
        assert s["step_s"][i] == pytest.approx(e.step_time_s, rel=1e-9)
    best = plan_search(MODEL, CLUSTER, TRAINING, fixed={"offload": "optimizer"}, top_k=1, max_exact=8).top[0]
    assert best.plan["offload"] == "optimizer" and best.plan["zero"] >= 1


def test_a_job_files_parallel_section_reaches_the_search():
    """Through the CLI's reading of a job (plan_inputs): parsed values ("false" is False), none dropped."""
    doc = {"model": "llama-3.1-8b", "cluster": {"gpu": "H100", "gpus": 16}, "training": {"seq_len": 8192, "global_batch": 32},
           "parallel": {"sequence_parallel": "false", "cp": 4, "cp_comm": "a2a+p2p", "ulysses": 2, "offload": "optimizer",
                        "dp_shard": 2, "dp": "auto"}}
    inputs = plan_inputs(doc)
    assert inputs.fixed["sequence_parallel"] is False
    _, top, _ = run_plan(inputs, top=1, exact_budget=8)
    p = top[0].plan
    assert (p["sequence_parallel"], p["cp"], p["cp_comm"], p["ulysses"], p["offload"], p["dp_shard"]) == \
        (False, 4, "a2a+p2p", 2, "optimizer", 2)
