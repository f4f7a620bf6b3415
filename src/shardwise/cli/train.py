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

    results = [estimate(j) for j in load_jobs(job)]
    if format is Format.json:
        payload = [r.to_dict() for r in results]
        echo_json(payload[0] if len(payload) == 1 else payload)
        return
    from shardwise.train.report import estimate_table

    console = make_console()
    for r in results:
        console.print(estimate_table(r))


def _register() -> None:
    from shardwise.cli.train_plan import plan_cmd, sweep_cmd
    from shardwise.cli.train_run import run_cmd

    app.command("plan")(plan_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("run")(run_cmd)


_register()
