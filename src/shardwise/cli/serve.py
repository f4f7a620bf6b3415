"""`shardwise serve` commands (placeholder until the serve issue lands)."""

import typer

app = typer.Typer(help="serve commands.", no_args_is_help=True)
