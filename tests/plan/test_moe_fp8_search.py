"""The planner's MoE, context-parallel and low-precision knobs: expert parallelism folded over the
tp*cp*dp ranks of a stage with its own expert TP (Liu et al. 2025, MoE Parallel Folding), the CP
schemes, and the FP8/FP4 recipes; each rejection named, the screen agreeing with the exact estimate."""

import numpy as np
import pytest

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import make_cluster
from shardwise.specs.job import check_plan, job_from_mapping
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import FP8_RECIPES, TrainingSpec, TrainPlan
from shardwise.train.estimate import estimate
from shardwise.train.plan_report import job_mapping
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.screen import (
    dominated,
    dominated_recipes,
    layer_table,
    screen,
)
from shardwise.train.search_space import CP_COMMS, REASONS, enumerate_plans

MOE = {"name": "tiny-moe", "layers": 4, "hidden": 512, "heads": 8, "kv_heads": 8, "ffn": 1024, "vocab": 1000,
       "experts": 8, "top_k": 2, "expert_ffn": 512}


def fp8(**kw):
    return TrainingSpec(seq_len=4096, global_batch=32, precision="fp8", **kw)


@pytest.mark.parametrize("gpu,reason", [
    ("H100", "fp8 recipe mxfp8 needs a Blackwell GPU"),  # MX block scaling: Blackwell tensor cores
    ("L40S", "fp8 recipe blockwise needs a Blackwell or Hopper GPU"),  # Ada has FP8 but not 1x128 blocks in TE
    ("A100-80GB", "fp8 recipe tensorwise needs fp8 tensor cores (A100-80GB has none)"),
])
def test_each_recipe_reason(gpu, reason):
    c = enumerate_plans(load_model(MOE), make_cluster(gpu, 8), fp8())
    assert c.rejected[reason] > 0
    assert reason.split()[2] not in {c.recipes[k] for k in set(c["rcp"].tolist())}


def test_a_gpu_without_fp8_runs_no_fp8_plan():
    with pytest.raises(ShardwiseError, match="needs fp8 tensor cores"):
        plan_search(load_model(MOE), make_cluster("A100-80GB", 8), fp8())


def test_blackwell_runs_every_fp8_recipe():
    c = enumerate_plans(load_model(MOE), make_cluster("B200", 8), fp8())
    assert c.recipes == FP8_RECIPES
    assert {c.recipes[k] for k in set(c["rcp"].tolist())} == set(FP8_RECIPES)


def test_recipe_search_limits_and_pins():
    model, cluster = load_model(MOE), make_cluster("H100", 8)
    assert enumerate_plans(model, cluster, fp8(), recipes=("rowwise", "delayed")).recipes == ("rowwise", "delayed")
    assert enumerate_plans(model, cluster, fp8(fp8_recipe="blockwise")).recipes == ("blockwise",)
    with pytest.raises(ShardwiseError, match="--fp8-recipes: nvfp4 is not a fp8 recipe"):
        enumerate_plans(model, cluster, fp8(), recipes=("nvfp4",))
    with pytest.raises(ShardwiseError, match="--fp8-recipes: recipes need precision fp8"):
        enumerate_plans(model, cluster, TrainingSpec(seq_len=4096, global_batch=32), recipes=("rowwise",))


def test_an_fp8_search_reports_and_reproduces_its_recipe():
    """The best plan of a rowwise-only search runs rowwise; its job mapping carries the recipe, and that
    job estimates to the same step time."""
    model, cluster, training = load_model(MOE), make_cluster("H100", 8), fp8()
    res = plan_search(model, cluster, training, recipes=("rowwise",), top_k=2, max_exact=16)
    best = res.top[0]
    assert best.fp8_recipe == "rowwise"
    job = job_mapping(best, model, training, [cluster])
    assert job["training"]["fp8_recipe"] == "rowwise"
    again = estimate(job_from_plan(model, cluster, training.model_copy(update={"fp8_recipe": "rowwise"}),
                                   {k: v for k, v in best.plan.items() if k not in ("flash_attention", "overlap_grad_reduce")}))
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-9)
    searched = plan_search(model, cluster, training, top_k=1, max_exact=16).top[0]
    assert searched.fp8_recipe in set(FP8_RECIPES) - {"mxfp8"}
    assert searched.step_time_s <= best.step_time_s * (1 + 1e-9)  # the full search has rowwise among its choices


