"""Chunked prefill and disaggregation move capacity in the direction, and roughly by the size, the
papers report on their settings.

- Sarathi-Serve (Agrawal et al., OSDI 2024): Mistral-7B on one A100, long prompts, capacity under a
  strict P99 time-between-tokens SLO: chunked prefills "up to 2.6x" over vLLM (prefill-first).
- DistServe (Zhong et al., OSDI 2024): per-GPU goodput (max rate with >= 90% of requests within TTFT
  and TPOT) 2.0x-4.48x over vLLM when the TPOT target is tight, by removing prefill-decode interference.
"""

import math

from shardwise.serve import compute_metrics, parse_serve_job, simulate


def max_rate(make_job, ok, lo=0.2, hi=60.0, tol=1.05):
    """Bisection on the request rate for the largest rate whose run satisfies `ok(metrics)`."""
    good, bad = lo, hi
    while bad / good > tol:
        mid = math.sqrt(good * bad)
        job = make_job(mid)
        if ok(compute_metrics(simulate(job), job.slo)):
            good = mid
        else:
            bad = mid
    return good


LONG_PROMPTS = {"input_len": {"dist": "lognormal", "median": 1500, "sigma": 0.6, "max": 7000},
                "output_len": {"dist": "lognormal", "median": 150, "sigma": 0.6, "max": 1000}, "seed": 1}


def test_chunked_prefill_raises_capacity_under_a_strict_tbt_slo():
    def job(engine):
        return lambda rate: parse_serve_job({"model": "mistral-7b", "deployment": {"gpu": "a100-80gb", "engine": engine},
                                             "workload": {"rate": rate, "num_requests": 600, **LONG_PROMPTS}})
    strict = lambda m: m["itl_ms"]["p99"] <= 100 and m["ttft_ms"]["p99"] <= 5000  # noqa: E731
    sarathi = max_rate(job({"chunked_prefill": True, "max_num_batched_tokens": 512}), strict)
    vllm = max_rate(job({"version": "vllm-0.6.0", "chunked_prefill": False, "max_num_batched_tokens": 8192}), strict)
    gain = sarathi / vllm
    assert gain > 1.5, gain  # paper: up to 2.6x on Mistral-7B / 1 A100; we get ~4x (docs/serving.md)
    assert gain < 8.0, gain


CHAT_1K = {"input_len": {"dist": "lognormal", "median": 1024, "sigma": 0.5, "max": 4000},
           "output_len": {"dist": "lognormal", "median": 200, "sigma": 0.5, "max": 1000}, "seed": 2}
TIGHT = {"ttft_ms": 400, "tpot_ms": 16}


def per_gpu_goodput(deployment, gpus):
    def make(rate):
        return parse_serve_job({"model": "llama-3.1-8b", "deployment": deployment,
                                "workload": {"rate": rate, "num_requests": 800, **CHAT_1K}, "slo": TIGHT})
    return max_rate(make, lambda m: m["slo_attainment"] >= 0.9, hi=80.0) / gpus


def test_disaggregation_raises_per_gpu_goodput_when_tpot_is_tight():
    colocated = per_gpu_goodput({"gpu": "a100-80gb", "engine": {"version": "vllm-0.6.0", "chunked_prefill": False, "max_num_batched_tokens": 8192}}, 1)
    disagg = per_gpu_goodput({"prefill": {"gpu": "a100-80gb", "replicas": 2}, "decode": {"gpu": "a100-80gb", "replicas": 3},
                              "kv_link_gbps": 200}, 5)
    gain = disagg / colocated
    assert gain > 1.5, gain  # DistServe: 2.0x-4.48x over vLLM; we get ~2.3x (docs/serving.md)
    assert gain < 6.0, gain


def test_disaggregation_does_not_help_when_the_slo_is_loose():
    loose = {"ttft_ms": 2000, "tpot_ms": 100}

    def goodput(dep, gpus):
        make = lambda rate: parse_serve_job({"model": "llama-3.1-8b", "deployment": dep,  # noqa: E731
                                             "workload": {"rate": rate, "num_requests": 800, **CHAT_1K}, "slo": loose})
        return max_rate(make, lambda m: m["slo_attainment"] >= 0.9, hi=80.0) / gpus

    colocated = goodput({"gpu": "a100-80gb", "engine": {"chunked_prefill": True, "max_num_batched_tokens": 2048}}, 1)
    disagg = goodput({"prefill": {"gpu": "a100-80gb", "replicas": 1}, "decode": {"gpu": "a100-80gb", "replicas": 1}}, 2)
    assert disagg <= 1.1 * colocated  # with loose SLOs colocation uses both GPUs' compute for both phases
