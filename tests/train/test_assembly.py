"""The one composition of a step (train/assembly.py): what lives on each pipeline rank, a rank's memory and the
step's sum, for one plan and for arrays of plans alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.constants import default_constants
from shardwise.cost.lowp import job_device
from shardwise.cost.memory import ModelStateBytes
from shardwise.cost.stack import attention_kernel, stack_profile
from shardwise.pipeline import schedule_info
from shardwise.specs.job import job_from_mapping
from shardwise.specs.layout import Layout
from shardwise.specs.model_ref import load_model
from shardwise.train.assembly import (
    Costing,
    RankLoad,
    RankMemory,
    RankTail,
    peak_bytes,
    rank_contents,
    rank_tail,
    stages_of_rank,
    step_parts,
)
from shardwise.train.stages import stage_contents, stage_params


def test_interleaved_and_v_placements():
    """Interleaved 1F1B puts stage s on rank s mod p (Narayanan et al. 2021 Sec. 2.2, model chunks); the V
    placement of ZB-V puts rank r's two chunks at stages r and 2p-1-r (Qi et al. 2024, Zero Bubble Pipeline
    Parallelism, the ZB-V schedule)."""
    pp = 4
    assert stages_of_rank(schedule_info("interleaved").stage_to_rank(pp, 2), pp, 2) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert stages_of_rank(schedule_info("zbv").stage_to_rank(pp, 2), pp, 2) == [[0, 7], [1, 6], [2, 5], [3, 4]]


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"]), pp=st.sampled_from([1, 2, 3, 4, 8]),
       schedule=st.sampled_from(["1f1b", "interleaved", "zbv"]), tp=st.sampled_from([1, 2, 8]), ep=st.sampled_from([1, 8]))
def test_rank_contents_add_up_to_the_model(model, pp, schedule, tp, ep):
    """Every stage lives on exactly one rank; the ranks' layers, embedding, LM head and parameters add up to
    the stages' (so to the model's)."""
    spec = load_model(model)
    vpp = 2 if schedule != "1f1b" else 1
    if pp * vpp > spec.layers:
        return
    stages = stage_contents(spec, pp * vpp)
    mine = stages_of_rank(schedule_info(schedule).stage_to_rank(pp, vpp), pp, vpp)
    assert sorted(s for held in mine for s in held) == list(range(pp * vpp))
    ranks = rank_contents(spec, stages, mine, tp, ep)
    assert sum(r.layers for r in ranks) == spec.layers
    assert sum(r.embedding for r in ranks) == 1 and sum(r.lm_head for r in ranks) == 1
    want = np.sum([stage_params(spec, s, tp, ep) for s in stages], axis=0)
    assert [sum(r.p_dense for r in ranks), sum(r.p_exp for r in ranks)] == pytest.approx(list(want), rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1e11), min_size=5, max_size=5), st.floats(0.0, 0.5))
def test_memory_is_states_fixed_and_fragmented_activations(nums, frag):
    """states + fixed + (1 + frag) x activations, the same in the engines' breakdown (which splits the fixed
    memory into buffers and runtime and the fragmentation into its own row)."""
    w, g, o, fixed, act = nums
    mem = RankMemory(ModelStateBytes(w, g, o), fixed, act, frag)
    assert mem.total == pytest.approx(w + g + o + fixed + (1 + frag) * act, rel=1e-12)
    assert mem.breakdown(runtime=min(fixed, 1e9)).total == pytest.approx(mem.total, rel=1e-12, abs=1e-3)
    arrays = peak_bytes(np.array([w + g + o + fixed] * 2), np.array([act, 0.0]), frag)
    assert arrays[0] == pytest.approx(mem.total, rel=1e-12) and arrays[1] == pytest.approx(w + g + o + fixed, rel=1e-12)


def _ctx(framework="megatron"):
    job = job_from_mapping({"model": "mixtral-8x7b", "cluster": {"gpu": "H100-SXM", "gpus": 64},
                            "training": {"seq_len": 4096, "global_batch": 256, "framework": framework},
                            "parallel": {"tp": 2, "pp": 4, "ep": 8}})
    consts = default_constants()
    stack = stack_profile(framework, job.cluster.gpu.arch, None, consts)
    dev, lowp = job_device(job.cluster.gpu, job.training, consts, stack, attention_kernel(job.training, stack))
    return Costing(job.model, job.training, job.cluster, consts, stack, dev, lowp)


PLANS = st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]),
                  st.sampled_from([0, 1, 2, 3]), st.floats(1e8, 5e9), st.floats(0.0, 5e9), st.floats(1e-3, 1.0))


@settings(max_examples=15, deadline=None)
@given(st.lists(PLANS, min_size=1, max_size=5))
def test_rank_tail_of_arrays_is_each_plans_tail(plans):
    """The screen's call (every field an array, one element per plan) gives each plan what the estimate's call
    (plain numbers) gives it."""
    ctx = _ctx()
    cols = list(zip(*plans, strict=True))
    tp, cp, dp, ep, zero = (np.array(c) for c in cols[:5])
    p_dense, p_exp, fwd = (np.array(c) for c in cols[5:])
    many = rank_tail(ctx, Layout(tp=tp, cp=cp, dp=dp, ep=ep, etp=tp, zero=zero),
                     RankLoad(p_dense, p_exp, fwd, 2 * fwd, np.full(len(plans), 8)), microbatches=np.full(len(plans), 16))
    for k, (t, c, d, e, z, pd, pe, f) in enumerate(plans):
        one = rank_tail(ctx, Layout(tp=t, cp=c, dp=d, ep=e, zero=z), RankLoad(pd, pe, f, 2 * f, 8), microbatches=16)
        for name in ("fixed_bytes", "dp_s", "optimizer_s"):
            assert np.broadcast_to(getattr(many, name), (len(plans),))[k] == pytest.approx(getattr(one, name), rel=1e-12), name
        assert np.broadcast_to(many.states.total, (len(plans),))[k] == pytest.approx(one.states.total, rel=1e-12)
        assert isinstance(one, RankTail)


def test_step_is_the_sum_of_its_parts():
    """pipeline + straggler + data parallel + optimizer + host + offload copies; one node has no straggler
    wait (the slowest of one node is the mean)."""
    ctx = _ctx()
    one = step_parts(ctx, 10.0, 1, 0.5, 0.25, 0.125)
    assert one.straggler == 0.0
    assert one.total == 10.0 + 0.5 + 0.25 + one.host + 0.125
    many = step_parts(ctx, np.array([10.0, 20.0]), 64, np.array([0.5, 0.0]), np.array([0.25, 0.25]))
    assert many.straggler[1] == pytest.approx(2 * many.straggler[0], rel=1e-12) and many.straggler[0] > 0
    assert many.total.tolist() == pytest.approx([10.0 + many.straggler[0] + 0.5 + 0.25 + many.host,
                                                 20.0 + many.straggler[1] + 0.25 + many.host], rel=1e-12)


def test_without_a_pipeline_every_schedule_runs_the_same_step():
    """pp 1: a V-shaped schedule's placement names two stages, but the model has one; every schedule then
    runs the same forward and backward passes back to back (regression: zbv and dualpipev raised IndexError)."""
    from shardwise.pipeline.registry import list_schedules
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.estimate import estimate

    def step_s(schedule: str) -> float:
        return estimate(job_from_mapping({
            "model": "llama-3.1-8b", "cluster": {"gpu": "H100-SXM", "gpus": 8},
            "training": {"seq_len": 4096, "global_batch": 64},
            "parallel": {"tp": 1, "pp": 1, "zero": 1, "schedule": schedule}})).step_time_s

    reference = step_s("1f1b")
    assert {s: step_s(s) for s in list_schedules()} == {s: reference for s in list_schedules()}
