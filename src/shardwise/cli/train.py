"""`shardwise train` commands."""

from __future__ import annotations

from pathlib import Path

import typer

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json, make_console

app = typer.Typer(help="""Training: estimate a plan, search plans, export a plan to an engine, run a plan, validate
the model against public measurements.

Examples:

  shardwise train estimate examples/llama3.1-70b-64xh100.yaml

  shardwise train plan --model llama-3.1-8b --gpu h100 --gpus 64 --seq-len 4096 --global-batch 256
""", no_args_is_help=True)


@app.command("estimate")
def estimate_cmd(
    job: Path = typer.Argument(..., help="YAML or JSON job file (one job or a list of jobs)."),
    format: Format = format_option(),
    trace: Path = typer.Option(None, "--trace", help="Write the estimated step as a Chrome/Perfetto trace (JSON)."),
) -> None:
    """Predict per-GPU memory, step time, MFU, tokens/s (and days and dollars) for each job.

    Examples:

      shardwise train estimate examples/llama3.1-70b-64xh100.yaml

      shardwise train estimate examples/llama3.1-70b-64xh100.yaml --format json --trace step.json
    """
    from shardwise.specs.hetero import HeteroJob
    from shardwise.specs.job import load_jobs
    from shardwise.train.estimate import estimate
    from shardwise.train.hetero import hetero_estimate
    from shardwise.train.hetero_report import hetero_table
    from shardwise.train.report import estimate_json, estimate_table
    from shardwise.train.result import Estimate

    jobs = load_jobs(job)
    results = [hetero_estimate(j) if isinstance(j, HeteroJob) else estimate(j) for j in jobs]
    if trace is not None:
        from shardwise.pipeline.trace import trace_document, write_trace
        from shardwise.train.hetero_trace import hetero_events
        from shardwise.train.trace import estimate_events

        events: list[dict] = []
        for r in results:
            make = estimate_events if isinstance(r, Estimate) else hetero_events
            events += make(r, 1 + len({e["pid"] for e in events}), flow_id=1 + sum(e["ph"] == "s" for e in events))
        write_trace(trace_document(events, source="shardwise train estimate", jobs=len(results)), trace)
        typer.echo(f"trace written to {trace} (open it in ui.perfetto.dev)", err=True)
    if format is Format.json:
        echo_json(estimate_json(results))
        return

    console = make_console()
    for r in results:
        console.print(estimate_table(r) if isinstance(r, Estimate) else hetero_table(r))


def _register() -> None:
    from shardwise.cli.export import train_export_cmd
    from shardwise.cli.train_plan import plan_cmd, sweep_cmd
    from shardwise.cli.train_run import run_cmd
    from shardwise.cli.validate import validate

    app.command("export")(train_export_cmd)
    app.command("plan")(plan_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("run")(run_cmd)
    app.command("validate")(validate)


_register()
