"""Each named limit (shardwise/limits.py) is checked before work starts and says how to proceed."""

from __future__ import annotations

import pytest

from shardwise.errors import ShardwiseError
from shardwise.limits import (
    MAX_PIPELINE_RANKS,
    MAX_PIPELINE_STAGES,
    MAX_PLAN_REQUESTS,
    MAX_RUN_PROCESSES,
    MAX_SCHEDULE_ACTIONS,
)
from shardwise.specs.job import job_from_mapping

TINY = {"layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256}


def _job(model=TINY, gpus=2, parallel=None, **training):
    return job_from_mapping({"model": model, "cluster": {"gpu": "h100", "gpus": gpus},
                             "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32", **training},
                             "parallel": parallel or {"pp": 2, "schedule": "1f1b", "recompute": "none"}})


@pytest.mark.parametrize(("kw", "message"), [
    ({"steps": 0}, "--steps must be in 1..10,000"),
    ({"steps": 10**6}, "--steps must be in 1..10,000"),
    ({"seed": -1}, "--seed must be a non-negative integer"),
    ({"timeout_s": float("nan")}, "--timeout must be a positive number"),
    ({"timeout_s": -5.0}, "--timeout must be a positive number"),
])
def test_train_run_flags(kw, message):
    from shardwise.execute.config import config_from_job

    with pytest.raises(ShardwiseError, match=message):
        config_from_job(_job(), **kw)


def test_train_run_refuses_many_processes_and_big_models():
    from shardwise.execute.config import config_from_job

    wide = _job(gpus=128, parallel={"pp": 1, "recompute": "none"}, global_batch=128)
    with pytest.raises(ShardwiseError, match=f"limit of {MAX_RUN_PROCESSES} local processes"):
        config_from_job(wide)
    big = _job(model="llama-3.1-8b", parallel={"pp": 2, "recompute": "none"})
    with pytest.raises(ShardwiseError, match="parameters exceed the limit"):
        config_from_job(big)


def test_training_plan_stage_and_rank_limits():
    with pytest.raises(ShardwiseError, match=r"parallel\.pp: .* exceeds the limit of 256"):
        _job(model={**TINY, "layers": 10_000}, gpus=512, parallel={"pp": MAX_PIPELINE_RANKS + 1})
    with pytest.raises(ShardwiseError, match=f"exceed the limit of {MAX_PIPELINE_STAGES:,}"):
        _job(model={**TINY, "layers": 10_000}, gpus=256, parallel={"pp": 256, "vpp": 8, "schedule": "interleaved"},
             global_batch=256)


def test_serve_plan_request_count_limit():
    from shardwise.serve.plan_cli import plan_request

    with pytest.raises(ShardwiseError, match=f"limit of {MAX_PLAN_REQUESTS:,}"):
        plan_request(None, "llama-3.1-8b", 4.0, 300.0, 50.0, None, "h100:8", None, None, MAX_PLAN_REQUESTS + 1)
    with pytest.raises(ShardwiseError, match="rate.*positive"):
        plan_request(None, "llama-3.1-8b", float("nan"), 300.0, 50.0, None, "h100:8", None, None, None)


def test_schedule_size_limit_is_checked_before_generating():
    from shardwise.pipeline import generate_schedule

    m = MAX_SCHEDULE_ACTIONS // (3 * 8) + 1  # zbv on 4 ranks: 8 stages, 3 actions per (stage, micro-batch)
    with pytest.raises(ShardwiseError, match="compute actions"):
        generate_schedule("zbv", 4, m)


@pytest.mark.parametrize("text", ["99999999999999999999", "nan", "-8"])
def test_train_plan_gpu_count(text, capsys):
    from shardwise.cli.main import main

    status = main(["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", text, "--seq-len", "4096",
                   "--global-batch", "64", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and "--gpus" in err[0]


def test_an_absurdly_large_plan_is_reported_as_not_fitting_with_its_size():
    """Micro-batch 64 x 4K tokens without recompute needs terabytes of activations per pipeline stage: the
    estimate says it does not fit and how large it is, instead of refusing an internal limit."""
    from shardwise.train.estimate import estimate

    job = job_from_mapping({"model": "llama-3.1-405b", "cluster": {"gpu": "h100", "gpus": 64},
                            "training": {"seq_len": 4096, "global_batch": 512},
                            "parallel": {"tp": 8, "pp": 4, "micro_batch": 64, "recompute": "none"}})
    e = estimate(job)
    assert not e.fits
    # 126 layers of 405B at 64 x 4,096 tokens and tp 8 keep well over a terabyte of activations on a rank
    assert e.memory.activations / 2**40 > 1.0
    assert e.peak_memory_gib > 50 * e.usable_memory_gib
