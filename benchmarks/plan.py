#!/usr/bin/env python
"""Planner speed: plans screened per second (the vectorised stage) and end-to-end search time.

    python benchmarks/plan.py

Cases: Llama-3.1-405B on 16,384 H100s (seq 8192, global batch 2048: the foundation issue's case),
Llama-3.1-70B on 512 H100s (seq 8192, batch 512), Mixtral-8x7B on 64 A100-80GB (seq 4096, batch 256)
and DeepSeek-V3 on 1,024 H100s (seq 4096, batch 4096; issue 11: ep folded over tp*cp*dp with its own
etp, the CP schemes (a2a+p2p with each Ulysses size), and with --precision fp8 the FP8 recipes; target <= 20 s, with its rejections
printed). Target for the screen: >= 50,000 plans/s on one core. Also prints, for 60 random plans that fit per
case, how the screen's approximation and lower bound compare with the exact estimate (the planner
trusts 90% of the approximation when it decides it may stop).
"""

from __future__ import annotations

import time

import numpy as np

from shardwise.specs.hardware import Cluster, make_cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.screen import dominated, drop_dominated_recipes, layer_table, screen
from shardwise.train.search_space import Candidates, enumerate_plans

CASES = [
    ("llama-3.1-405b", "H100-SXM", 16384, 8192, 2048, "bf16"),
    ("llama-3.1-70b", "H100-SXM", 512, 8192, 512, "bf16"),
    ("mixtral-8x7b", "A100-80GB", 64, 4096, 256, "bf16"),
    ("deepseek-v3", "H100-SXM", 1024, 4096, 4096, "bf16"),
    ("deepseek-v3", "H100-SXM", 1024, 4096, 4096, "fp8"),
]


def main() -> None:
    ratios = []
    print("screen/s and total are per CPU second of this process (wall-clock in brackets: other processes may share the cores)")
    print(f"{'case':50s} {'considered':>10s} {'screened':>9s} {'screen/s':>10s} {'exact':>6s} {'total s':>16s}  best plan")
    rejections = []
    for name, gpu, n, seq, batch, precision in CASES:
        model, cluster = load_model(name), make_cluster(gpu, n)
        training = TrainingSpec(seq_len=seq, global_batch=batch, precision=precision)
        cands = enumerate_plans(model, cluster, training,  # the planner's steps
                                prune=lambda c: drop_dominated_recipes(c, cluster, training))
        t = time.process_time()
        table = layer_table(cands, model, cluster, training)
        keep = ~dominated(cands, table)
        cands.keep(keep)
        screen(cands, model, cluster, training, table=table.subset(keep))
        rate = len(cands) / (time.process_time() - t)
        t, wall = time.process_time(), time.perf_counter()
        res = plan_search(model, cluster, training, top_k=5)
        total, wall = time.process_time() - t, time.perf_counter() - wall
        p = res.top[0].plan
        experts = f"ep{p['ep']} etp{p['etp'] or p['tp']} " if model.is_moe else ""
        best = (f"tp{p['tp']} pp{p['pp']} v{p['vpp']} dp{p['dp']} cp{p['cp']}/{p['cp_comm']} {experts}"
                f"z{p['zero']} mb{p['micro_batch']} {p['schedule']} rc={p['recompute']} {res.top[0].fp8_recipe or precision}: "
                f"MFU {res.top[0].mfu:.1%}")
        label = f"{name} on {n} x {gpu}, seq {seq}, batch {batch}, {precision}"
        print(f"{label:50s} {res.considered:10,d} {len(cands):9,d} {rate:10,.0f} {res.exact_evaluations:6d} {total:7.2f} ({wall:6.1f})  {best}")
        if model.is_moe:
            rejections.append((label, res.rejected))
        ratios.append(_screen_accuracy(cands, model, cluster, training))
    for label, rejected in rejections:
        print(f"rejected in {label}:")
        for reason, count in rejected.items():
            print(f"  {count:>12,d}  {reason}")
    for (name, *_, precision), (approx, lb) in zip(CASES, ratios, strict=True):
        print(f"{name} {precision}: approximation/exact min {approx.min():.3f} median {np.median(approx):.3f} max {approx.max():.3f}; "
              f"lower bound/exact max {lb.max():.3f} (must be <= 1)")


def _screen_accuracy(cands: Candidates, model: ModelSpec, cluster: Cluster, training: TrainingSpec,
                     n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    scr = screen(cands, model, cluster, training)
    fits = np.nonzero(scr["memory_bytes"] <= cluster.usable_memory_bytes)[0]
    pick = np.random.default_rng(0).choice(fits, size=min(n, len(fits)), replace=False)
    exact = np.array([estimate(job_from_plan(model, cluster, training, cands.plan_dict(i)), split_p2p=False).step_time_s for i in pick])
    return scr["step_s"][pick] / exact, scr["step_lb_s"][pick] / exact


if __name__ == "__main__":
    main()
