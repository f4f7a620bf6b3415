"""Every DeepSpeed export is accepted by DeepSpeed 0.19.8's own config checks as ``deepspeed.initialize``
runs them on the launched world (no mpu for a plain model; PipelineModule's grid for a pipeline), with the
plan's batch, ZeRO stage, precision, AutoTP, Ulysses and AutoEP (skipped when DeepSpeed is absent)."""

import json

import pytest

from tests.handoff.conftest import jobs_for, resolve_job
from tests.handoff.engine_checks import deepspeed_accepts

pytest.importorskip("deepspeed.runtime.config", reason="deepspeed 0.19.8 not installed")

from shardwise.handoff import export_train
from shardwise.specs.job import job_from_mapping


def _check(job):
    p = job.plan
    exp = export_train(job, "deepspeed")
    cfg = deepspeed_accepts(exp, job)
    sequences = cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps * p.dp  # distinct per step
    assert sequences == job.training.global_batch
    assert cfg.train_micro_batch_size_per_gpu == p.micro_batch and cfg.gradient_accumulation_steps == job.microbatches
    assert cfg.zero_optimization_stage == p.zero
    assert cfg.bfloat16_config.enabled == (job.training.precision == "bf16")
    assert ("activation_checkpointing" in json.loads(exp.config_file[1])) == (p.recompute == "full")
    if p.tp > 1:
        assert cfg.tensor_parallel_config.autotp_size == p.tp
    return cfg


@pytest.mark.parametrize("item", jobs_for("deepspeed"))
def test_deepspeed_initialize_accepts_the_plans_batch_zero_and_recompute(item):
    _check(resolve_job(item, "deepspeed"))


@pytest.mark.parametrize("parallel", [
    {"tp": 8, "zero": 1},  # AutoTP: DeepSpeed counts every rank in train_batch_size (was 256 != 1 x 32 x 16)
    {"cp": 4, "cp_comm": "a2a", "zero": 3},  # Ulysses
    {"pp": 4, "zero": 1},  # PipelineModule
])
def test_autotp_ulysses_and_pipeline_pass_initializes_batch_check(parallel):
    job = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 64},
                            "training": {"seq_len": 4096, "global_batch": 256}, "parallel": parallel})
    cfg = _check(job)
    assert cfg.world_size * cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps == cfg.train_batch_size


@pytest.mark.parametrize("model, parallel", [
    ("mixtral-8x7b", {"ep": 8, "etp": 1, "tp": 2, "zero": 2}),
    ("qwen3-30b-a3b", {"ep": 8, "zero": 1}),
])
def test_autoep_passes_deepspeeds_own_validators(model, parallel):
    job = job_from_mapping({"model": model, "cluster": {"gpu": "h100", "gpus": 64},
                            "training": {"seq_len": 4096, "global_batch": 256}, "parallel": parallel})
    cfg = _check(job)
    assert cfg.expert_parallel_config.enabled and cfg.expert_parallel_config.autoep_size == job.plan.ep
