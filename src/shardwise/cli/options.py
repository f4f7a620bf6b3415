"""The options every command group shares: one name, one meaning.

- ``--format/-f table|json``: how a command prints its result (:class:`Format`);
- ``--gpu TYPE`` (repeat or comma-separate to compare types) and ``--gpus N``: the GPU type and how many;
- ``--gpu-mix TYPE:N,TYPE:N``: GPUs of several types available together (``serve plan``).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer


class Format(str, Enum):
    """What a command prints: rich tables or JSON."""

    table = "table"
    json = "json"


def format_option() -> Any:
    """``--format/-f table|json`` (default table): the default of a command's `format: Format` parameter."""
    return typer.Option(Format.table, "--format", "-f", help="table or json.")


def gpu_mix_option(gpu: list[str] | None, gpus: str | None, gpu_mix: str | None) -> tuple[str, str | None]:
    """The GPU mix `serve plan` may use (:func:`shardwise.serve.plan_cli.gpu_mix_text`, shared with the web API)."""
    from shardwise.serve.plan_cli import gpu_mix_text

    return gpu_mix_text(gpu, gpus, gpu_mix)
