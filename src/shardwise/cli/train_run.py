"""`shardwise train run`: execute a plan for real with torch.distributed, check numerics, time it."""

from __future__ import annotations

from pathlib import Path

import typer

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json, json_text
from shardwise.errors import CheckFailed, ShardwiseError


def run_cmd(
    job: Path = typer.Argument(..., help="Job file (YAML/JSON); its model should be small (an inline mapping)."),
    nproc: int = typer.Option(None, "--nproc", "-n", help="Processes to launch (default: cluster.gpus)."),
    steps: int = typer.Option(3, "--steps", "-k", help="Training steps on synthetic data."),
    backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) or nccl (one GPU per process)."),
    check: bool = typer.Option(False, "--check", help="Compare loss and every gradient with a single-process run."),
    calibrate: bool = typer.Option(False, "--calibrate",
                                   help="Measure per-stage F/I/W/B times first, simulate, report the makespan error."),
    timeline: Path = typer.Option(None, "--timeline", help="Write measured and predicted timelines (JSON)."),
    plot: Path = typer.Option(None, "--plot", help="Plot measured vs predicted timeline (.png/.svg/.pdf)."),
    trace: Path = typer.Option(None, "--trace", help="Write measured and predicted timelines as a Chrome/Perfetto trace (JSON)."),
    format: Format = format_option(),
    schedule: str = typer.Option(None, "--schedule", help="Override the plan's pipeline schedule."),
    seed: int = typer.Option(0, "--seed", help="Seed of weights and data."),
    index: int = typer.Option(None, "--index", help="Which job of a file holding several (0-based)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds before the run is stopped."),
    inject_fault: str = typer.Option(None, "--inject-fault", hidden=True,
                                     help="Break the layout on purpose (skip-dp-grad-reduce) to see --check fail."),
) -> None:
    """Run a plan for real at small scale: loss, step time, memory per rank, and with --check the largest
    relative difference of loss and gradients against a single-process reference.

    Examples:

      shardwise train run job.yaml --nproc 4 --check

      shardwise train run job.yaml --calibrate --plot measured.png --trace run.json
    """
    from shardwise.execute import config_from_job, require_torch

    require_torch()
    from shardwise.specs.job import load_jobs

    jobs = load_jobs(job)
    if index is None and len(jobs) > 1:
        raise ShardwiseError(f"{job} holds {len(jobs)} jobs; train run runs one: pass --index 0..{len(jobs) - 1}")
    i = index or 0
    if not 0 <= i < len(jobs):
        raise ShardwiseError(f"--index {i} is out of range: {job} holds {len(jobs)} job(s)")
    cfg = config_from_job(jobs[i], nproc=nproc, steps=steps, backend=backend, check=check, calibrate=calibrate,
                          seed=seed, fault=inject_fault, timeout_s=timeout, schedule=schedule)
    from shardwise.execute.report import report_json, report_table, timeline_json
    from shardwise.execute.run import run_plan

    report = run_plan(cfg)
    if timeline is not None:
        timeline.parent.mkdir(parents=True, exist_ok=True)
        timeline.write_text(json_text(timeline_json(report), indent=1))
    if trace is not None:
        from shardwise.pipeline.trace import write_trace

        write_trace(report["trace"], trace)
    if plot is not None:
        from shardwise.execute.plot import plot_measured_vs_predicted

        tl = report["timeline"]
        costs = "calibrated stage costs" if calibrate else "stage costs from the measured steps"
        plot_measured_vs_predicted(tl["measured"], tl["predicted"], plot,
                                   title=f"{report['layout']}: measured vs predicted ({costs})")
    if format is Format.json:
        echo_json(report_json(report))
    else:
        from shardwise.console import make_console

        make_console().print(report_table(report))
    chk = report["check"]
    if chk is not None and not chk["passed"]:  # after the report: the exit status says it failed
        missing = f", {len(chk['missing_grads'])} gradients missing" if chk["missing_grads"] else ""
        raise CheckFailed(
            f"--check failed: loss differs by {chk['loss_max_rel_diff']:.2e} (tol {chk['loss_rtol']:.0e}), "
            f"gradient {chk['worst_grad']} by {chk['grad_max_rel_diff']:.2e} at step {chk['worst_grad_step']} "
            f"(tol {chk['grad_rtol']:.0e}){missing} against the single-process reference"
        )
