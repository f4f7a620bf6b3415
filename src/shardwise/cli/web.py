"""`shardwise web`: serve the web planner (API and page) with uvicorn."""

from __future__ import annotations

import typer

from shardwise.errors import ShardwiseError


def web_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    workers: int = typer.Option(1, "--search-workers", help="Processes running searches side by side (each one at a time)."),
    time_limit_s: float = typer.Option(120.0, "--time-limit", help="Longest a search may run (s)."),
    memory_limit_gib: float = typer.Option(4.0, "--memory-limit", help="Address space of a search process (GiB; 0: no cap)."),
    max_waiting: int = typer.Option(64, "--max-waiting", help="Searches that may wait; more are refused with 503."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="Log each request."),
) -> None:
    """Serve the planner's page and HTTP API (OpenAPI docs at /docs).

    Examples:

      shardwise web

      shardwise web --host 0.0.0.0 --port 8080 --search-workers 2 --time-limit 300
    """
    try:
        import uvicorn

        from shardwise.web.app import WebSettings, create_app
        from shardwise.web.jobs import Limits
    except ImportError as exc:
        raise ShardwiseError(f"the web planner needs the web extra ({exc.name} is missing): pip install 'shardwise[web]'") from None
    if workers < 1 or time_limit_s <= 0 or max_waiting < 0 or memory_limit_gib < 0:
        raise ShardwiseError("--search-workers must be >= 1, --time-limit > 0, --max-waiting >= 0, --memory-limit >= 0")
    limits = Limits(workers=workers, max_waiting=max_waiting, time_limit_s=time_limit_s,
                    memory_limit_gib=memory_limit_gib or None)
    app = create_app(WebSettings(limits=limits))
    typer.echo(f"Shardwise web planner on http://{host}:{port}/  (API docs: http://{host}:{port}/docs)")
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")
