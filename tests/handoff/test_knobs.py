"""The job-level knobs in the engine-rules table: MoE grouped GEMMs (moe.grouped_gemm), the expert all-to-all
overlap (moe.overlap_a2a) and the allocator's expandable segments (training.expandable_segments) are
written by the exporters of the engines that run them, refused by the others with the table's reason, and
the engines' own code accepts what is written (Megatron's validate_args with MEGATRON_LM set)."""

import subprocess

import pytest

from shardwise.engines.support import job_verdict
from shardwise.engines.table import ENGINES, KNOBS
from shardwise.errors import ShardwiseError
from shardwise.handoff import export_train
from shardwise.specs.job import job_from_mapping
from tests.handoff import engine_checks

INTERLEAVED = {"tp": 1, "pp": 2, "vpp": 2, "ep": 4, "schedule": "interleaved", "recompute": "selective", "zero": 1}
TT = INTERLEAVED | {"zero": 2}  # a plan torchtitan runs but for the knob (FSDP2 keeps the parameters under PP)


def qwen3(parallel, moe=None, gpus=16, **training):
    return job_from_mapping({"model": "qwen3-30b-a3b", "cluster": {"gpu": "h100", "gpus": gpus},
                             "training": {"seq_len": 4096, "global_batch": 64, "precision": "bf16", **training}
                             | ({"moe": moe} if moe else {}), "parallel": parallel})


def test_each_knob_cites_the_engines_that_run_only_some_values():
    for k in KNOBS:
        every = set().union(*k.runs.values())
        for engine, ok in k.runs.items():
            assert engine in ENGINES
            if set(ok) < every and engine != "torch":
                assert k.source.get(engine, "").startswith("https://"), (k.field, engine)


def test_grouped_gemm_is_written_by_megatron_and_deepspeed_and_refused_by_torchtitan():
    on = qwen3(INTERLEAVED)
    off = qwen3(INTERLEAVED, {"grouped_gemm": False})
    assert "--moe-grouped-gemm" in export_train(on, "megatron").args
    assert "--moe-grouped-gemm" not in export_train(off, "megatron").args  # SequentialMLP, as costed
    with pytest.raises(ShardwiseError, match="grouped GEMMs only"):
        export_train(qwen3(TT, {"grouped_gemm": False}), "torchtitan")
    assert job_verdict(qwen3(TT), "torchtitan").runnable
    ds = qwen3({"tp": 1, "pp": 1, "ep": 4, "zero": 2, "recompute": "full"}, {"grouped_gemm": False})
    exp = export_train(ds, "deepspeed")
    assert '"use_grouped_mm": false' in exp.config_file[1]
    pytest.importorskip("deepspeed.runtime.config", reason="deepspeed 0.19.8 not installed")
    engine_checks.deepspeed_accepts(exp, ds)  # AutoEP's own config validators


def test_a2a_overlap_is_megatrons_switch_with_megatrons_conditions():
    job = qwen3(INTERLEAVED, {"overlap_a2a": True})
    args = export_train(job, "megatron").args
    assert "--overlap-moe-expert-parallel-comm" in args
    ds = {"tp": 1, "pp": 1, "ep": 4, "zero": 2, "recompute": "full"}
    for engine, parallel in (("torchtitan", TT), ("deepspeed", ds)):
        assert job_verdict(qwen3(parallel), engine).runnable
        v = job_verdict(qwen3(parallel, {"overlap_a2a": True}), engine)
        assert not v.runnable and "expert all-to-alls" in v.reason
    for change, says in (({"recompute": "full"}, "full recompute"), ({"vpp": 1, "schedule": "1f1b"}, "virtual pipeline")):
        v = job_verdict(qwen3(INTERLEAVED | change, {"overlap_a2a": True}), "megatron")
        assert not v.runnable and says in v.reason
    v = job_verdict(qwen3(INTERLEAVED, {"overlap_a2a": True, "dispatcher": "allgather"}), "megatron")
    assert not v.runnable and "alltoall or flex" in v.reason
    # no expert parallelism: nothing to overlap, nothing written, no engine refuses it for that
    no_ep = qwen3(INTERLEAVED | {"ep": 1}, {"overlap_a2a": True})
    assert "--overlap-moe-expert-parallel-comm" not in export_train(no_ep, "megatron").args
    assert "all-to-all" not in (job_verdict(no_ep, "torchtitan").reason or "")


@pytest.mark.skipif(not engine_checks.MEGATRON_LM, reason="set MEGATRON_LM to a Megatron-LM checkout")
def test_megatron_refuses_what_the_table_refuses_for_the_a2a_overlap():
    """validate_args accepts the export, and asserts on the plans the table refuses (written past the table)."""
    from shardwise.handoff.megatron import model_args, parallel_args, run_args

    job = qwen3(INTERLEAVED, {"overlap_a2a": True})
    seen = engine_checks.megatron_accepts(export_train(job, "megatron"), job)
    assert seen["expert_model_parallel_size"] == 4 and seen["virtual_pipeline_model_parallel_size"] == 2
    for change in ({"recompute": "full"}, {"vpp": 1, "schedule": "1f1b"}):
        bad = qwen3(INTERLEAVED | change, {"overlap_a2a": True})
        args = model_args(bad.model, 4096) + parallel_args(bad) + run_args(bad)
        exp = export_train(qwen3(INTERLEAVED | change), "megatron")
        exp.args = args
        with pytest.raises(AssertionError, match="overlap_moe_expert_parallel_comm|EP A2A overlap"):
            engine_checks.megatron_accepts(exp, bad)


@pytest.mark.parametrize("framework, setting, engine, expected", [
    ("torchtitan", None, "torchtitan", {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}),  # the stack's default
    ("torchtitan", False, "torchtitan", {}),
    ("megatron", None, "torchtitan", {}),  # costed without: exported without
    ("megatron", True, "megatron", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("megatron", None, "megatron", {}),
    ("deepspeed", True, "deepspeed", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
])
def test_expandable_segments_follow_what_the_estimate_costed(framework, setting, engine, expected):
    from shardwise.cost.stack import expandable_segments, stack_profile

    extra = {} if setting is None else {"expandable_segments": setting}
    job = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 16},
                            "training": {"seq_len": 4096, "global_batch": 64, "framework": framework, **extra},
                            "parallel": {"tp": 1, "pp": 1, "zero": 3, "recompute": "full"}})
    assert expandable_segments(job.training, stack_profile(framework, "hopper")) == bool(expected)
    exp = export_train(job, engine)
    assert {k: v for k, v in exp.env.items() if "ALLOC_CONF" in k} == expected
    script = exp.script()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    if engine == "deepspeed":  # two nodes: the launcher carries the variable to the other node in .deepspeed_env
        assert "cat > .deepspeed_env" in script and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in script


def test_the_handoff_doc_lists_every_knob():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "handoff.md").read_text()
    for field in {k.field for k in KNOBS}:
        assert f"\n| {field} (" in doc, field
