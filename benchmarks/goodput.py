#!/usr/bin/env python
"""Goodput throughput on one core: what `train plan --objective goodput` adds per exact estimate, and the
Monte Carlo's simulated runs per second.

    python benchmarks/goodput.py [--seconds 3]

Prints goodput evaluations per second for (a) the 16K-GPU worked example (examples/goodput-llama3-405b-16k.yaml:
checkpoint size, save and load, rates, the spare count that spends the fewest GPU-hours, the best interval)
and (b) the default 64-GPU job, beside the estimate itself; then runs of the whole 16K-GPU run simulated
per second (about 800 interruptions each). `estimate()` does not compute goodput: its rate is unchanged.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from shardwise.specs.job import load_jobs
from shardwise.train.estimate import estimate
from shardwise.train.goodput import goodput
from shardwise.train.goodput_report import run_simulation, work_seconds

ROOT = Path(__file__).resolve().parents[1]


def per_second(fn: Callable[[], object], seconds: float) -> float:
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        fn()
        n += 1
    return n / (time.process_time() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    for name in ("goodput-llama3-405b-16k.yaml", "llama3.1-70b-64xh100.yaml"):
        job = load_jobs(ROOT / "examples" / name)[0]
        est = estimate(job)
        g = per_second(lambda: goodput(job, est), args.seconds)
        e = per_second(lambda: estimate(job), args.seconds)
        print(f"{name}: {g:8,.0f} goodput/s per CPU-second; estimate {e:8,.0f}/s (cached) ")
    job = load_jobs(ROOT / "examples" / "goodput-llama3-405b-16k.yaml")[0]
    est = estimate(job)
    gp = goodput(job, est)
    work = work_seconds(est)
    start = time.process_time()
    sim = run_simulation(gp, work, runs=2000, seed=0)
    cpu = time.process_time() - start
    print(f"Monte Carlo: {sim.wall_s.size / cpu:8,.0f} runs/s per CPU-second ({sim.unexpected.mean():,.0f} interruptions per run)")


if __name__ == "__main__":
    main()
