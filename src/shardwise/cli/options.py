"""The options every command group shares: one name, one meaning.

- ``--format/-f table|json``: how a command prints its result (:class:`Format`);
- ``--gpu TYPE`` (repeat or comma-separate to compare types) and ``--gpus N``: the GPU type and how many;
- ``--gpu-mix TYPE:N,TYPE:N``: GPUs of several types available together (``serve plan``).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from shardwise.errors import ShardwiseError


class Format(str, Enum):
    """What a command prints: rich tables or JSON."""

    table = "table"
    json = "json"


def format_option() -> Any:
    """``--format/-f table|json`` (default table): the default of a command's `format: Format` parameter."""
    return typer.Option(Format.table, "--format", "-f", help="table or json.")


def gpu_mix_option(gpu: list[str] | None, gpus: str | None, gpu_mix: str | None) -> tuple[str, str | None]:
    """The GPU mix `serve plan` may use, from ``--gpu TYPE[,TYPE] --gpus N`` (N of each type) or
    ``--gpu-mix TYPE:N,TYPE:N``; returns (mix text, deprecation note or None). ``--gpus TYPE:N,...``, the
    old spelling of ``--gpu-mix``, still works with a note."""
    from shardwise.serve.plan_cli import DEFAULT_GPU_MIX, DEFAULT_GPUS_PER_TYPE
    from shardwise.train.plan_inputs import split_list

    types = split_list(gpu)
    if gpus is not None and any(c.isalpha() for c in gpus):
        if types or gpu_mix:
            raise ShardwiseError(f"--gpus takes a number of GPUs, got {gpus!r}; write --gpu TYPE --gpus N or --gpu-mix TYPE:N,...")
        return gpus, f"--gpus {gpus} is the old spelling of --gpu-mix {gpus}; it will be removed"
    if gpu_mix is not None:
        if types or gpus is not None:
            raise ShardwiseError("give either --gpu-mix TYPE:N,... or --gpu TYPE --gpus N, not both")
        return gpu_mix, None
    if gpus is not None and not types:
        raise ShardwiseError(f"--gpus {gpus} needs --gpu TYPE (or use --gpu-mix TYPE:N,...)")
    if not types:
        return DEFAULT_GPU_MIX, None
    try:
        count = int(gpus) if gpus is not None else DEFAULT_GPUS_PER_TYPE
    except ValueError:
        raise ShardwiseError(f"--gpus takes a number of GPUs, got {gpus!r}") from None
    if count <= 0:
        raise ShardwiseError(f"--gpus must be positive, got {count}")
    return ",".join(f"{t}:{count}" for t in types), None
