"""The smallest cluster: the bounds that let the search skip counts are bounds, and the search returns what a
brute-force enumeration of every count returns."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.screen import ScreenOptions, screen
from shardwise.train.search_space import enumerate_plans
from shardwise.train.smallest import (
    candidate_counts,
    memory_floor_bytes,
    smallest_fit,
    smallest_in_time,
    step_floor_s,
)

GIB = 2**30


def test_candidate_counts_are_every_count_in_a_node_then_whole_nodes():
    assert candidate_counts(8, 40) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40]
    coarse = candidate_counts(8, 8 * 40, coarse=True)
    assert [c // 8 for c in coarse if c > 8 * 16] == [18, 20, 22, 24, 26, 28, 30, 32, 36, 40]
    assert all(b / a <= 1.125 + 1e-9 for a, b in zip(coarse[8 + 15:], coarse[9 + 15:], strict=False))


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "qwen2.5-7b", "llama-2-13b"]),
       gpu=st.sampled_from(["l4", "a100-40gb", "h100"]), n=st.sampled_from([1, 2, 4, 8, 16]),
       method=st.sampled_from(["full", "lora", "qlora"]), seq=st.sampled_from([1024, 4096]))
def test_memory_floor_is_below_every_screened_and_estimated_plan(name, gpu, n, method, seq):
    model = load_model(name)
    if method != "full" and model.is_moe:
        method = "full"
    training = TrainingSpec(seq_len=seq, global_batch=32, method=method)
    cluster = make_cluster(gpu, n)
    cands = enumerate_plans(model, cluster, training)
    if not len(cands):
        return
    mem = screen(cands, model, cluster, training)["memory_bytes"]
    floor = memory_floor_bytes(model, training, n)
    assert floor <= mem.min()
    leanest = estimate(job_from_plan(model, cluster, training, cands.plan_dict(int(mem.argmin()))))
    assert floor <= leanest.memory.total


@pytest.mark.parametrize("name, gpu, seq, batch, method", [
    ("llama-3.1-8b", "l4", 4096, 64, "full"),
    ("llama-3.1-70b", "a100-40gb", 2048, 32, "qlora"),
    ("mixtral-8x7b", "a100-80gb", 4096, 64, "full"),
])
def test_smallest_fit_equals_brute_force(name, gpu, seq, batch, method):
    model, training = load_model(name), TrainingSpec(seq_len=seq, global_batch=batch, method=method)
    fast, fast_verdicts = smallest_fit(model, gpu, training, max_gpus=64)
    brute, brute_verdicts = smallest_fit(model, gpu, training, max_gpus=64, exhaustive=True)
    assert fast == brute is not None
    assert [v.fits for v in brute_verdicts] == [False] * (len(brute_verdicts) - 1) + [True]
    assert fast_verdicts[-1] == brute_verdicts[-1]
    skipped = [v for v in fast_verdicts if v.leanest_plan is None]
    assert all(not v.fits for v in skipped)


def test_step_floor_is_below_the_fastest_plan():
    model, training = load_model("llama-3.1-8b"), TrainingSpec(seq_len=4096, global_batch=64)
    for n in (8, 16):
        cluster = make_cluster("h100", n)
        best = plan_search(model, cluster, training, top_k=1).top[0]
        assert step_floor_s(model, training, cluster) <= best.step_time_s


def test_smallest_in_time_equals_brute_force():
    """Llama-3.1-8B, 2e9 tokens on A100-80GB: the deadline search with its bounds and the exhaustive one
    (every count, each estimated) agree on the count and its plan."""
    model = load_model("llama-3.1-8b")
    training = TrainingSpec(seq_len=4096, global_batch=128, tokens=2e9)
    fast = smallest_in_time(model, "a100-80gb", training, days=1.0, max_gpus=64, max_exact=4)
    brute = smallest_in_time(model, "a100-80gb", training, days=1.0, max_gpus=64, max_exact=4, exhaustive=True)
    assert fast[0] == brute[0] is not None
    assert fast[1].step_time_s == brute[1].step_time_s
    assert fast[1].step_time_s * training.tokens / training.tokens_per_step <= 86400


def test_smallest_fit_refuses_counts_whose_offload_overflows_host_dram():
    """Llama-3.1-8B with the optimizer offloaded (ZeRO-Offload: 16 B a parameter, 128 GB, on the hosts) on H100
    nodes given 64 GiB of DRAM each (57.6 usable): a node holds at most 57.6 GiB of the 8B model's host states,
    so counts within one node (every GPU of it offloads at once) cannot run, however little the GPUs hold; with
    the catalog's 2 TB DGX host the smallest count is smaller. The count chosen fits host memory by the exact
    estimate, and every count the search turned down for host memory overflows it there too."""
    from shardwise.specs.hardware import HostSpec

    model, training = load_model("llama-3.1-8b"), TrainingSpec(seq_len=1024, global_batch=32)
    fixed = {"offload": "optimizer", "zero": 2}
    roomy, _ = smallest_fit(model, "h100", training, max_gpus=64, fixed=fixed)
    small = HostSpec(dram_gib=64)
    n, verdicts = smallest_fit(model, "h100", training, max_gpus=64, fixed=fixed, host=small)
    assert roomy is not None and n is not None and n > roomy
    assert n > 8  # one node's host cannot hold 8.03e9 x 16 B = 120 GiB
    cluster = make_cluster("h100", n, host=small)
    cands = enumerate_plans(model, cluster, training, fixed=fixed)
    s = screen(cands, model, cluster, training, options=ScreenOptions(offload="optimizer"))
    assert s["host_ok"].any()
    best = estimate(job_from_plan(model, cluster, training, cands.plan_dict(int(
        (s["memory_bytes"] + (~s["host_ok"]) * 1e30).argmin())), {"offload": "optimizer"}))
    assert best.fits and best.host_memory["dram_used_gib"] <= best.host_memory["dram_available_gib"]
    host_refused = [v for v in verdicts if "host memory" in v.reason]
    assert host_refused
    for v in host_refused:
        c = make_cluster("h100", v.gpus, host=small)
        cands = enumerate_plans(model, c, training, fixed=fixed)
        leanest = int(screen(cands, model, c, training, options=ScreenOptions(offload="optimizer"))["memory_bytes"].argmin())
        e = estimate(job_from_plan(model, c, training, cands.plan_dict(leanest), {"offload": "optimizer"}))
        assert not e.fits and e.misfit.startswith("host memory")
