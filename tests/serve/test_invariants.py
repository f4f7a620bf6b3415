"""Property tests: conservation, causality, Little's law, capacity bounds, determinism."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.serve import compute_metrics, parse_serve_job, simulate
from shardwise.serve.constants import serving_constants
from shardwise.serve.simulate import build_pools, run_pool
from shardwise.serve.state import RequestTable

engines = st.fixed_dictionaries({
    "version": st.just("vllm-0.6.0"),  # the V0 knobs below need a release that had them
    "chunked_prefill": st.booleans(),
    "max_num_seqs": st.sampled_from([4, 32, 256]),
    "max_num_batched_tokens": st.sampled_from([512, 2048, 8192]),
    "num_scheduler_steps": st.sampled_from([1, 1, 4]),
    "block_size": st.sampled_from([8, 16]),
    "gpu_memory_utilization": st.sampled_from([0.3, 0.9]),
})


def job(engine, rate, n, seed, gpu="a100-80gb", replicas=1):
    return parse_serve_job({"model": "llama-3.1-8b",
                            "deployment": {"gpu": gpu, "replicas": replicas, "engine": engine},
                            "workload": {"rate": rate, "num_requests": n, "seed": seed,
                                         "input_len": {"dist": "uniform", "min": 8, "max": 500},
                                         "output_len": {"dist": "uniform", "min": 1, "max": 300}}})


@given(engine=engines, rate=st.sampled_from([0.5, 5.0, 50.0, "inf"]), seed=st.integers(0, 5), replicas=st.sampled_from([1, 2]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_request_completes_causally_and_littles_law_holds(engine, rate, seed, replicas):
    spec = job(engine, rate, 150, seed, replicas=replicas)
    res = simulate(spec)
    req = res.requests
    c = serving_constants()
    assert np.all(np.isfinite(res.finish_s))
    assert np.all(res.first_s >= req.arrival_s + c.frontend_s - 1e-12)
    assert np.all(res.finish_s >= res.first_s)
    m = compute_metrics(res)
    assert m["total_output_tokens"] == int(req.output_len.sum())
    # Little's law on the decode phase: mean number of decoding requests = sum of decode times / duration,
    # and a decoding request holds one of max_num_seqs slots of one engine
    decoding = float(np.sum(res.finish_s - res.first_s)) / m["duration_s"]
    assert decoding <= engine["max_num_seqs"] * replicas + 1e-9
    # the pooled ITL gaps of a request add up to its decode time (sum over all requests)
    v, w = res.itl.samples()
    assert float(np.dot(v, w)) == pytest.approx(float(np.sum(res.finish_s - res.first_s)), rel=1e-9, abs=1e-9)
    # TPOT is at least one decode step of a single sequence
    pool = res.pools[0]
    step = pool.timer.iteration_s(1, 1, 1)
    multi = req.output_len > 1
    tpot = (res.finish_s - res.first_s)[multi] / (req.output_len[multi] - 1)
    assert np.all(tpot >= step * 0.999)


@given(rate=st.sampled_from([1.0, 10.0, 100.0]), seed=st.integers(0, 3))
@settings(max_examples=10, deadline=None)
def test_throughput_never_exceeds_the_offered_load(rate, seed):
    m = compute_metrics(simulate(job({}, rate, 200, seed)))
    arrivals_end = 200 / rate
    assert m["request_throughput"] <= 200 / arrivals_end + 1e-9


def test_all_kv_blocks_are_returned():
    spec = job({"gpu_memory_utilization": 0.3, "max_num_seqs": 256}, "inf", 400, 0)
    pool = build_pools(spec, serving_constants())[0]
    from shardwise.serve.workload import build_requests

    req = build_requests(spec.workload)
    table = RequestTable(req)
    engs = run_pool(pool, table, np.arange(len(req)))
    assert all(e.free == e.num_blocks for e in engs)


def test_same_seed_same_metrics():
    a = compute_metrics(simulate(job({}, 8.0, 300, 11)))
    b = compute_metrics(simulate(job({}, 8.0, 300, 11)))
    c = compute_metrics(simulate(job({}, 8.0, 300, 12)))
    assert a == b
    assert a["ttft_ms"] != c["ttft_ms"]


def test_latency_grows_with_load_and_low_load_has_no_queueing():
    low = compute_metrics(simulate(job({}, 0.2, 100, 0)))
    high = compute_metrics(simulate(job({}, 30.0, 600, 0)))
    assert high["ttft_ms"]["p90"] > low["ttft_ms"]["p90"]
    assert high["tpot_ms"]["median"] > low["tpot_ms"]["median"]
    assert low["preemptions"] == 0


def test_least_outstanding_router_balances_better_than_round_robin_under_bursts():
    base = {"model": "llama-3.1-8b", "workload": {"arrival": "gamma", "cv": 4.0, "rate": 20, "num_requests": 800, "seed": 3}}
    rr = compute_metrics(simulate(parse_serve_job({**base, "deployment": {"gpu": "a100-80gb", "replicas": 4}})))
    lor = compute_metrics(simulate(parse_serve_job({**base, "deployment": {"gpu": "a100-80gb", "replicas": 4, "router": "least_outstanding"}})))
    assert lor["e2e_ms"]["p99"] <= rr["e2e_ms"]["p99"] * 1.05


@pytest.mark.parametrize("model, deployment, precision", [
    ("llama-3.1-70b", {"gpu": "h100", "tp": 4, "pp": 2}, "bf16"),
    ("mixtral-8x7b", {"gpu": "h100", "tp": 2}, "bf16"),
    ("qwen2.5-7b", {"gpu": "l40s", "tp": 1}, "fp8"),
    ("deepseek-v3", {"gpu": "h200", "tp": 8}, "fp8"),
    ("llama-3.1-8b", {"gpu": "a100-80gb", "engine": {"prefix_caching": True}}, "bf16"),
])
def test_models_and_layouts_run(model, deployment, precision):
    spec = parse_serve_job({"model": model, "precision": precision, "deployment": deployment,
                            "workload": {"rate": 2.0, "num_requests": 60, "prefix_len": 32, "prefix_groups": 2,
                                         "input_len": {"dist": "uniform", "min": 64, "max": 900}}})
    m = compute_metrics(simulate(spec))
    assert m["completed"] == 60 and m["tpot_ms"]["median"] > 0


def test_pipeline_parallel_adds_kv_room_but_not_speed():
    base = {"model": "llama-3.1-70b", "workload": {"rate": 1.0, "num_requests": 40, "seed": 1}}
    tp4 = simulate(parse_serve_job({**base, "deployment": {"gpu": "h100", "tp": 4}}))
    pp2 = simulate(parse_serve_job({**base, "deployment": {"gpu": "h100", "tp": 4, "pp": 2}}))
    assert pp2.kv_capacity_tokens > 2 * tp4.kv_capacity_tokens
    # each of the 2 virtual engines still streams every layer's weights per step: no per-token speed-up
    assert compute_metrics(pp2)["tpot_ms"]["median"] == pytest.approx(compute_metrics(tp4)["tpot_ms"]["median"], rel=0.05)


adapter_blocks = st.builds(
    lambda count, share, popularity, extra: {"count": count, "max_loras": max(1, int(count * share)), "popularity": popularity,
                                            "max_cpu_loras": min(count, max(1, int(count * share)) + extra), "rank": 8},
    st.sampled_from([1, 3, 20, 200]), st.sampled_from([0.01, 0.3, 1.0]), st.sampled_from(["uniform", "zipf"]),
    st.sampled_from([0, 5, 1000]))


@given(engine=engines, adapters=adapter_blocks, rate=st.sampled_from([5.0, 50.0, "inf"]), seed=st.integers(0, 5))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_with_adapters_every_request_completes_and_a_batch_never_exceeds_max_loras(engine, adapters, rate, seed):
    spec = parse_serve_job({"model": "llama-3.1-8b", "deployment": {"gpu": "a100-80gb", "engine": engine, "adapters": adapters},
                            "workload": {"rate": rate, "num_requests": 120, "seed": seed,
                                         "input_len": {"dist": "uniform", "min": 8, "max": 500},
                                         "output_len": {"dist": "uniform", "min": 1, "max": 300}}})
    res = simulate(spec)
    assert np.all(np.isfinite(res.finish_s)) and np.all(res.finish_s >= res.first_s)
    v, w = res.itl.samples()
    assert float(np.dot(v, w)) == pytest.approx(float(np.sum(res.finish_s - res.first_s)), rel=1e-9, abs=1e-9)
    if res.preemptions.sum() == 0:  # a request then runs from before its first token to its last
        used = spec.deployment.adapters.draw(len(res.requests), seed)
        times = np.unique(np.concatenate([res.first_s, res.finish_s]))
        for t in (times[:-1] + times[1:]) / 2:
            active = (res.first_s <= t) & (res.finish_s > t)
            assert len(set(used[active].tolist())) <= spec.deployment.adapters.gpu_slots
    a = compute_metrics(res)["adapters"]
    assert a["gpu_loads"] >= a["host_loads"] >= min(adapters["count"], 1)
