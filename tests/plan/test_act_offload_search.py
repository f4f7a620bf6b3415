"""The planner searches the activation-offload share (train.planner: ACT_OFFLOAD_SHARES) where it can buy a
faster plan (offloading instead of recomputing), and the nothing-fits fallback weighs it beside the
model-state offloads (train.advice.offload_fallback)."""

import json

import pytest

from shardwise.cli.main import main
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.planner import ACT_OFFLOAD_SHARES, job_from_plan, plan_search


def _search(fixed, **kw):
    model, cluster = load_model("llama-3.1-8b"), make_cluster("h100", 8)
    training = TrainingSpec(seq_len=32768, global_batch=32)
    return model, cluster, training, plan_search(model, cluster, training, fixed=fixed, top_k=3, **kw)


@pytest.mark.parametrize("fixed", [{"tp": 1, "cp": 1, "pp": 8, "zero": 1}, {"tp": 1, "cp": 1}, {}])
def test_searched_share_never_ranks_worse_and_says_what_it_bought(fixed):
    """The search with the share free is never slower than with it fixed at 0; a plan it offloads runs
    without recompute at one of the searched shares, fits, and beats the best plan without offload, which the
    note names with the gain; without the offload the same plan does not fit."""
    model, cluster, training, free = _search(fixed)
    *_, none = _search(fixed | {"offload_activations": 0.0})
    assert free.top[0].step_time_s <= none.top[0].step_time_s
    assert all(not e.plan.get("offload_activations") for e in none.top)
    offloaded = [e for e in free.top if e.plan.get("offload_activations")]
    for e in offloaded:
        assert e.fits and e.plan["recompute"] == "none" and e.plan["offload_activations"] in ACT_OFFLOAD_SHARES
        plain = estimate(job_from_plan(model, cluster, training, {**e.plan, "offload_activations": 0.0}))
        assert not plain.fits
    if offloaded and offloaded[0] is free.top[0]:
        gain = 1 - free.top[0].step_time_s / none.top[0].step_time_s
        note = next(n for n in free.notes if n.startswith("activation offload"))
        assert f"{gain:.1%} faster" in note and none.top[0].plan["recompute"] != "none"


def test_pipelined_long_sequence_offloads_instead_of_recomputing():
    """Llama-3.1-8B at 32K tokens on 8 H100 with pp 8 and no tensor or context parallelism: without offload
    every fitting plan recomputes; offloading the activations of the pipeline's micro-batches in flight lets a
    plan drop the recompute and run faster (the copies hide in the schedule's forward-to-backward gaps)."""
    *_, res = _search({"tp": 1, "cp": 1, "pp": 8, "zero": 1})
    best = res.top[0]
    assert best.plan["offload_activations"] > 0 and best.plan["recompute"] == "none"
    assert any(n.startswith("activation offload") for n in res.notes)


def test_share_fixed_or_engine_asked_is_not_searched():
    *_, fixed = _search({"tp": 1, "cp": 1, "pp": 8, "zero": 1, "offload_activations": 0.0})
    assert not any(e.plan.get("offload_activations") for e in fixed.top)
    *_, megatron = _search({"tp": 1, "cp": 1, "pp": 8, "zero": 1}, runnable_on=("megatron",))
    assert not any(e.plan.get("offload_activations") for e in megatron.top)


def test_fallback_searches_with_activation_offload_when_it_is_the_fastest_lever(tmp_path, capsys):
    """Recompute fixed off and pipelined: nothing fits; the optimizer offloads cannot make it fit (the
    activations are what overflow) and offloading the activations can, so the search retries with them."""
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-8b\ncluster: {gpu: h100, gpus: 8}\ntraining: {seq_len: 32768, global_batch: 32}\n"
                   "parallel: {tp: 1, cp: 1, pp: 8, recompute: none, zero: 1}\n")
    assert main(["train", "plan", str(job), "--top", "1", "--format", "json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    advice = doc["what_to_change"]
    share = advice["searched_with_offload_activations"]
    assert share and advice["searched_with_offload"] is None
    assert doc["top"][0]["plan"]["offload_activations"] == share and doc["top"][0]["fits"]
    levers = {lv["lever"]: lv for lv in advice["levers"]}
    assert levers["activation offload"]["fits"]