def test_folding_makes_ep_wider_than_dp_valid():
    """tp 2, pp 8, ep 32 on 256 GPUs: dp 16, the 32 ranks of a stage split as etp 1 x ep 32 (MoE Parallel
    Folding Sec. 3); with etp = tp = 2 the experts would need 64 ranks."""
    model, cluster, training = load_model("qwen3-235b-a22b"), make_cluster("H100", 256), TrainingSpec(seq_len=4096, global_batch=256)
    plan = check_plan(model, cluster, training, TrainPlan(tp=2, pp=8, ep=32, etp=1))
    assert plan.dp == 16
    with pytest.raises(ShardwiseError, match="ep\\*etp = 32\\*2 must divide the tp\\*cp\\*dp = 32 ranks"):
        check_plan(model, cluster, training, TrainPlan(tp=2, pp=8, ep=32))
    c = enumerate_plans(model, cluster, training, fixed={"tp": 2, "pp": 8, "ep": 32, "cp": 1})
    assert set(c["etp"].tolist()) == {1}
    assert c.rejected[REASONS["fold"]] > 0


def test_the_planner_finds_an_expert_parallel_plan():
    """Mixtral-8x22B (141B parameters) on 64 H100s: the experts are spread over an expert-parallel group."""
    model, cluster = load_model("mixtral-8x22b"), make_cluster("H100", 64)
    res = plan_search(model, cluster, TrainingSpec(seq_len=4096, global_batch=256), top_k=3, max_exact=32)
    for e in res.top:
        p = e.plan
        assert (p["tp"] * p["cp"] * p["dp"]) % (p["ep"] * (p["etp"] or p["tp"])) == 0
    assert res.top[0].plan["ep"] > 1
    assert any(p["plan"]["ep"] > 1 for p in res.front)


def test_dense_model_searches_no_expert_or_redundant_cp_choices():
    c = enumerate_plans(load_model("llama-3.1-8b"), make_cluster("H100", 16), TrainingSpec(seq_len=8192, global_batch=64))
    assert np.array_equal(c["etp"], c["tp"]) and set(c["ep"].tolist()) == {1}
    assert set(c["cpc"][c["cp"] == 1].tolist()) == {0}  # without cp the scheme is moot
    assert set(c["cpc"][c["cp"] > 1].tolist()) == set(range(len(CP_COMMS)))
    assert all(c.plan_dict(i)["etp"] is None for i in range(0, len(c), 997))


def test_screen_bounds_the_exact_estimate_with_moe_cp_and_fp8_choices():
    model, cluster, training = load_model(MOE), make_cluster("H100", 16), fp8()
    c = enumerate_plans(model, cluster, training)
    s = screen(c, model, cluster, training)
    fits = np.nonzero(s["memory_bytes"] <= cluster.usable_memory_bytes)[0]
    rng = np.random.default_rng(3)
    picked = rng.choice(fits, 30, replace=False)
    assert len({(c["cpc"][i], c["etp"][i], c["rcp"][i]) for i in picked}) > 5
    for i in picked:
        e = estimate(job_from_plan(model, cluster, training, c.plan_dict(i)))
        assert s["step_lb_s"][i] <= e.step_time_s * (1 + 1e-9), c.plan_dict(i)
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=0.2)


