"""What every command prints through: one rich console (full terminal width, or 160 columns when output
is piped), one JSON writer that only ever writes strict JSON, and one progress bar for long runs."""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr), 160 columns wide when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr) if stream.isatty() else Console(stderr=stderr, width=160)


def finite(node: Any) -> Any:
    """`node` with numpy scalars as Python numbers and every NaN/±inf as None (null): RFC 8259 has no
    NaN or Infinity, and `json.dumps` would otherwise write them."""
    if isinstance(node, dict):
        return {str(k): finite(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [finite(v) for v in node]
    if hasattr(node, "item") and callable(node.item) and getattr(node, "ndim", 1) == 0:  # numpy scalar
        node = node.item()
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return node


def json_text(payload: Any, indent: int = 2) -> str:
    """Strict JSON (no NaN/Infinity literals: non-finite numbers become null)."""
    return json.dumps(finite(payload), indent=indent, allow_nan=False, default=float)


def echo_json(payload: Any, indent: int = 2) -> None:
    print(json_text(payload, indent))


@contextmanager
def watch(label: str, read: Callable[[], float], total: float | None = None, enabled: bool | None = None) -> Iterator[None]:
    """Show a progress bar on stderr while the block runs: a daemon thread polls `read()` (it only reads
    what the computation writes, so the work itself is untouched). Shown on a terminal only (or when
    `enabled`); Ctrl-C in the block stops the bar and propagates, and the CLI ends with one line."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn()] if total else [TextColumn(label), TextColumn("{task.completed:,.0f}")]
    bar = Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True, auto_refresh=False)
    task = bar.add_task(label, total=total)
    stop = threading.Event()

    def poll() -> None:  # twice a second: the computation keeps the interpreter nearly all the time
        while not stop.wait(0.5):
            bar.update(task, completed=read())
            bar.refresh()

    thread = threading.Thread(target=poll, daemon=True)
    with bar:
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
