"""`shardwise train` commands."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from shardwise.console import echo_json, make_console

app = typer.Typer(help="Training: estimate a plan, search plans, run a plan.", no_args_is_help=True)


class Format(str, Enum):
    table = "table"
    json = "json"


@app.command("estimate")
def estimate_cmd(
    job: Path = typer.Argument(..., help="YAML or JSON job file (one job or a list of jobs)."),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table or json."),
) -> None:
    """Predict per-GPU memory, step time, MFU, tokens/s (and days and dollars) for each job."""
    from shardwise.specs.job import load_jobs
    from shardwise.train.estimate import estimate

    from shardwise.train.report import estimate_json, estimate_table

    results = [estimate(j) for j in load_jobs(job)]
    if format is Format.json:
        echo_json(estimate_json(results))
        return

    console = make_console()
    for r in results:
        console.print(estimate_table(r))


def _register() -> None:
    from shardwise.cli.train_plan import plan_cmd, sweep_cmd
    from shardwise.cli.export import train_export_cmd
    from shardwise.cli.train_run import run_cmd

    app.command("export")(train_export_cmd)
    app.command("plan")(plan_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("run")(run_cmd)


_register()
