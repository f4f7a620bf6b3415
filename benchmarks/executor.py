"""Measured vs predicted pipeline makespan: run each schedule for real (torch, gloo on CPU) after
calibration, feed the measured per-stage F/I/W/B times, host overhead per action and P2P hop time to
the simulator, and print the prediction error.

    python benchmarks/executor.py [--pp 2 3 4] [--schedules gpipe 1f1b interleaved zb-h1 zbv]
                                  [--microbatches 8] [--steps 4] [--json out.json]

The makespan is the span of the compute actions of one step (first F to last W/B over all pipeline
ranks), median over the measured steps. On a host with fewer cores than processes (pp=3, 4 on two
cores) the ranks share cores, so measured times include that contention. "in-run" re-simulates with
the measured steps' own stage costs: the gap between the two errors is cost drift between calibration
and measurement, the rest is what the simulator leaves out.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardwise.specs.job import TrainJob


def _job(pp: int, schedule: str, microbatches: int, layers: int) -> TrainJob:
    from shardwise.specs.job import job_from_mapping

    vpp = 2 if schedule in ("interleaved", "bfs") else 1
    return job_from_mapping({
        "model": {"layers": layers, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 512},
        "cluster": {"gpu": "H100-SXM", "gpus": pp},
        "training": {"seq_len": 64, "global_batch": 2 * microbatches, "precision": "fp32"},
        "parallel": {"pp": pp, "vpp": vpp, "schedule": schedule, "micro_batch": 2, "recompute": "none"},
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--schedules", nargs="+", default=["gpipe", "1f1b", "interleaved", "zb-h1", "zbv"])
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    args = ap.parse_args()

    from shardwise.errors import ShardwiseError
    from shardwise.execute import config_from_job, run_plan

    print(f"host: {os.cpu_count()} cores; model 8 layers, hidden 128, seq 64, micro-batch 2, "
          f"{args.microbatches} micro-batches; gloo on CPU; {args.steps} measured steps after 3 calibration passes")
    head = (f"{'schedule':<12}{'pp':>3}{'stages':>7}{'measured ms':>13}{'predicted ms':>14}{'error':>9}"
            f"{'in-run ms':>11}{'error':>9}{'bubble meas':>13}{'bubble pred':>13}{'p2p us':>8}{'ovh us':>8}")
    print(head)
    print("-" * len(head))
    rows = []
    for pp in args.pp:
        for name in args.schedules:
            t0 = time.perf_counter()
            try:
                cfg = config_from_job(_job(pp, name, args.microbatches, args.layers), steps=args.steps,
                                      calibrate=True, timeout_s=600)
                rep = run_plan(cfg)
            except ShardwiseError as exc:
                print(f"{name:<12}{pp:>3}  not run: {exc}")
                rows.append({"schedule": name, "pp": pp, "error_text": str(exc)})
                continue
            mk, tl = rep["makespan"], rep["timeline"]
            row = {"schedule": name, "pp": pp, "stages": tl["predicted"]["num_stages"],
                   "measured_s": mk["measured_s"], "predicted_s": mk["predicted_s"], "error": mk["error"],
                   "predicted_inrun_s": mk["predicted_inrun_s"], "error_inrun": mk["error_inrun"],
                   "bubble_measured": tl["measured"]["bubble_fraction"],
                   "bubble_predicted": tl["predicted"]["bubble_fraction"], "p2p_s": mk["p2p_s"],
                   "overhead_s": mk["action_overhead_s"], "source": rep["schedule_source"],
                   "wall_s": time.perf_counter() - t0}
            rows.append(row)
            print(f"{name:<12}{pp:>3}{row['stages']:>7}{row['measured_s'] * 1e3:>13.1f}"
                  f"{row['predicted_s'] * 1e3:>14.1f}{row['error'] * 100:>8.1f}%"
                  f"{row['predicted_inrun_s'] * 1e3:>11.1f}{row['error_inrun'] * 100:>8.1f}%"
                  f"{row['bubble_measured']:>13.3f}{row['bubble_predicted']:>13.3f}{row['p2p_s'] * 1e6:>8.0f}"
                  f"{row['overhead_s'] * 1e6:>8.0f}")
    for key, label in (("error", "calibrated"), ("error_inrun", "in-run costs")):
        errs = [abs(r[key]) for r in rows if key in r]
        if errs:
            print(f"{label}: mean |error| {sum(errs) / len(errs) * 100:.1f}%, max |error| "
                  f"{max(errs) * 100:.1f}% over {len(errs)} runs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
