"""`shardwise` entry point: registers the command groups and turns ShardwiseError into a one-line error."""

from __future__ import annotations

import inspect
import sys

import typer

from shardwise.errors import CheckFailed, ShardwiseError

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
    from shardwise.cli import schedule, schema, serve, train, validate, web

    app.add_typer(train.app, name="train")
    app.add_typer(schedule.app, name="schedule")
    app.add_typer(serve.app, name="serve")
    alias_help = "Alias of `shardwise train validate`. " + inspect.cleandoc(validate.validate.__doc__ or "")
    app.command("validate", help=alias_help)(validate.validate)
    app.command("schema")(schema.schema_cmd)
    app.command("web")(web.web_cmd)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print `error: ...` on stderr and exit with status 2 (a failed check: 1)."""
    try:
        app(args=argv, standalone_mode=False)
    except ShardwiseError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 1 if isinstance(exc, CheckFailed) else 2
    except typer.Exit as exc:  # raised by --help and explicit exits
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except Exception as exc:  # usage errors (bad option, missing argument) from typer's click core
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return int(exc.exit_code)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
