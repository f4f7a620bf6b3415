"""train estimate: invariants, consistency of the breakdowns, and behaviour across plans."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate


def job(**parallel):
    doc = {
        "model": parallel.pop("model", "llama-3.1-70b"),
        "cluster": {"gpu": parallel.pop("gpu", "H100-SXM"), "gpus": parallel.pop("gpus", 64)},
        "training": {"seq_len": parallel.pop("seq_len", 8192), "global_batch": parallel.pop("global_batch", 64), "tokens": 1e12},
        "parallel": {"tp": 8, "pp": 4, "sequence_parallel": True, "recompute": "selective", **parallel},
    }
    return job_from_mapping(doc)


def test_breakdowns_add_up_and_json_has_the_contract_keys():
    e = estimate(job())
    assert e.time_s.total == pytest.approx(e.step_time_s, rel=1e-9)
    assert e.memory.total / 2**30 == pytest.approx(e.peak_memory_gib)
    d = e.to_dict()
    for key in ("step_time_s", "tokens_per_s_per_gpu", "samples_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "mfu_causal", "hfu", "peak_memory_gib", "fits", "days_to_train", "cost_usd"):
        assert key in d
    assert set(d["memory_gib"]) == {"params", "grads", "optimizer", "activations", "buffers", "fragmentation", "runtime"}
    # allocated < reserved < device: the caching allocator's fragmentation, then the CUDA context and NCCL
    assert d["peak_allocated_gib"] < d["peak_reserved_gib"] < d["peak_memory_gib"]
    m = e.memory
    assert m.reserved - m.allocated == pytest.approx(m.fragmentation)
    assert m.total - m.reserved == pytest.approx(m.runtime)
    assert {"compute", "tp_comm", "pp_comm", "dp_comm", "cp_comm", "ep_comm", "bubble", "optimizer"} <= set(d["time_s"])
    assert d["days_to_train"] == pytest.approx(1e12 / (64 * 8192) * e.step_time_s / 86400)
    assert d["cost_usd"] == pytest.approx(d["days_to_train"] * 24 * 64 * 6.88)


def test_deterministic():
    assert estimate(job()).to_dict() == estimate(job()).to_dict()


def test_memoised_rank_tails_follow_their_constants():
    """The per-rank tails (states, DP communication, optimizer step) are memoised per job and constants:
    a second estimate of the same job reuses them, and other constants (a new object) get their own."""
    from dataclasses import replace

    from shardwise.cost.constants import default_constants
    from shardwise.train.assembly import _memo_tail

    j = job(zero=1)
    _memo_tail.cache_clear()
    first = estimate(j)
    misses = _memo_tail.cache_info().misses
    assert estimate(j).to_dict() == first.to_dict()
    assert _memo_tail.cache_info().misses == misses  # every tail served from the memo
    c = default_constants()
    heavier = replace(c, step=replace(c.step, optimizer_bytes_per_param=10 * c.step.optimizer_bytes_per_param))
    assert estimate(j, heavier).time_s.optimizer == pytest.approx(10 * first.time_s.optimizer, rel=1e-9)


def test_does_not_fit_is_not_an_error():
    e = estimate(job(model="llama-3.1-405b", gpus=8, tp=8, pp=1))
    assert not e.fits and e.peak_memory_gib > 80


def test_more_microbatches_shrink_the_bubble_share():
    small, large = estimate(job(global_batch=16)), estimate(job(global_batch=256))
    assert large.time_s.bubble / large.step_time_s < small.time_s.bubble / small.step_time_s
    # 1F1B with equal stages: bubble = (p - 1)/m of the busy time (Narayanan et al. 2021 Sec. 2.2).
    m = small.microbatches
    busy = small.time_s.compute + small.time_s.tp_comm
    assert small.time_s.bubble == pytest.approx(busy * 3 / m, rel=0.15)


def test_interleaving_cuts_the_bubble_and_raises_memory():
    plain, inter = estimate(job(global_batch=32)), estimate(job(global_batch=32, vpp=2, schedule="interleaved"))
    assert inter.time_s.bubble < plain.time_s.bubble
    assert inter.memory.activations > plain.memory.activations


def test_zero_stages_reduce_memory_monotonically():
    mems = [estimate(job(pp=1, zero=z)).memory for z in (0, 1, 2, 3)]
    totals = [m.params + m.grads + m.optimizer for m in mems]
    assert totals == sorted(totals, reverse=True)


def test_full_recompute_saves_memory_and_costs_time():
    sel, full = estimate(job(recompute="selective")), estimate(job(recompute="full"))
    assert full.memory.activations < sel.memory.activations
    assert full.step_time_s > sel.step_time_s
    assert full.hfu > full.mfu


def test_context_and_expert_parallel():
    base = dict(model="llama-3.1-8b", tp=1, pp=1, seq_len=131072, global_batch=8, gpus=8)
    one, cp = estimate(job(cp=1, **base)), estimate(job(cp=8, **base))
    assert cp.memory.activations < one.memory.activations / 6  # the sequence is split 8 ways
    assert cp.time_s.cp_comm == 0.0  # K/V gathers hide under the long attention (Ring Attention)
    moe = estimate(job(model="mixtral-8x7b", tp=2, pp=1, ep=8, global_batch=64))
    assert moe.time_s.ep_comm > 0
    dense_like = estimate(job(model="mixtral-8x7b", tp=2, pp=1, ep=1, global_batch=64))
    assert moe.memory.params < dense_like.memory.params  # experts sharded over EP


PLANS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]),
    "pp": st.sampled_from([1, 2, 4]),
    "zero": st.sampled_from([0, 1, 2, 3]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "micro_batch": st.sampled_from([1, 2]),
    "sequence_parallel": st.booleans(),
    "flash_attention": st.booleans(),
    "gpu": st.sampled_from(["A100-80GB", "H100-SXM", "MI300X", "L40S"]),
})


@settings(max_examples=60, deadline=None)
@given(p=PLANS)
def test_utilisation_bounded_and_positive(p):
    e = estimate(job(model="llama-3.1-8b", gpus=32, global_batch=64, seq_len=4096, **p))
    assert 0 < e.mfu_causal <= e.hfu <= 1.0  # HFU: the causal work plus what is recomputed
    assert e.mfu_causal <= e.mfu  # the full-attention convention counts more
    if p["recompute"] == "none":
        assert e.hfu == pytest.approx(e.mfu_causal, rel=1e-12)
    assert e.step_time_s > 0 and all(math.isfinite(v) and v >= 0 for v in vars(e.time_s).values())
    assert e.time_s.total == pytest.approx(e.step_time_s, rel=1e-9)


def test_uneven_layers_put_extras_in_the_middle():
    e = estimate(job(model="llama-3.1-405b", gpus=128, pp=16))  # 126 layers on 16 stages: 7 at the ends, 8 inside
    f = e.stage_times_s["F"]
    assert f[1] > f[0] * 0.9 and max(f[1:-1]) == pytest.approx(f[7])


def test_unknown_schedule_is_a_clear_error():
    with pytest.raises(ShardwiseError, match="unknown schedule"):
        estimate(job(schedule="wavy"))


@pytest.mark.parametrize("name", ["zbv", "v-half", "v-min", "dualpipev"])
def test_v_shaped_schedules_take_two_stages_per_rank(name):
    e = estimate(job(schedule=name, vpp=1, global_batch=64))
    assert e.plan["vpp"] == 2 and len(e.stage_times_s["F"]) == 8
    # Rank 0 holds the first and the last stage: the embedding and the LM head.
    assert e.memory_per_rank_gib[0] == max(e.memory_per_rank_gib)


def test_bubble_definition_follows_the_schedule_family():
    assert "per-rank span" in estimate(job(schedule="zb-h1", global_batch=64)).bubble_definition
    assert "global makespan" in estimate(job(schedule="1f1b", global_batch=64)).bubble_definition


@pytest.mark.parametrize("framework, exposed", [("megatron", True), ("torchtitan", True), ("maxtext", False)])
def test_host_step_overhead_is_exposed_except_where_the_step_is_one_compiled_program(framework, exposed):
    """A 0.25 s per-step host overhead adds 0.25 s to a PyTorch stack's step and nothing to MaxText's,
    whose jitted step the host queues ahead (stacks.yaml, host_step_overhead); the planner's screen agrees."""
    from dataclasses import replace

    import numpy as np

    from shardwise.cost.constants import default_constants
    from shardwise.train.screen import screen
    from shardwise.train.search_space import enumerate_plans

    base = default_constants()
    slow = replace(base, step=replace(base.step, step_overhead_s=base.step.step_overhead_s + 0.25))
    j = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "H100-SXM", "gpus": 8},
                          "training": {"seq_len": 4096, "global_batch": 16, "framework": framework},
                          "parallel": {"zero": 1, "recompute": "selective"}})
    added = estimate(j, slow).step_time_s - estimate(j, base).step_time_s
    assert added == pytest.approx(0.25 if exposed else 0.0, abs=1e-12)
    assert estimate(j, slow).time_s.overhead == pytest.approx(slow.step.step_overhead_s if exposed else 0.0)
    c = enumerate_plans(j.model, j.cluster, j.training)
    gap = screen(c, j.model, j.cluster, j.training, constants=slow)["step_s"] - screen(c, j.model, j.cluster, j.training, constants=base)["step_s"]
    assert np.allclose(gap, 0.25 if exposed else 0.0, atol=1e-12)
