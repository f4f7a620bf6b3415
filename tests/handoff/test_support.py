"""What each engine can run: each rule against the engine's documented behaviour; one plan and arrays agree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.engines.plan_view import PlanView
from shardwise.engines.support import ENGINES, first_refusal, runnable_on, verdict
from shardwise.errors import ShardwiseError
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec, TrainPlan

LLAMA = load_model("llama-3.1-70b")


def plan(**kw):
    return TrainPlan(**{"dp": 2, **kw})


@pytest.mark.parametrize("engine, kw, words", [
    ("torchtitan", {"zero": 1}, "ZeRO-1"),
    ("megatron", {"pp": 4, "schedule": "zbv"}, "1F1B and interleaved"),
    ("megatron", {"pp": 4, "schedule": "gpipe"}, "1F1B and interleaved"),
    ("deepspeed", {"cp": 2}, "context parallelism"),
    ("deepspeed", {"pp": 2, "zero": 2}, "incompatible with DeepSpeed's pipeline engine"),
    ("torch", {"pp": 2, "zero": 3, "schedule": "zbv"}, "loses weight gradients"),
    ("torch", {"tp": 2, "zero": 1}, "ZeroRedundancyOptimizer"),
])
def test_refusals_name_the_reason_and_what_would_run(engine, kw, words):
    v = verdict(plan(**kw), engine, LLAMA)
    assert not v.runnable and words in v.reason and v.instead


@pytest.mark.parametrize("engine, kw", [
    ("torchtitan", {"zero": 3, "pp": 4, "schedule": "zbv"}),
    ("megatron", {"zero": 1, "pp": 4, "vpp": 2, "schedule": "interleaved", "tp": 8, "sequence_parallel": True}),
    ("deepspeed", {"zero": 3, "tp": 1}),
    ("torch", {"zero": 3, "pp": 2, "schedule": "1f1b"}),
])
def test_runnable_plans(engine, kw):
    assert engine in runnable_on(plan(**kw), LLAMA)


def test_unknown_engine_is_one_line():
    with pytest.raises(ShardwiseError, match="choose one of"):
        verdict(plan(), "jax")


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
       zero=st.sampled_from([0, 1, 2, 3]), sched=st.sampled_from(["1f1b", "interleaved", "zbv", "zb-h1", "gpipe"]),
       rc=st.sampled_from(["none", "selective", "full"]), sp=st.booleans())
def test_arrays_agree_with_one_plan(tp, pp, cp, zero, sched, rc, sp):
    vpp = 2 if sched in ("interleaved", "zbv") else 1
    if pp == 1:
        sched, vpp = "1f1b", 1
    p = TrainPlan(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=4, zero=zero, schedule=sched, recompute=rc, sequence_parallel=sp)
    one = PlanView.of(p, LLAMA, TrainingSpec(seq_len=4096, global_batch=64))
    stacked = PlanView(*(np.repeat(getattr(one, f), 3) for f in ("tp", "pp", "vpp", "cp", "ep", "dp", "zero", "sp", "rc", "sched")),
                       one.schedules, LLAMA)
    for e in ENGINES:
        assert first_refusal(stacked, e)[1].tolist() == [first_refusal(one, e)[1][0]] * 3
