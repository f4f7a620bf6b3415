"""Start N worker processes on this host, watch them, and collect their results (needs torch).

Processes are started with ``multiprocessing``'s ``forkserver`` method on Linux (a server process that
has imported torch once forks each worker, so a run does not pay torch's import per process) and
``spawn`` elsewhere; rendezvous is ``env://`` on a free localhost port. If a worker fails, the others
are stopped and the first failure's message is raised as :class:`ShardwiseError`; a run that exceeds
``timeout_s`` is stopped the same way, so a broken layout never hangs.

As with any spawn-style launcher, a script that calls this must guard its entry point with
``if __name__ == "__main__":`` (workers import the main module); the ``shardwise`` CLI does.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import sys
import tempfile
import time
from pathlib import Path

from shardwise.errors import ShardwiseError
from shardwise.execute.config import RunConfig


def free_port() -> int:
    """A TCP port that was free on localhost a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _context():
    if sys.platform.startswith("linux"):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "shardwise.execute.worker", "shardwise.execute.runners"])
        return ctx
    return mp.get_context("spawn")


def _error_summary(text: str) -> str:
    """The last meaningful line of a worker's traceback (the exception), made one line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "no error text"
    tail = lines[-1]
    where = next((ln for ln in reversed(lines) if ln.startswith('File "')), "")
    return f"{tail} ({where})" if where and len(lines) > 1 else tail


def _errors(workdir: Path, n: int) -> list[tuple[int, str]]:
    """(rank, error text) of the ranks that wrote one, earliest failure first (the root cause; peers
    then fail with 'connection closed')."""
    found = []
    for r in range(n):
        f = workdir / f"rank{r}.err"
        if f.exists():
            when, _, text = f.read_text().partition("\n")
            try:
                t = float(when)
            except ValueError:
                t, text = float("inf"), f.read_text()
            found.append((t, r, text))
    return [(r, text) for _, r, text in sorted(found)]


def _stop(procs: list) -> None:
    procs = [p for p in procs if p.pid is not None]  # started ones
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=2)


def launch(cfg: RunConfig, workdir: Path | None = None, files: dict[str, str] | None = None) -> list[dict]:
    """Run ``cfg.world_size`` workers; return each rank's result mapping, in rank order.

    ``files`` are written into the work directory first (e.g. the schedule CSV the workers load).
    """
    import torch

    from shardwise.execute.worker import run_worker

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="shardwise-run-")
        workdir = Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (workdir / name).write_text(text)
    n = cfg.world_size
    ctx = _context()
    port = free_port()
    procs = [ctx.Process(target=run_worker, args=(r, cfg, port, str(workdir)), daemon=True) for r in range(n)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + cfg.timeout_s
        while True:
            codes = [p.exitcode for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                time.sleep(0.5)  # let a peer that failed at the same moment write its error
                _stop(procs)
                texts = _errors(workdir, n)
                if texts:
                    r, text = texts[0]
                    more = f" ({len(texts) - 1} other rank(s) failed after it)" if len(texts) > 1 else ""
                    raise ShardwiseError(f"rank {r} of {n} failed: {_error_summary(text)}{more}")
                raise ShardwiseError(f"rank {failed[0]} of {n} died with exit code {codes[failed[0]]} and no "
                                     "error text (killed for memory?)")
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                alive = [r for r, p in enumerate(procs) if p.is_alive()]
                _stop(procs)
                raise ShardwiseError(f"the run did not finish within {cfg.timeout_s:.0f} s (ranks {alive} still "
                                     "running); raise --timeout for bigger runs, or look for a hang in the layout")
            time.sleep(0.05)
        return [torch.load(workdir / f"rank{r}.pt", weights_only=False) for r in range(n)]
    finally:
        _stop(procs)
        if tmp is not None:
            tmp.cleanup()
