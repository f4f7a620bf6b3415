"""`rl plan` prunes by a lower bound on each candidate's period: the bound never exceeds the simulated figure,
and the pruned search reports exactly what simulating every candidate (brute force) reports."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.rl.batch import draw_batch
from shardwise.rl.phases import rollout_lower_bound_s, rollout_serve_job, run_rollout
from shardwise.rl.planner import RLPlanResult, plan_rl
from shardwise.rl.spec import PlacementSpec, parse_rl_job
from shardwise.rl.step import PeriodBound, RLEstimate, estimate_rl
from shardwise.serve.lengths import LengthSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainPlan

SMALL = {
    "policy": "llama-3.1-8b", "reference": True, "reward": {"cpu_s_per_sample": 0.05, "cpu_workers": 64},
    "algorithm": {"name": "grpo", "prompts_per_step": 32, "responses_per_prompt": 8, "mini_batches": 2, "max_staleness": 2},
    "rollout": {"input_len": {"dist": "lognormal", "median": 300, "sigma": 0.4, "max": 1024},
                "output_len": {"dist": "lognormal", "median": 800, "sigma": 0.8, "max": 4096}, "tp": 1,
                "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.85}},
    "cluster": {"gpu": "H100-SXM", "gpus": 32},
    "training": {"framework": "fsdp", "precision": "bf16"},
    "parallel": {"tp": 1, "zero": 3, "recompute": "full", "micro_batch": 1},
    "placement": {"kind": "colocated", "mode": "sync"},
}


def _doc(staleness: int, output_median: int, gpus: int = 32, policy: str = "llama-3.1-8b") -> dict:
    doc = copy.deepcopy(SMALL)
    doc["policy"] = policy
    doc["algorithm"]["max_staleness"] = staleness
    doc["rollout"]["output_len"]["median"] = output_median
    doc["cluster"]["gpus"] = gpus
    return doc


def _figures(res: RLPlanResult, top: int) -> dict:
    out = res.to_dict(top)
    out.pop("seconds")
    out.pop("bounded_not_simulated")
    return out


@pytest.mark.parametrize(("staleness", "median", "top", "policy"), [
    (2, 800, 5, "llama-3.1-8b"), (0, 800, 3, "llama-3.1-8b"), (1, 200, 1, "llama-3.1-8b"), (2, 2500, 8, "llama-3.1-8b"),
    (2, 800, 5, "llama-3.1-70b"),  # most training pools too small: rejections, in the same order and words
])
def test_pruned_plan_reports_what_brute_force_reports(staleness, median, top, policy):
    job = parse_rl_job(_doc(staleness, median, policy=policy))
    brute = plan_rl(job, top, prune=False)
    pruned = plan_rl(job, top)
    assert brute.bounded == 0
    assert _figures(pruned, top) == _figures(brute, top)
    assert pruned.feasible == len(brute.ranked)


def test_period_bound_is_below_every_candidates_period():
    """Each candidate's bound (bound_only) against its full estimate, over the placements the planner tries."""
    job = parse_rl_job(_doc(2, 1200))
    brute = plan_rl(job, 100, prune=False)
    checked = 0
    for e in brute.ranked:
        if e.placement["mode"] == "async":
            continue
        kind, mode = e.placement["kind"], e.placement["mode"]
        placement = {"kind": kind, "mode": mode} if kind == "split" else {"kind": kind, "offload": "all" if e.placement["offload"] else "none"}
        if kind == "split":
            placement["rollout_gpus"] = e.pools["rollout"]
        plan = TrainPlan(**{k: v for k, v in e.train_estimate.plan.items() if k in TrainPlan.model_fields and k != "tp_overlap"})
        run = job.with_placement(PlacementSpec(**placement), plan=plan, tp=e.placement["rollout_tp"])
        bound, full = estimate_rl(run, bound_only=True), estimate_rl(run)
        assert isinstance(bound, PeriodBound) and isinstance(full, RLEstimate)
        assert bound.period_s <= full.period_s
        assert bound.fits == full.fits and bound.offload == full.memory["offload"]
        checked += 1
    assert checked >= 10


@settings(max_examples=25, deadline=None)
@given(prompts=st.integers(1, 24), group=st.integers(1, 8), median=st.integers(20, 3000), sigma=st.floats(0.1, 1.2),
       tp=st.sampled_from([1, 2, 4, 8]), replicas=st.integers(1, 4), seqs=st.sampled_from([4, 16, 64, 256]),
       engine=st.sampled_from([{}, {"chunked_prefill": False, "version": "vllm-0.6.0", "max_num_batched_tokens": 16384},
                               {"version": "vllm-0.6.0", "num_scheduler_steps": 8}, {"scheduler": "sglang"}]),
       util=st.sampled_from([0.3, 0.9]), seed=st.integers(0, 1000))
def test_rollout_lower_bound_never_exceeds_the_simulated_makespan(prompts, group, median, sigma, tp, replicas, seqs, engine, util, seed):
    """The bound (phases.rollout_lower_bound_s) against the serving simulator, over batch shapes, tails, TP,
    replicas, sequence limits, a small KV share (preemption) and the vLLM V1 / V0 / multi-step / SGLang
    schedulers."""
    inp = LengthSpec.model_validate({"dist": "lognormal", "median": 300, "sigma": 0.5, "max": 2048})
    out = LengthSpec.model_validate({"dist": "lognormal", "median": median, "sigma": sigma, "max": 8192})
    requests = draw_batch(inp, out, prompts, group, seed, 16384)
    engine = {"max_num_batched_tokens": 4096, **engine, "max_num_seqs": seqs, "gpu_memory_utilization": util}
    job = rollout_serve_job(load_model("llama-3.1-8b"), "H100-SXM", tp * replicas, tp, 1, "bf16", engine, None, "t")
    bound = rollout_lower_bound_s(job, requests)
    assert bound is not None and bound > 0
    makespan = run_rollout(job, requests).time_s
    assert bound <= makespan
    assert np.isfinite(makespan)


@pytest.mark.parametrize(("model", "tp", "util", "preempts"), [
    ("llama-3.1-8b", 1, 0.3, True), ("llama-3.1-70b", 4, 0.6, True), ("llama-3.1-70b", 8, 0.9, False),
])
def test_rollout_lower_bound_holds_under_preemption_and_for_a_70b(model, tp, util, preempts):
    """Long-tail responses in a KV cache too small for the batch (recomputed preemptions) and a 70B replica."""
    inp = LengthSpec.model_validate({"dist": "lognormal", "median": 300, "sigma": 0.5, "max": 2048})
    out = LengthSpec.model_validate({"dist": "lognormal", "median": 3000, "sigma": 0.8, "max": 8192})
    requests = draw_batch(inp, out, 24, 8, 1, 16384)
    job = rollout_serve_job(load_model(model), "H100-SXM", tp, tp, 1, "bf16", {"max_num_seqs": 256, "gpu_memory_utilization": util},
                            None, "t")
    rollout = run_rollout(job, requests)
    assert (int(rollout.sim.preemptions.sum()) > 0) == preempts
    assert 0 < rollout_lower_bound_s(job, requests) <= rollout.time_s