def test_a_dominated_choice_is_no_faster_than_the_choice_that_dominates_it():
    """CP schemes of the same plan: one that another beats on every layer count (its kernels, exposed traffic
    and activations) is dropped, and the exact estimate agrees that some other scheme is no slower."""
    model, cluster = load_model("llama-3.1-8b"), make_cluster("H100", 16)
    training = TrainingSpec(seq_len=32768, global_batch=16)
    c = enumerate_plans(model, cluster, training, fixed={"cp": 4, "tp": 2, "pp": 2, "schedule": "1f1b"})
    out = dominated(c, layer_table(c, model, cluster, training))
    gone = np.nonzero(out)[0]
    assert len(gone) and not out.all()
    for i in gone[:: max(1, len(gone) // 6)]:
        plan = c.plan_dict(i)
        slow = estimate(job_from_plan(model, cluster, training, plan)).step_time_s
        others = [plan | {"cp_comm": s, "ulysses": None} for s in CP_COMMS if s not in (plan["cp_comm"], "a2a+p2p")]
        fast = min(estimate(job_from_plan(model, cluster, training, p)).step_time_s for p in others)
        assert fast <= slow * (1 + 1e-9), plan
    res = plan_search(model, cluster, training, fixed={"cp": 4, "tp": 2}, top_k=1, max_exact=8)
    assert res.rejected[REASONS["dominated"]] > 0


def test_a_dispatcher_search_tries_each_and_reproduces_its_choice():
    model, cluster, training = load_model("mixtral-8x7b"), make_cluster("H100", 32), TrainingSpec(seq_len=4096, global_batch=64)
    c = enumerate_plans(model, cluster, training, dispatchers=("alltoall", "allgather", "deepep"))
    assert c.dispatchers == ("alltoall", "allgather", "deepep") and set(c["disp"].tolist()) == {0, 1, 2}
    assert enumerate_plans(model, cluster, training).dispatchers == ("alltoall",)  # default: the job's own
    searched = plan_search(model, cluster, training, dispatchers=("alltoall", "allgather", "deepep"), top_k=1, max_exact=16).top[0]
    alltoall = plan_search(model, cluster, training, top_k=1, max_exact=16).top[0]
    assert searched.step_time_s <= alltoall.step_time_s * (1 + 1e-9)
    job = job_mapping(searched, model, training, [cluster])
    assert job["training"].get("moe", {}).get("dispatcher", "alltoall") == searched.moe_dispatcher
    assert estimate(job_from_mapping(job)).step_time_s == pytest.approx(searched.step_time_s, rel=1e-9)
    with pytest.raises(ShardwiseError, match="--moe-dispatchers: unknown dispatcher nccl"):
        enumerate_plans(model, cluster, training, dispatchers=("nccl",))
    with pytest.raises(ShardwiseError, match="--moe-dispatchers: llama-3.1-8b is dense"):
        enumerate_plans(load_model("llama-3.1-8b"), cluster, training, dispatchers=("deepep",))


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_a_recipe_dominated_before_costing_is_no_faster_in_the_estimate(framework):
    model, cluster = load_model(MOE), make_cluster("H100", 16)
    training = fp8(framework=framework)
    c = enumerate_plans(model, cluster, training)
    gone = dominated_recipes(c, cluster, training)
    kept = sorted(set(c["rcp"].tolist()) - set(gone))
    assert gone and kept and c.recipes.index("mxfp8") not in gone  # a recipe the H100 cannot run is not compared
    rng = np.random.default_rng(5)
    for i in rng.choice(len(c), 6, replace=False):
        plan = c.plan_dict(i)
        best = min((estimate(job_from_plan(model, cluster, training, plan | {"fp8_recipe": c.recipes[k]})) for k in kept),
                   key=lambda e: e.step_time_s)
        for k in gone:
            e = estimate(job_from_plan(model, cluster, training, plan | {"fp8_recipe": c.recipes[k]}))
            assert best.step_time_s <= e.step_time_s * (1 + 1e-9)


def test_folded_experts_are_split_over_etp_times_ep():
    """MoE Parallel Folding (Liu et al. 2025): a stage's tp x dp ranks re-split as etp x ep x expert-dp, so a
    rank holds 1/(etp ep) of the routed experts and ZeRO-1 shards their optimizer states over
    tp dp / (etp ep) ranks. Mixtral-8x22B on 64 GPUs, tp 4, ep 8: etp 1 holds four times the expert weights
    and gradients of etp 4, and the same optimizer bytes (the expert-dp group is four times larger)."""
    from shardwise.specs.job import job_from_mapping

    def run(etp):
        return estimate(job_from_mapping({
            "model": "mixtral-8x22b", "cluster": {"gpu": "H100", "gpus": 64},
            "training": {"seq_len": 4096, "global_batch": 256},
            "parallel": {"tp": 4, "ep": 8, "etp": etp, "zero": 1, "recompute": "full", "micro_batch": 1}}))

    folded, classic = run(1), run(4)
    experts = 8 * 301_989_888 * 56  # routed expert parameters: experts x (3 x 6144 x 16384) x layers
    assert folded.memory.params - classic.memory.params == pytest.approx(2 * experts * (1 / 8 - 1 / 32))  # bf16
    assert folded.memory.grads - classic.memory.grads == pytest.approx(4 * experts * (1 / 8 - 1 / 32))  # fp32 grads
    assert folded.memory.optimizer == pytest.approx(classic.memory.optimizer)  # 12 B x experts/8/8 = 12 B x experts/32/2
