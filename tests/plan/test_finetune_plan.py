"""train plan for fine-tunes: the screen agrees with the estimate on adapter jobs, and `--method` without
`--gpus` finds the smallest GPU count that fits and says why smaller counts do not."""

import json

import numpy as np
import pytest

from shardwise.cli.main import main
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.planner import job_from_plan
from shardwise.train.screen import screen
from shardwise.train.search_space import enumerate_plans
from shardwise.train.smallest import smallest_fit

GIB = 2**30


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_screen_lower_bound_is_valid_and_memory_close_for_adapter_jobs(method):
    model, cluster = load_model("llama-3.1-8b"), make_cluster("L40S", 8)
    training = TrainingSpec(seq_len=2048, global_batch=16, method=method)
    c = enumerate_plans(model, cluster, training)
    s = screen(c, model, cluster, training)
    rng = np.random.default_rng(2)
    for i in rng.choice(len(c), 25, replace=False):
        e = estimate(job_from_plan(model, cluster, training, c.plan_dict(i)))
        assert s["step_lb_s"][i] <= e.step_time_s * (1 + 1e-9)
        assert s["memory_bytes"][i] == pytest.approx(e.memory.total, rel=0.2)


def test_smallest_count_for_llama_70b_qlora_on_l40s():
    """By hand, one L40S (44.99 GiB, 42.74 usable) cannot hold a QLoRA Llama-3.1-70B: the NF4 base alone
    is 80 x 855,638,016 linear weights x 4.127 bits + 2,101,346,304 + 1,048,576 other weights x 2 B =
    39.5 GB = 36.8 GiB; with the adapters' bf16 weights and gradients (80 x 64 x 161,792 x 4 B = 3.3 GB),
    the 2,048-token layer inputs (80 x 2048 x 8192 x 2 B = 2.7 GB) and 1.25 GiB of runtime it passes
    42.74 GiB. Two GPUs shard the base (ZeRO-3) and fit."""
    linear = 80 * (8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672)
    base = linear * 4.127 / 8 + (70_553_706_496 - linear) * 2
    need = base + 80 * 64 * 161_792 * 4 + 80 * 2048 * 8192 * 2 + 1.25 * GIB
    assert need / GIB > 42.74
    training = TrainingSpec(seq_len=2048, global_batch=16, method="qlora")
    count, verdicts = smallest_fit(load_model("llama-3.1-70b"), "L40S", training)
    assert count == 2
    assert [v.gpus for v in verdicts] == [1, 2] and [v.fits for v in verdicts] == [False, True]
    assert verdicts[0].leanest_gib > 42.74 and "usable" in verdicts[0].reason


def test_cli_names_the_smallest_count_and_why_smaller_counts_do_not(capsys):
    args = ["train", "plan", "--model", "llama-3.1-70b", "--method", "qlora", "--gpu", "l40s", "--tokens", "1e8",
            "--no-progress", "--top", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "smallest count that fits: 2 x L40S" in out
    assert "1 GPU: the leanest plan" in out and "usable" in out
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["smallest_gpus"]["gpus"] == 2
    assert doc["smallest_gpus"]["counts"][0]["fits"] is False
    top = doc["top"][0] if "top" in doc else doc["searches"][0]
    assert top


def test_cli_method_errors_name_the_flag(capsys):
    assert main(["train", "plan", "--model", "llama-3.1-8b", "--method", "qlora", "--gpu", "l40s", "--days", "3"]) == 2
    assert "--days needs --tokens" in capsys.readouterr().err
    assert main(["train", "plan", "--model", "llama-3.1-8b", "--gpu", "l40s", "--gpus", "8", "--seq-len", "2048",
                 "--global-batch", "16", "--days", "3"]) == 2
    assert "--days: give it without --gpus" in capsys.readouterr().err
    assert main(["train", "plan", "--model", "llama-3.1-8b", "--method", "dora", "--gpu", "l40s", "--gpus", "1"]) == 2
    assert "--method" in capsys.readouterr().err
    assert main(["train", "plan", "--model", "mixtral-8x7b", "--method", "lora", "--gpu", "h100", "--gpus", "8"]) == 2
    assert "training.method" in capsys.readouterr().err
