"""Run a plan for real and turn the workers' results into one report (needs torch).

:func:`run_plan` writes the schedule CSV, launches the workers (:mod:`.launch`), then merges: per-step
loss (mean over DP ranks of the ranks that hold the loss, weighted by their batch on an uneven split) and step time (first rank's start to last
rank's end), memory per rank, the measured timeline of each step (pipeline ranks of the DP-0/TP-0
slice, the simulator's shape), the prediction from measured stage costs, and with ``check`` the
comparison with a single-process reference (:mod:`.reference`).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from shardwise.execute.config import FAULTS, RunConfig
from shardwise.execute.timeline import (
    action_overhead_s,
    measured_timeline,
    predict,
    prediction_error,
    run_trace,
    stage_costs,
)
from shardwise.pipeline import Schedule, generate_schedule, write_csv_text

MEMORY_SOURCE_CPU = ("peak_rss_bytes: the worker process's peak resident set (getrusage ru_maxrss; includes "
                     "the torch runtime itself); params/grads/optimizer_bytes: tensor bytes held by the rank")
MEMORY_SOURCE_CUDA = "cuda_peak_bytes: torch.cuda.max_memory_allocated; params/grads/optimizer_bytes: tensor bytes"


def _schedule(cfg: RunConfig) -> Schedule:
    if cfg.pp > 1:
        return generate_schedule(cfg.schedule, cfg.pp, cfg.microbatches, cfg.vpp)
    return generate_schedule("1f1b", 1, cfg.microbatches)  # pp = 1: F, B per micro-batch


def _pipeline_rows(results: list[dict], cfg: RunConfig, key: str, index: int | None = None) -> list[dict]:
    """Per pipeline rank (DP rank 0, TP rank 0): the recorded rows of ``key`` (one step, or all)."""
    rows = []
    for pp_r in range(cfg.pp):
        res = results[pp_r * cfg.dp * cfg.tp]
        rows.append(res[key][index] if index is not None else res[key])
    return rows


def _merge_grads(results: list[dict], step: int) -> dict:
    merged: dict = {}
    for res in results:
        if res["reports_grads"]:
            merged.update(res["grads"][step])
    return merged


def run_plan(cfg: RunConfig, workdir: Path | None = None) -> dict:
    """Execute ``cfg`` and return the report mapping (see :func:`shardwise.execute.report.report_table`)."""
    from shardwise.execute.torch_import import require_torch

    torch = require_torch()
    from shardwise.errors import ShardwiseError
    from shardwise.execute.launch import launch

    if cfg.backend == "nccl" and torch.cuda.device_count() < cfg.world_size:
        raise ShardwiseError(f"--backend nccl needs one CUDA GPU per process ({cfg.world_size}); this machine has "
                             f"{torch.cuda.device_count()}: use --backend gloo")

    sched = _schedule(cfg)
    files = {"schedule.csv": write_csv_text(sched)} if cfg.pp > 1 else {}
    results = launch(cfg, workdir, files)
    name = sched.name if cfg.pp > 1 else "none"
    steps = []
    for k in range(cfg.steps):
        losses = [(r["steps"][k]["loss"], cfg.local_microbatches(r["coords"][1])) for r in results if r["reports_loss"]]
        start = min(r["steps"][k]["start"] for r in results)
        mean = (sum(v for v, _ in losses) / len(losses) if cfg.dp_microbatches is None
                else sum(v * w for v, w in losses) / sum(w for _, w in losses))  # uneven DP: weighted by batch
        steps.append({"step": k, "loss": mean,
                      "step_time_s": max(r["steps"][k]["end"] for r in results) - start})
    timelines = [measured_timeline(_pipeline_rows(results, cfg, "timeline", k), name, cfg.pp, sched.vpp,
                                   sched.num_stages, cfg.microbatches) for k in range(cfg.steps)]
    measured_s = statistics.median(t["makespan"] for t in timelines)
    steps_rows = [row for k in range(cfg.steps) for row in _pipeline_rows(results, cfg, "timeline", k)]
    if cfg.calibrate:
        calib = _pipeline_rows(results, cfg, "calibration")
        rows = [row for c in calib for row in c["rows"]]
        p2p_s = calib[0]["p2p_s"] or 0.0
        cost_source = f"{cfg.calib_steps - 1} calibration passes after a warm-up, before the measured steps"
    else:
        rows, p2p_s = steps_rows, 0.0
        cost_source = "the measured steps themselves (no --calibrate: no separate calibration, p2p_s = 0)"
    costs = stage_costs(rows, sched.num_stages)
    overhead_s = action_overhead_s(rows)
    pred = predict(sched, costs, p2p_s, overhead_s)
    # the same simulation with the measured steps' own costs: separates drift of the costs between
    # calibration and measurement from the simulator's own error
    inrun = predict(sched, stage_costs(steps_rows, sched.num_stages), p2p_s, action_overhead_s(steps_rows))
    notes = list(cfg.notes)
    if not cfg.calibrate:
        notes.append("the prediction is not calibrated: without --calibrate it reuses the measured steps' own stage "
                     "costs and no point-to-point time (p2p 0), so its error is not an independent check; "
                     "run with --calibrate to time the stages first")
    cores = os.cpu_count() or 1
    if cfg.backend == "gloo" and cfg.world_size > cores:
        notes.append(f"{cfg.world_size} processes on {cores} CPU cores: ranks share cores, so measured times "
                     "include that contention (the simulator assumes one processor per rank)")
    report = {
        "layout": cfg.describe(), "nproc": cfg.world_size, "backend": cfg.backend,
        "device": "cuda" if cfg.backend == "nccl" else "cpu", "model": cfg.model.model_dump(exclude_none=True),
        "global_batch": cfg.global_batch, "seq_len": cfg.seq_len, "schedule": cfg.schedule,
        "schedule_source": results[0]["schedule_source"], "fault": cfg.fault and f"{cfg.fault}: {FAULTS[cfg.fault]}",
        "steps": steps,
        "memory_source": MEMORY_SOURCE_CUDA if cfg.backend == "nccl" else MEMORY_SOURCE_CPU,
        "memory": [{"rank": r["rank"], "pp": r["coords"][0], "dp": r["coords"][1], "tp": r["coords"][2],
                    "peak_rss_bytes": r["peak_rss_bytes"], "cuda_peak_bytes": r["cuda_peak_bytes"],
                    **r["state_bytes"]} for r in results],
        "makespan": {
            "measured_s": measured_s, "predicted_s": pred.makespan,
            "error": prediction_error(pred.makespan, measured_s),
            "predicted_inrun_s": inrun.makespan, "error_inrun": prediction_error(inrun.makespan, measured_s),
            "stage_costs_s": costs, "p2p_s": p2p_s, "action_overhead_s": overhead_s, "cost_source": cost_source,
            "calibrated": cfg.calibrate,
        },
        "timeline": {"measured": timelines[-1], "predicted": pred.to_dict(), "measured_steps": timelines},
        "trace": run_trace(sched, timelines[-1], pred, cfg.describe()),
        "check": None,
        "notes": notes,
    }
    if cfg.check:
        from shardwise.execute.reference import check, reference_run

        ref_losses, ref_grads = reference_run(cfg)
        run_grads = [_merge_grads(results, k) for k in range(cfg.steps)]
        res = check([s["loss"] for s in steps], run_grads, ref_losses, ref_grads)
        report["check"] = {**res.to_dict(), "reference_losses": ref_losses}
    return report
