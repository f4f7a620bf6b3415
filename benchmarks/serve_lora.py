"""Serving with LoRA adapters against S-LoRA's Table 3 setting S1: Llama-7B (llama-2-7b's architecture),
rank-8 adapters on q, k, v, o, one A100-80GB, uniform popularity, input and output lengths uniform in
[8, 512], offline (every request at t = 0: the saturated throughput), max_loras = min(count, 256), every
adapter allowed in host memory. Prints throughput, KV capacity and adapter statistics per adapter count,
and the simulation's wall time (the table in docs/serving.md comes from this script).

    .venv/bin/python benchmarks/serve_lora.py [--requests 1200] [--counts 0,1,5,100,1000,2000]

S-LoRA's reported figures (req/s at 10 req/s offered): 8.05, 7.99, 7.64, 7.61 for 5, 100, 1000, 2000 adapters.
"""

from __future__ import annotations

import argparse
import time

from shardwise.serve.config import ServeJob, parse_serve_job
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.simulate import simulate


def s1_job(count: int, requests: int) -> ServeJob:
    deployment: dict = {"gpu": "a100-80gb"}
    if count:
        deployment["adapters"] = {"count": count, "rank": 8, "max_loras": min(count, 256), "max_cpu_loras": count}
    return parse_serve_job({"model": "llama-2-7b", "deployment": deployment,
                            "workload": {"rate": "inf", "num_requests": requests, "seed": 42,
                                         "input_len": {"dist": "uniform", "min": 8, "max": 511},
                                         "output_len": {"dist": "uniform", "min": 8, "max": 511}}})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1200)
    ap.add_argument("--counts", default="0,1,5,100,1000,2000")
    args = ap.parse_args()
    print(f"{'adapters':>8} {'req/s':>7} {'vs 5':>7} {'KV tokens':>10} {'slots GiB':>9} {'GPU/disk loads':>15} {'distinct/step':>13} {'wall s':>7}")
    ref = None
    for count in (int(x) for x in args.counts.split(",")):
        t0 = time.perf_counter()
        m = compute_metrics(simulate(s1_job(count, args.requests)))
        wall = time.perf_counter() - t0
        thr = m["request_throughput"]
        ref = thr if count == 5 else ref
        a = m.get("adapters", {})
        rel = f"{thr / ref - 1:+.1%}" if ref and count >= 5 else ""
        loads = f"{a.get('gpu_loads', 0)}/{a.get('host_loads', 0)}"
        print(f"{count:>8} {thr:>7.2f} {rel:>7} {m['kv_capacity_tokens']:>10,} {a.get('slots_gib_per_gpu', 0):>9.2f} {loads:>15} "
              f"{a.get('distinct_per_step_mean', 0):>13.1f} {wall:>7.2f}")


if __name__ == "__main__":
    main()
