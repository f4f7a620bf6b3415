"""Serving simulator speed: simulated requests per wall-clock second on a 10,000-request trace
(Azure LLM inference trace layout), on one core, and CPU microseconds per request (the figure to compare
on a shared machine, where other processes stretch the wall clock); and the time `serve plan` takes for
a realistic case.

    .venv/bin/python benchmarks/serve.py [--requests 10000] [--repeat 3]

Prints figures only; tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from shardwise.serve.config import parse_serve_job
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.plan_cli import plan_request
from shardwise.serve.planner import plan
from shardwise.serve.simulate import simulate


def write_trace(path: Path, n: int, rate: float, seed: int = 0) -> None:
    """A synthetic trace in the Azure layout: Poisson sends, conversation-like lengths (log-normal
    prompts around 1k tokens, replies around 200; cf. AzureLLMInferenceTrace_conv)."""
    rng = np.random.default_rng(seed)
    t0 = np.datetime64("2023-11-16T18:00:00.000000")
    gaps = rng.exponential(1.0 / rate, n)
    stamps = t0 + (np.cumsum(gaps) * 1e6).astype("timedelta64[us]")
    inp = np.clip(rng.lognormal(np.log(800), 0.9, n), 8, 8000).astype(int)
    out = np.clip(rng.lognormal(np.log(150), 0.8, n), 1, 2000).astype(int)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{str(s).replace('T', ' ')},{i},{o}" for s, i, o in zip(stamps, inp, out, strict=True)]
    path.write_text("\n".join(rows) + "\n")


def bench_simulator(n: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "azure_conv_like.csv"
        write_trace(trace, n, rate=40.0)
        cases = {
            "8B, 4x H100 tp1, v1 chunked": {"gpu": "h100", "replicas": 4, "engine": {"chunked_prefill": True}},
            "8B, 4x H100 tp1, v0 prefill-first": {"gpu": "h100", "replicas": 4, "engine": {"chunked_prefill": False, "max_num_batched_tokens": 8192, "version": "vllm-0.6.0"}},
            "8B, disaggregated 2 prefill + 4 decode H100": {"prefill": {"gpu": "h100", "replicas": 2}, "decode": {"gpu": "h100", "replicas": 4}},
        }
        print(f"simulator: {n:,}-request trace (Azure layout, 40 req/s), llama-3.1-8b, best of {repeat}")
        for name, dep in cases.items():
            job = parse_serve_job({"model": "llama-3.1-8b", "deployment": dep, "workload": {"arrival": "trace", "path": str(trace)}})
            best = best_cpu = float("inf")
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                result = simulate(job)
                best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
            m = compute_metrics(result)
            print(f"  {name:44s} {n / best:10,.0f} simulated req/s  ({best:.3f} s wall, {best_cpu / n * 1e6:.1f} us CPU "
                  f"per request; {m['iterations']:,} iterations, median TTFT {m['ttft_ms']['median']:.0f} ms, "
                  f"TPOT {m['tpot_ms']['median']:.1f} ms)")


def bench_plan() -> None:
    cases = [
        ("llama-3.1-8b", 20.0, 300.0, 50.0, "h100:8,a100-80gb:16"),
        ("llama-3.1-70b", 8.0, 1000.0, 60.0, "h100:16,a100-80gb:16"),
    ]
    for model, rate, ttft, tpot, gpus in cases:
        req = plan_request(None, model, rate, ttft, tpot, None, gpus, None, None, None)
        t = time.perf_counter()
        result = plan(req)
        dt = time.perf_counter() - t
        chosen = result.chosen.describe() if result.chosen else "no feasible deployment"
        print(f"serve plan {model} at {rate:g} req/s (TTFT {ttft:g} ms, TPOT {tpot:g} ms, {gpus}): {dt:.1f} s, "
              f"{result.simulations} simulations -> {chosen}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bench_simulator(args.requests, args.repeat)
    bench_plan()


if __name__ == "__main__":
    main()
