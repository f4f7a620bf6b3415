"""`shardwise` entry point: registers the command groups and turns ShardwiseError into a one-line error."""

from __future__ import annotations

import inspect
import sys
from functools import lru_cache

import typer

from shardwise.errors import CheckFailed, ShardwiseError, clip

MAX_MESSAGE_CHARS = 500  # an error is one line; anything longer is cut

app = typer.Typer(  # its help is the callback's docstring (a help= here would hide the examples)
    name="shardwise",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from shardwise import __version__

        typer.echo(f"shardwise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Plan, simulate and verify how to parallelise LLM training and serving.

    Examples:

      shardwise train estimate examples/llama3.1-70b-64xh100.yaml

      shardwise train plan --model llama-3.1-70b --gpu h100 --gpus 512 --seq-len 8192 --global-batch 512 --export megatron

      shardwise serve simulate examples/serve-llama3.1-8b-a100.yaml
    """


def _register() -> None:
    from shardwise.cli import rl, schedule, schema, serve, train, validate, web

    app.add_typer(train.app, name="train")
    app.add_typer(schedule.app, name="schedule")
    app.add_typer(serve.app, name="serve")
    app.add_typer(rl.app, name="rl")
    alias_help = "Alias of `shardwise train validate`. " + inspect.cleandoc(validate.validate.__doc__ or "")
    app.command("validate", help=alias_help)(validate.validate)
    app.command("schema")(schema.schema_cmd)
    app.command("web")(web.web_cmd)


_register()


@lru_cache(maxsize=1)
def _command():
    """The click command tree typer builds from the signatures (built once: it takes ~80 ms)."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one line `error: ...` on stderr and exit with status 2 (a failed
    check: 1; Ctrl-C: 130)."""
    try:
        status = _command().main(args=argv, prog_name="shardwise", standalone_mode=False)
        if status == 130:  # typer turns Ctrl-C into Exit(130), which non-standalone mode returns
            return _interrupted()
        if isinstance(status, int) and status:  # a command's typer.Exit(n), which non-standalone mode returns
            return status
    except ShardwiseError as exc:
        typer.echo(f"error: {clip(exc, MAX_MESSAGE_CHARS)}", err=True)
        return 1 if isinstance(exc, CheckFailed) else 2
    except typer.Exit as exc:  # --help and explicit exits; typer turns Ctrl-C into Exit(130)
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted()
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):  # older typer/click: Ctrl-C is Abort
        return _interrupted()
    except Exception as exc:  # usage errors (bad option value, missing argument) from typer's click core
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            typer.echo(f"error: {clip(exc.format_message(), MAX_MESSAGE_CHARS)} (see --help)", err=True)
            return int(exc.exit_code)
        raise
    return 0


def _interrupted() -> int:
    typer.echo("error: interrupted (Ctrl-C); stopped before finishing", err=True)
    return 130


if __name__ == "__main__":
    sys.exit(main())
