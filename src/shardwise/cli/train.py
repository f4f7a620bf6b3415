"""`shardwise train` commands."""

import typer

app = typer.Typer(help="Training: estimate, plan, run.", no_args_is_help=True)
