"""Plan enumeration: every rejection reason, and the schedule rules against the generators."""

import numpy as np
import pytest

from shardwise.errors import ShardwiseError
from shardwise.pipeline import generate_schedule, schedule_info
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.planner import plan_search
from shardwise.train.search_space import REASONS, enumerate_plans

SMALL = {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 8, "ffn": 1024, "vocab": 1000}
SMALL_MOE = SMALL | {"experts": 6, "top_k": 2, "expert_ffn": 36}


def rejected(model, gpus, seq, batch, gpu="H100", **kw):
    c = enumerate_plans(load_model(model), make_cluster(gpu, gpus), TrainingSpec(seq_len=seq, global_batch=batch), **kw)
    return c, c.rejected


@pytest.mark.parametrize(
    "args,reason",
    [
        (("qwen2.5-7b", 8, 4096, 64), "heads"),  # 28 heads: tp 8 does not divide them
        (("llama-3.1-8b", 24, 4096, 96), "gpus"),
        ((SMALL, 16, 1024, 64), "layers"),  # 4 layers cannot fill 16 stages
        ((SMALL, 32, 24, 64), "seq"),  # cp 16 does not divide 24 tokens
        (("mixtral-8x7b", 8, 4096, 64), "fold"),  # ep 8 x etp 2 > the 8 ranks of a stage
        ((SMALL_MOE, 8, 1024, 64), "experts"),  # ep 4 does not divide 6 experts
        ((SMALL_MOE, 8, 1024, 64), "etp_ffn"),  # etp 8 does not divide expert_ffn 36
        ((SMALL, 16, 1024, 64), "cp_a2a"),  # tp 4: 2 heads per rank; cp 4 does not divide them
        ((SMALL, 8, 1024, 4), "batch_small"),
        ((SMALL, 8, 1024, 12), "batch_divide"),
        ((SMALL, 8, 1024, 8), "schedule"),  # dualpipev needs m >= 2pp
    ],
)
def test_each_enumeration_reason(args, reason):
    _, counts = rejected(*args)
    assert counts[REASONS[reason]] > 0


def test_memory_reasons():
    model, training = load_model("llama-3.1-70b"), TrainingSpec(seq_len=8192, global_batch=64)
    res = plan_search(model, make_cluster("H100", 64), training, top_k=1, max_memory_gib=60)
    assert res.rejected[REASONS["memory"]] > 0
    assert res.rejected[REASONS["memory_cap"]] > 0
    assert res.top[0].peak_memory_gib <= 60
    with pytest.raises(ShardwiseError, match="no plan fits on 8 x H100-SXM: all [0-9,]+ plans that can run need more"):
        plan_search(load_model("llama-3.1-405b"), make_cluster("H100", 8), training)


def test_distinct_plans_only_and_fixed_fields():
    c, _ = rejected("llama-3.1-8b", 8, 4096, 64)
    assert not ((c["sp"] == 1) & (c["tp"] == 1)).any()  # sequence parallelism needs tp > 1
    assert not ((c["pp"] == 1) & (c["vpp"] > 1)).any()
    fixed, _ = rejected("llama-3.1-8b", 8, 4096, 64, fixed={"tp": 2, "schedule": "zbv", "zero": 1})
    assert set(fixed["tp"]) == {2} and set(fixed["zero"]) == {1} and set(fixed["vpp"]) == {2}


@pytest.mark.parametrize("name", ["interleaved", "zb-h1", "bfs", "dualpipev", "zbv", "1f1b", "zb-h2"])
def test_admissibility_rules_match_the_generators(name):
    for pp in (2, 3, 4):
        for m in range(1, 13):
            for v in ((1, 2, 3) if name in ("zb-h1", "bfs") else (2, 3) if name == "interleaved" else (2,) if name in ("zbv", "dualpipev") else (1,)):
                try:
                    generate_schedule(name, pp, m, v)
                    ok = True
                except ShardwiseError:
                    ok = False
                assert bool(schedule_info(name).admits(np.array([pp]), np.array([m]), np.array([v]))[0]) == ok, (name, pp, m, v)


def test_every_layout_rejected_leaves_no_plan_and_counts_them_all():
    c, counts = rejected(SMALL, 16, 1024, 64, fixed={"tp": 16}, max_tp=16)  # 8 heads: tp 16 never divides them
    assert len(c) == 0 and counts[REASONS["heads"]] == c.considered > 0
