"""Every torchtitan export parses in torchtitan 0.3.0's own ConfigManager with the plan's numbers
(skipped when torchtitan is not installed; .ci/run installs it)."""

import pytest

from tests.handoff.conftest import jobs_for, resolve_job

tt = pytest.importorskip("torchtitan.config", reason="torchtitan 0.3.0 not installed")

from shardwise.handoff import export_train  # noqa: E402
from shardwise.pipeline import resolve  # noqa: E402


@pytest.mark.parametrize("item", jobs_for("torchtitan"))
def test_torchtitan_parses_the_export_with_the_plans_numbers(item):
    job = resolve_job(item, "torchtitan")
    p = job.plan
    exp = export_train(job, "torchtitan")
    cfg = tt.ConfigManager().parse_args(exp.args)
    par, tr = cfg.parallelism, cfg.training
    dp = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree, dp,
            par.expert_parallel_degree) == (p.tp, p.pp, p.cp, p.dp, p.ep)
    assert tr.global_batch_size == job.training.global_batch and tr.seq_len == job.training.seq_len
    # batch identity: local batch per DP rank per step = micro-batch x micro-batches (PP) or one micro-batch
    steps = tr.global_batch_size // (tr.local_batch_size * dp)
    if p.pp > 1:
        assert steps == 1 and tr.local_batch_size // par.pipeline_parallel_microbatch_size == job.microbatches
        stages = par.module_fqns_per_model_part
        assert sum(1 for s in stages for m in s if m.startswith("layers.")) == job.model.layers
        assert len(stages) % p.pp == 0
    else:
        assert steps == job.microbatches
    ac = {"NoneType": "none", "SelectiveAC": "selective", "FullAC": "full"}
    name = type(cfg.activation_checkpoint).__qualname__.split(".")[0]
    assert ac[name] == p.recompute
    assert len(cfg.model_spec.model.layers) == job.model.layers
    if p.zero == 2 and p.dp > 1:
        assert par.fsdp_reshard_after_forward == "never"
    if p.zero == 3 and p.dp > 1:  # torchtitan's own rule (not under PP) is the estimate's (cost/stack.py keeps_unsharded)
        assert par.fsdp_reshard_after_forward == {None: "default", True: "always", False: "never"}[p.reshard_after_forward]
    if p.tp_overlap == "async" and p.tp > 1:
        assert cfg.compile.enable and cfg.compile.enable_async_tensor_parallel
    if resolve(p.schedule) == "zbv" and p.pp > 1:
        assert par.pipeline_parallel_schedule == "ZBVZeroBubble"
