"""Megatron-LM's own parse_args + validate_args on every Megatron export (needs a Megatron-LM checkout:
MEGATRON_LM=/path; not in CI, which checks the flag table instead). Degrees, batch and recompute as Megatron
derives them equal the plan; its weight+optimizer memory formula is within 1% of ours (docs/handoff.md)."""

import os
import sys
from pathlib import Path

import pytest

from tests.handoff.conftest import jobs_for, resolve_job

CHECKOUT = os.environ.get("MEGATRON_LM")
pytestmark = pytest.mark.skipif(not CHECKOUT, reason="set MEGATRON_LM to a Megatron-LM checkout")


@pytest.mark.parametrize("item", jobs_for("megatron"))
def test_megatron_parses_and_validates_the_export(item):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from megatron_check import megatron_view

    from shardwise.handoff import export_train
    from shardwise.train.estimate import estimate

    job = resolve_job(item, "megatron")
    p = job.plan
    exp = export_train(job, "megatron")
    seen = megatron_view(CHECKOUT, exp.args, job.cluster.num_gpus, exp.env)
    assert (seen["tensor_model_parallel_size"], seen["pipeline_model_parallel_size"], seen["context_parallel_size"],
            seen["data_parallel_size"], seen["micro_batch_size"], seen["global_batch_size"],
            seen["num_microbatches"]) == (p.tp, p.pp, p.cp, p.dp, p.micro_batch, job.training.global_batch, job.microbatches)
    assert (seen["virtual_pipeline_model_parallel_size"] or 1) == (p.vpp if p.schedule == "interleaved" else 1)
    assert (seen["recompute_granularity"] or "none") == p.recompute
    if p.zero == 1:
        e = estimate(job)
        ours = (e.memory.params + e.memory.grads + e.memory.optimizer)
        assert abs(ours - seen["weight_and_optimizer_bytes"]) / seen["weight_and_optimizer_bytes"] < 0.01
