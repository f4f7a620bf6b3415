"""Every command and command group of the CLI shows examples in its --help."""

from collections.abc import Iterator

import click
import pytest
import typer

from shardwise.cli.main import app, main


def _commands(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every (path, command) under ``cmd``; a group is anything with sub-commands (typer's own click)."""
    yield path, cmd
    if getattr(cmd, "commands", None):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, path + (name,))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "train", "train estimate", "train plan", "train export", "train run", "train sweep", "schedule",
            "schedule simulate", "schedule compare", "serve", "serve simulate", "serve plan", "serve export",
            "validate", "schema"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "shardwise")
def test_help_has_examples(path, capsys):
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out, f"shardwise {' '.join(path)} --help has no Examples"
    # each example is a shardwise command line
    after = out.split("Examples", 1)[1]
    assert "shardwise " in after
