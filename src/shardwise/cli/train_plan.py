"""`shardwise train plan` and `train sweep`: search the plan space (placeholder until it lands)."""

from __future__ import annotations

import typer

from shardwise.errors import ShardwiseError


def plan_cmd(model: str = typer.Option(..., "--model")) -> None:
    """Search every valid plan and rank them."""
    raise ShardwiseError("train plan is not available yet")
