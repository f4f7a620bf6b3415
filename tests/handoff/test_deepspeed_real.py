"""Every DeepSpeed export is accepted by DeepSpeed 0.19.8's DeepSpeedConfig, which sees the plan's
data-parallel size through a one-process gloo group and an mpu (skipped when DeepSpeed is absent)."""

import json

import pytest

from tests.handoff.conftest import jobs_for, resolve_job

torch = pytest.importorskip("torch")
ds_config_mod = pytest.importorskip("deepspeed.runtime.config", reason="deepspeed 0.19.8 not installed")

from shardwise.handoff import export_train  # noqa: E402


class PlanMPU:
    """Tells DeepSpeed the plan's data-parallel size (the group is one process on this machine)."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_rank(self):
        return 0


@pytest.fixture(scope="module", autouse=True)
def gloo_group():
    import os

    import deepspeed

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)  # deepspeed.comm over one gloo process
    yield


@pytest.mark.parametrize("item", jobs_for("deepspeed"))
def test_deepspeed_config_sees_the_plans_batch_zero_and_recompute(item):
    job = resolve_job(item, "deepspeed")
    p = job.plan
    exp = export_train(job, "deepspeed")
    cfg = ds_config_mod.DeepSpeedConfig(json.loads(exp.config_file[1]), mpu=PlanMPU(p.dp))
    assert cfg.world_size == p.dp
    assert cfg.train_batch_size == job.training.global_batch
    assert cfg.train_micro_batch_size_per_gpu == p.micro_batch
    assert cfg.gradient_accumulation_steps == job.microbatches
    assert cfg.zero_optimization_stage == p.zero
    assert cfg.bfloat16_config.enabled == (job.training.precision == "bf16")
    assert ("activation_checkpointing" in json.loads(exp.config_file[1])) == (p.recompute == "full")
    if p.tp > 1:
        assert cfg.tensor_parallel_config.autotp_size == p.tp
