"""Memory as the engines report it (cost/allocator.py): allocated, reserved and device memory; expandable
segments; FSDP2 under pipeline parallelism; the interleaved schedule's micro-batch group (N)."""

import pytest

from shardwise.cost.allocator import fragmentation_share, runtime_bytes
from shardwise.cost.constants import MemoryConstants
from shardwise.errors import ShardwiseError
from shardwise.pipeline import generate_schedule, simulate
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate

GIB = 2**30


def job(framework="megatron", parallel=None, **training):
    return job_from_mapping({
        "model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 16},
        "training": {"seq_len": 4096, "global_batch": 64, "framework": framework, **training},
        "parallel": {"tp": 2, "pp": 2, "recompute": "none", "sequence_parallel": True, **(parallel or {})},
    })


def test_reserved_adds_the_allocators_share_of_the_activations_and_the_device_adds_the_runtime():
    e = estimate(job())
    m = e.memory
    mc = MemoryConstants()
    assert m.fragmentation == pytest.approx(fragmentation_share(mc, False) * m.activations)
    assert m.runtime == pytest.approx(runtime_bytes(mc))
    assert e.peak_allocated_gib < e.peak_reserved_gib < e.peak_memory_gib
    assert e.fits == (e.peak_memory_gib <= e.usable_memory_gib)


def test_expandable_segments_lower_the_reserved_memory_only():
    plain, expandable = estimate(job()), estimate(job(expandable_segments=True))
    assert expandable.peak_allocated_gib == pytest.approx(plain.peak_allocated_gib)
    assert expandable.peak_reserved_gib < plain.peak_reserved_gib
    assert expandable.step_time_s == pytest.approx(plain.step_time_s)
    # torchtitan's launcher turns them on (data/stacks.yaml), Megatron-LM's does not
    titan = estimate(job("torchtitan"))
    assert titan.memory.fragmentation == pytest.approx(fragmentation_share(MemoryConstants(), True) * titan.memory.activations)


def test_fsdp2_under_pipeline_parallelism_keeps_the_stage_unsharded():
    """torchtitan turns reshard_after_forward off with PP and accumulates unsharded fp32 gradients until the
    last micro-batch: the stage's bf16 weights and fp32 gradients are whole on every rank, and the
    parameters are gathered once per step instead of twice per micro-batch."""
    z3 = {"tp": 1, "pp": 2, "zero": 3, "sequence_parallel": False}
    short = {"seq_len": 256}  # little compute per micro-batch: the gathers show
    kept = estimate(job("torchtitan", z3, **short))
    resharded = estimate(job("torchtitan", {**z3, "reshard_after_forward": True}, **short))
    stage_params = kept.memory.params / 2  # bf16
    assert kept.memory.grads == pytest.approx(4 * stage_params)  # fp32, unsharded
    assert resharded.memory.params == pytest.approx(kept.memory.params / 8)  # sharded over dp 8
    assert kept.time_s.dp_comm < resharded.time_s.dp_comm
    assert kept.peak_memory_gib > resharded.peak_memory_gib
    # without PP torchtitan reshards after the forward (its default), as the other stacks always do
    assert estimate(job("torchtitan", {**z3, "pp": 1}, **short)).memory.grads < kept.memory.grads / 4


def test_reshard_after_forward_needs_zero3():
    with pytest.raises(ShardwiseError, match="reshard_after_forward: only ZeRO-3"):
        job(parallel={"reshard_after_forward": False})


@pytest.mark.parametrize("group", [4, 8, 16])
def test_the_interleaved_warm_up_follows_megatrons_formula_at_any_group(group):
    """Megatron-LM get_pp_rank_microbatches: rank r runs (vpp-1)*N + 2*(pp-1-r) warm-up chunk forwards, so
    rank 0 holds that many plus one chunks' activations at its peak."""
    pp, vpp, m = 4, 3, 16
    res = simulate(generate_schedule("interleaved", pp, m, vpp, group=group))
    for r in range(pp):
        warm = min((vpp - 1) * group + 2 * (pp - 1 - r), vpp * m)
        assert res.peak_activation[r] == pytest.approx(min(warm + 1, vpp * m))  # one unit per chunk


def test_a_smaller_group_keeps_fewer_chunks_in_flight_and_a_last_group_below_pp_is_refused():
    base = {"tp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved"}
    big = estimate(job(parallel={**base, "microbatch_group": 8}, global_batch=128))
    small = estimate(job(parallel={**base, "microbatch_group": 4}, global_batch=128))
    assert small.memory.activations < big.memory.activations
    with pytest.raises(ShardwiseError, match="last group would hold 1 micro-batches, fewer than pp=4"):
        estimate(job(parallel={**base, "microbatch_group": 7}, global_batch=128))  # 64 micro-batches
    with pytest.raises(ShardwiseError, match="microbatch_group: only interleaved schedules"):
        estimate(job(parallel={"tp": 2, "pp": 4, "microbatch_group": 4}))
