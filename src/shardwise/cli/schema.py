"""`shardwise schema train|serve`: the JSON Schema of a job file."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def schema_cmd(
    kind: str = typer.Argument(..., help="train | serve | rl"),
    output: Path = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
) -> None:
    """Print the JSON Schema of the train or serve job file, generated from the models that parse it.

    Editors validate a YAML job whose first line is `# yaml-language-server: $schema=PATH`.

    Examples:

      shardwise schema train > train.schema.json

      shardwise schema serve -o schemas/serve.schema.json
    """
    from shardwise.job_schema import job_schema

    text = json.dumps(job_schema(kind), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output}", err=True)
