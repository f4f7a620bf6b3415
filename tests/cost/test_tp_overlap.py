"""Tensor-parallel communication overlap as a plan knob (parallel.tp_overlap): the exposed-time rule of each
mode, its effect on the estimate, the planner's choice and the exports."""

import pytest

from shardwise.cost.layer import tp_exposed_s
from shardwise.errors import ShardwiseError
from shardwise.handoff import export_train
from shardwise.specs.hardware import make_cluster
from shardwise.specs.job import job_from_mapping
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.planner import plan_search


def test_exposed_time_of_each_mode():
    # none: the forward waits for every collective; the stack's share of the backward hides
    assert tp_exposed_s("none", 8.0, 8.0, 10.0, 10.0, 8, 0.5) == (8.0, 4.0)
    # bulk: the backward beside the weight-gradient GEMMs, the forward exposed
    assert tp_exposed_s("bulk", 8.0, 12.0, 10.0, 10.0, 8, 0.5) == (8.0, 2.0)
    # pipelined: n = 8 chunks; a chunk's transfer waits, the rest hides under the other chunks' GEMMs
    assert tp_exposed_s("pipelined", 8.0, 8.0, 10.0, 10.0, 8, 0.5) == (1.0, 0.0)
    assert tp_exposed_s("pipelined", 12.0, 8.0, 10.0, 10.0, 4, 0.5) == (3.0 + 2.0 * 3 / 4, 0.0)
    # async: the same split in the backward too
    assert tp_exposed_s("async", 8.0, 12.0, 10.0, 10.0, 4, 0.5) == (2.0, 3.0 + 2.0 * 3 / 4)


def job(mode="auto", framework="megatron", sp=True):
    zero = 3 if framework == "torchtitan" else 1  # torchtitan's data parallelism is FSDP2
    return job_from_mapping({
        "model": "llama-3.1-70b", "cluster": {"gpu": "h100", "gpus": 64},
        "training": {"seq_len": 8192, "global_batch": 64, "framework": framework},
        "parallel": {"tp": 8, "pp": 4, "sequence_parallel": sp, "recompute": "selective", "tp_overlap": mode, "zero": zero},
    })


def test_each_mode_hides_more_tp_communication_at_some_compute_cost():
    none, bulk, pipelined = (estimate(job(m)) for m in ("none", "bulk", "pipelined"))
    assert pipelined.time_s.tp_comm < bulk.time_s.tp_comm < none.time_s.tp_comm
    assert pipelined.time_s.compute > none.time_s.compute  # chunked GEMMs, SMs shared with the transfers
    assert pipelined.step_time_s < bulk.step_time_s < none.step_time_s
    assert pipelined.peak_memory_gib == pytest.approx(none.peak_memory_gib)  # memory unchanged
    # auto: the stack's default (Megatron-LM: --tp-comm-overlap off), reported resolved
    auto = estimate(job())
    assert auto.plan["tp_overlap"] == "none" and auto.step_time_s == pytest.approx(none.step_time_s)


def test_modes_a_stack_does_not_run_or_without_sequence_parallelism_are_refused():
    with pytest.raises(ShardwiseError, match="torchtitan does not run 'bulk'"):
        estimate(job("bulk", "torchtitan"))
    with pytest.raises(ShardwiseError, match="needs sequence parallelism"):
        estimate(job("pipelined", sp=False))
    assert estimate(job("async", "torchtitan")).time_s.tp_comm < estimate(job("none", "torchtitan")).time_s.tp_comm


def _search(**kw):
    model, cluster = load_model("llama-3.1-70b"), make_cluster("h100", 64)
    return plan_search(model, cluster, TrainingSpec(seq_len=8192, global_batch=128), top_k=3, max_exact=16, **kw)


def test_the_planner_searches_the_overlap_modes_the_stack_and_engine_run():
    chosen = {e.plan["tp_overlap"] for e in _search().top if e.plan["tp"] > 1}
    assert chosen and chosen <= {"bulk", "pipelined"}  # Megatron's userbuffers beat no overlap at tp 8
    pinned = _search(fixed={"tp_overlap": "none"})
    assert {e.plan["tp_overlap"] for e in pinned.top} == {"none"}
    assert pinned.top[0].step_time_s > _search().top[0].step_time_s
    titan = _search(runnable_on=("torchtitan",))
    assert {e.plan["tp_overlap"] for e in titan.top} <= {"none", "async"}


def test_exports_carry_the_mode():
    pipelined = export_train(job("pipelined"), "megatron").args
    assert "--tp-comm-overlap" in pipelined and "--disable-tp-comm-overlap-ag" not in pipelined
    bulk = export_train(job("bulk"), "megatron").args
    assert "--tp-comm-overlap" in bulk and {"--disable-tp-comm-overlap-ag", "--disable-tp-comm-overlap-rs"} <= set(bulk)
    assert "--tp-comm-overlap" not in export_train(job("none"), "megatron").args
    with pytest.raises(ShardwiseError, match="Megatron-LM cannot run this plan: Megatron-LM runs tp_overlap none, "
                       "bulk, pipelined only"):
        export_train(job("async"), "megatron")
    titan = export_train(job("async", "torchtitan"), "torchtitan").args
    assert "--compile.enable_async_tensor_parallel" in titan and "--compile.enable" in titan


def test_torchtitans_parser_accepts_async_tp():
    tt = pytest.importorskip("torchtitan.config", reason="torchtitan 0.3.0 not installed")
    cfg = tt.ConfigManager().parse_args(export_train(job("async", "torchtitan"), "torchtitan").args)
    assert cfg.compile.enable and cfg.compile.enable_async_tensor_parallel
