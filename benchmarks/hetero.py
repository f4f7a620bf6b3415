#!/usr/bin/env python
"""Heterogeneous clusters: how the answer changes with the links between the groups, and how long the
search takes.

    python benchmarks/hetero.py [--gbps 100,400,1600,6400] [--skip-large] [--plot docs/img/hetero-pipeline.png]

(a) For examples/hetero-h100-a100.yaml (Llama-3.1-70B, 64 H100 + 128 A100) at each inter_group_gbps:
    the estimate of the example's layout (step, share of it in data-parallel communication) and the
    planner's pick with its comparison against the best plan on the H100s alone.
(b) `train plan` search time on 2 groups x 200 GPUs (H100 and A100, Llama-3.1-70B). Target: <= 20 s.
(c) with --plot: the timeline of a small pipeline across groups (Llama-3.1-8B, 2 H100 + 2 A100 ranks of
    tp 8, 16 micro-batches, layers balanced by speed) and its layer split, per-rank busy time.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

from shardwise.specs._loading import read_document
from shardwise.specs.job import cluster_from_mapping, job_from_mapping
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.hetero.estimate import hetero_estimate
from shardwise.train.hetero.plan import hetero_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hetero-h100-a100.yaml"


def sweep(gbps: list[float]) -> None:
    doc = read_document(EXAMPLE)
    print(f"(a) {EXAMPLE.name}: inter_group_gbps vs the layout's estimate and the planner's pick")
    print(f"{'Gbit/s':>8} {'step s':>8} {'dp comm':>8} {'tokens/s':>9}  pick (tokens/s, $/M tokens)")
    for g in gbps:
        d = copy.deepcopy(doc)
        d["cluster"]["inter_group_gbps"] = g
        job = job_from_mapping(d)
        e = hetero_estimate(job)
        res = hetero_plan(job.model, job.cluster, job.training)
        b = res.best
        usd = f"{b.usd_per_million_tokens:.3f}" if b.usd_per_million_tokens is not None else "-"
        print(f"{g:>8g} {e.step_time_s:>8.2f} {e.time_s.dp_comm / e.step_time_s:>8.1%} {e.tokens_per_s:>9,.0f}  "
              f"{b.label} ({b.tokens_per_s:,.0f}, {usd})")
        print(f"{'':>37}{res.comparison()}")


def large() -> None:
    groups = [{"name": "h100", "gpu": "h100-sxm", "nodes": 25, "nic": {"count": 8, "gbps": 400, "kind": "ib"}},
              {"name": "a100", "gpu": "a100-80gb", "nodes": 25, "nic": {"count": 4, "gbps": 100, "kind": "roce"}}]
    cluster = cluster_from_mapping({"groups": groups, "inter_group_gbps": 1600})
    training = TrainingSpec(seq_len=4096, global_batch=1024, precision="bf16")
    t0 = time.perf_counter()
    res = hetero_plan(load_model("llama-3.1-70b"), cluster, training)
    took = time.perf_counter() - t0
    print(f"(b) 2 groups x 200 GPUs, Llama-3.1-70B: {took:.1f} s (target <= 20 s), {res.considered:,} plans and "
          f"layouts considered, {res.exact_evaluations} mixed layouts estimated exactly")
    print(f"    pick: {res.best.label} ({res.best.tokens_per_s:,.0f} tokens/s); {res.comparison()}")


def plot(path: str) -> None:
    from shardwise.pipeline.plot import plot_timeline
    from shardwise.train.pipeline_timing import simulate_pipeline

    groups = [{"name": "h100", "gpu": "h100-sxm", "nodes": 2, "nic": {"count": 8, "gbps": 400, "kind": "ib"}},
              {"name": "a100", "gpu": "a100-80gb", "nodes": 2, "nic": {"count": 4, "gbps": 100, "kind": "roce"}}]
    job = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"groups": groups, "inter_group_gbps": 400},
                            "training": {"seq_len": 4096, "global_batch": 16},
                            "parallel": {"tp": 8, "stage_groups": ["h100", "h100", "a100", "a100"], "micro_batch": 1,
                                         "schedule": "1f1b", "recompute": "selective"}})
    e = hetero_estimate(job)
    _, res = simulate_pipeline(*e.pipelines["pipeline"])
    title = f"{e.label()}: ranks 0-1 H100, 2-3 A100 (step {e.step_time_s:.2f} s)"
    plot_timeline(res, path, title=title)
    print(f"(c) {path}: {e.label()}; busy s per rank " + ", ".join(f"{r.group} {r.busy_s:.2f}" for r in e.ranks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--gbps", default="100,400,1600,6400", help="inter_group_gbps values (comma-separated)")
    ap.add_argument("--skip-large", action="store_true", help="skip the 2 x 200 GPU timing")
    ap.add_argument("--skip-sweep", action="store_true", help="skip the bandwidth sweep")
    ap.add_argument("--plot", help="write the timeline of a small pipeline across groups (.png/.svg)")
    args = ap.parse_args()
    if not args.skip_sweep:
        sweep([float(x) for x in args.gbps.split(",")])
    if not args.skip_large:
        large()
    if args.plot:
        plot(args.plot)


if __name__ == "__main__":
    main()
