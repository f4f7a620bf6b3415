"""One CLI vocabulary: an option means the same thing in every command group."""

from collections.abc import Iterator

import click
import pytest
import typer
from typer.core import TyperGroup, TyperOption

from shardwise.cli.main import app
from shardwise.cli.options import Format, gpu_mix_option
from shardwise.errors import ShardwiseError

# Options named --format that choose what to write rather than how to print a result.
EXPORT_FORMATS = {("train", "export"), ("serve", "export"), ("schedule", "export")}


def _commands(group: TyperGroup, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, cmd in group.commands.items():
        if isinstance(cmd, TyperGroup):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _option(cmd: click.Command, name: str) -> TyperOption | None:
    return next((p for p in cmd.params if isinstance(p, TyperOption) and name in p.opts), None)


def test_format_is_one_option_everywhere():
    printing = [path for path, cmd in COMMANDS.items() if _option(cmd, "--format") and path not in EXPORT_FORMATS]
    assert len(printing) >= 9
    for path in printing:
        opt = _option(COMMANDS[path], "--format")
        assert opt.opts == ["--format", "-f"], path
        assert opt.default is Format.table, path  # the one output-format enum


def test_gpu_options_mean_the_same_in_train_and_serve_plan():
    for path in (("train", "plan"), ("serve", "plan")):
        gpu = _option(COMMANDS[path], "--gpu")
        assert gpu.multiple, path  # --gpu TYPE, repeated or comma-separated
        assert _option(COMMANDS[path], "--gpus") is not None, path
    assert _option(COMMANDS[("serve", "plan")], "--gpu-mix") is not None


def test_validate_is_symmetric_and_the_old_name_is_an_alias():
    assert ("train", "validate") in COMMANDS and ("serve", "validate") in COMMANDS
    alias, train = COMMANDS[("validate",)], COMMANDS[("train", "validate")]
    assert [p.opts for p in alias.params] == [p.opts for p in train.params]
    assert "train validate" in alias.help
    for path in (("train", "validate"), ("serve", "validate")):
        assert _option(COMMANDS[path], "--format").default is Format.table


@pytest.mark.parametrize("gpu, gpus, mix, expected", [
    (None, None, None, ("h100:8,a100-80gb:8", None)),
    (["h100"], "32", None, ("h100:32", None)),
    (["h100,a100-80gb", "l4"], "4", None, ("h100:4,a100-80gb:4,l4:4", None)),
    (["h100"], None, None, ("h100:8", None)),
    (None, None, "h100:8,l4:16", ("h100:8,l4:16", None)),
    (None, "h100:2", None, ("h100:2", "--gpus h100:2 is the old spelling of --gpu-mix h100:2; it will be removed")),
])
def test_gpu_mix_from_options(gpu, gpus, mix, expected):
    assert gpu_mix_option(gpu, gpus, mix) == expected


@pytest.mark.parametrize("gpu, gpus, mix, message", [
    (None, "8", None, "--gpus 8 needs --gpu TYPE"),
    (["h100"], "0", None, "--gpus must be positive"),
    (["h100"], "x8", None, "--gpus takes a number of GPUs"),
    (["h100"], "-3", None, "--gpus must be positive"),
    (["h100"], None, "h100:8", "not both"),
])
def test_gpu_option_errors(gpu, gpus, mix, message):
    with pytest.raises(ShardwiseError, match=message):
        gpu_mix_option(gpu, gpus, mix)
