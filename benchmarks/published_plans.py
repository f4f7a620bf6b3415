#!/usr/bin/env python
"""Published plans vs the planner's picks, for the calibration data's Megatron and Llama 3 rows.

    python benchmarks/published_plans.py [--ids PREFIX ...]

For each record: the published plan's predicted step time (exact estimate), the planner's best
predicted step time for the same model, GPUs, sequence length and global batch (the search is free
except for what the source's software could not do: FlashAttention for the 2021-22 Megatron rows),
and the published plan's rank among every plan that fits, counted with the screen's approximation
(plans whose approximate step time beats the published plan's exact one).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from shardwise.calibration.records import build_job
from shardwise.calibration.sources import source_of
from shardwise.calibration.validate import default_data_path
from shardwise.errors import ShardwiseError
from shardwise.train.estimate import estimate
from shardwise.train.planner import plan_search
from shardwise.train.screen import ScreenOptions, screen
from shardwise.train.search_space import enumerate_plans

PREFIXES = ("korthikanti22_t5", "korthikanti22_530B", "narayanan21_t1", "narayanan21_t2_PTD-P", "llama3_t4")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", nargs="*", default=list(PREFIXES))
    args = ap.parse_args()
    records = [r for r in json.loads(default_data_path().read_text()) if r["id"].startswith(tuple(args.ids))]
    print(f"{'record':38s} {'published plan':34s} {'pub s':>8s} {'best s':>8s} {'speedup':>7s} {'rank':>12s}  best plan")
    for rec in records:
        try:
            job = build_job(rec, source_of(rec["id"]), [])
        except ShardwiseError as exc:
            print(f"{rec['id']:38s} skipped: {exc}")
            continue
        pub = estimate(job)
        extra = {"flash_attention": job.plan.flash_attention}
        res = plan_search(job.model, job.cluster, job.training, top_k=1, fixed=dict(extra))
        best = res.top[0]
        cands = enumerate_plans(job.model, job.cluster, job.training, flash_attention=extra["flash_attention"])
        scr = screen(cands, job.model, job.cluster, job.training, options=ScreenOptions(flash_attention=extra["flash_attention"]))
        fits = scr["memory_bytes"] <= job.cluster.gpu.memory_bytes
        rank = int((scr["step_s"][fits] < pub.step_time_s).sum()) + 1
        p, b = job.plan, best.plan
        pub_label = f"tp{p.tp} pp{p.pp} v{p.vpp} dp{p.dp} cp{p.cp} mb{p.micro_batch} {p.schedule} rc={p.recompute}"
        best_label = f"tp{b['tp']} pp{b['pp']} v{b['vpp']} dp{b['dp']} cp{b['cp']} z{b['zero']} mb{b['micro_batch']} {b['schedule']} rc={b['recompute']}"
        fit = "" if pub.fits else " (published plan OOM in model)"
        print(f"{rec['id']:38s} {pub_label:34s} {pub.step_time_s:8.2f} {best.step_time_s:8.2f} {pub.step_time_s / best.step_time_s:6.2f}x "
              f"{rank:>5d}/{int(fits.sum()):<6d}  {best_label}{fit}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
