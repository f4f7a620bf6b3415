"""`shardwise train run`: execute a plan for real with torch.distributed (placeholder until it lands)."""

from __future__ import annotations

from pathlib import Path

import typer

from shardwise.errors import ShardwiseError


def run_cmd(job: Path = typer.Argument(..., help="Job file (YAML/JSON).")) -> None:
    """Run a plan for real at small scale and check numerics against a single-process reference."""
    raise ShardwiseError("train run is not available yet")
