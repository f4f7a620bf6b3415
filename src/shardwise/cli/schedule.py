"""`shardwise schedule` commands (placeholder until the schedule issue lands)."""

import typer

app = typer.Typer(help="schedule commands.", no_args_is_help=True)
