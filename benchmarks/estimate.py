#!/usr/bin/env python
"""Single-job `estimate` throughput on one core.

    python benchmarks/estimate.py [--seconds 3]

Prints estimates per second for (a) the same job repeatedly (per-layer costs, the per-rank tails and
the schedule simulation cached: the assembly cost; then with the per-rank tails recomputed each time), (b) a stream of 384 distinct plans of one model (tp, pp, zero,
recompute, micro-batch vary), caches warm after the first pass, and (c) the same stream with every
cache cleared before each estimate (a full schedule simulation per estimate). Target: >= 2,000/s.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Sequence

from shardwise.cost.layer import clear_caches
from shardwise.specs.job import TrainJob, job_from_mapping
from shardwise.train.assembly import _memo_tail
from shardwise.train.estimate import estimate
from shardwise.train.pipeline_timing import _timed


def make_job(tp=8, pp=4, zero=1, recompute="selective", micro_batch=1, model="llama-3.1-70b", gpus=512):
    return job_from_mapping({
        "model": model,
        "cluster": {"gpu": "H100-SXM", "gpus": gpus},
        "training": {"seq_len": 8192, "global_batch": 1024},
        "parallel": {"tp": tp, "pp": pp, "zero": zero, "recompute": recompute, "micro_batch": micro_batch, "sequence_parallel": True},
    })


def rate(fn: Callable[[TrainJob], object], jobs: Sequence[TrainJob], seconds: float) -> str:
    """Estimates per wall-clock second and per CPU second of this process (the two differ when other
    processes share the cores)."""
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    for job in itertools.cycle(jobs):
        fn(job)
        n += 1
        if n % 64 == 0 and time.perf_counter() - start > seconds:
            break
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return f"{n / wall:8,.0f} estimates/s wall, {n / cpu:8,.0f} per CPU-second"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    same = [make_job()]
    varied = [make_job(tp, pp, z, rc, mb) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8) for z in (0, 1, 2, 3)
              for rc in ("none", "selective", "full") for mb in (1, 2)]
    print(f"same job:        {rate(estimate, same, args.seconds)}")

    def tails_recomputed(job):
        _memo_tail.cache_clear()
        return estimate(job)

    print(f"same job, per-rank tails recomputed: {rate(tails_recomputed, same, args.seconds)}")
    clear_caches()
    _memo_tail.cache_clear()
    print(f"{len(varied)} distinct plans: {rate(estimate, varied, args.seconds)} (first pass fills the caches)")

    def cold(job):
        clear_caches()
        for f in (_timed, _memo_tail):
            f.cache_clear()
        return estimate(job)

    print(f"cold, no caches:  {rate(cold, varied, args.seconds)} (one schedule simulation each)")


if __name__ == "__main__":
    main()
