"""RL planner speed: the time `rl estimate` and `rl plan` take on the two worked examples (GRPO on Llama-3.1-8B
with 64 H100, on Llama-3.1-70B with 256 H100), wall clock and CPU, with the serving simulations each ran.

    .venv/bin/python benchmarks/rl.py [--repeat 1] [--brute]

Each run starts with the RL caches empty (rollouts, batches, training estimates), as a fresh `shardwise rl`
process does (the process's import time, about 1-2 s, is not counted). `--brute` also times `rl plan` with
every candidate simulated (prune=False, the search before the bounds) and checks both report the same
figures. On a shared machine compare the CPU seconds. Prints figures only; tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardwise.rl import batch as rl_batch
from shardwise.rl import phases, step
from shardwise.rl.phases import Rollout
from shardwise.rl.planner import RLPlanResult, plan_rl
from shardwise.rl.spec import load_rl_job
from shardwise.serve.config import ServeJob
from shardwise.serve.workload import Requests

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["examples/rl-grpo-llama3.1-8b-64xh100.yaml", "examples/rl-grpo-llama3.1-70b-256xh100.yaml"]


def _cold() -> None:
    """Empty the RL module caches (a fresh process)."""
    for cache in (step._ROLLOUTS, step._BATCHES, phases._ESTIMATES, rl_batch._LAYOUTS):
        cache.clear()


class _Count:
    """Counts the serving simulations (rollout phases) run."""

    def __init__(self) -> None:
        self.n = 0
        self._run = step.run_rollout

    def __enter__(self) -> _Count:
        def run(job: ServeJob, requests: Requests) -> Rollout:
            self.n += 1
            return self._run(job, requests)

        step.run_rollout = run
        return self

    def __exit__(self, *exc: object) -> None:
        step.run_rollout = self._run


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float, int]:
    best = best_cpu = float("inf")
    sims = 0
    out = None
    for _ in range(repeat):
        _cold()
        with _Count() as count:
            t, c = time.perf_counter(), time.process_time()
            out = fn()
            best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
        sims = count.n
    return out, best, best_cpu, sims


def _figures(res: RLPlanResult) -> dict:
    d = res.to_dict()
    d.pop("seconds")
    d.pop("bounded_not_simulated")
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure (the best is printed)")
    ap.add_argument("--brute", action="store_true", help="also time rl plan with every candidate simulated")
    args = ap.parse_args()
    for path in EXAMPLES:
        job = load_rl_job(ROOT / path)
        print(f"{Path(path).name}: {job.policy.name}, {job.cluster.num_gpus} x {job.cluster.gpu.name}, "
              f"{job.algorithm.prompts_per_step} x {job.algorithm.group_size} responses")
        est, wall, cpu, sims = _timed(lambda job=job: step.estimate_rl(job), args.repeat)
        print(f"  rl estimate           {wall:6.2f} s wall {cpu:6.2f} s CPU  {sims:3d} simulations  (period {est.period_s:.1f} s)")
        res, wall, cpu, sims = _timed(lambda job=job: plan_rl(job), args.repeat)
        print(f"  rl plan               {wall:6.2f} s wall {cpu:6.2f} s CPU  {sims:3d} simulations  ({res.considered} candidates, "
              f"{res.bounded} bounded without simulating; chosen {res.best.placement['kind']} {res.best.placement['mode']}, "
              f"{res.best.samples_per_s:.1f} samples/s)")
        if args.brute:
            brute, wall, cpu, sims = _timed(lambda job=job: plan_rl(job, prune=False), args.repeat)
            same = _figures(brute) == _figures(res)
            print(f"  rl plan, brute force  {wall:6.2f} s wall {cpu:6.2f} s CPU  {sims:3d} simulations  "
                  f"(same report: {'yes' if same else 'NO'})")


if __name__ == "__main__":
    main()
