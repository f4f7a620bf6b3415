"""A small job queue for the web API's long requests (plan searches, serving simulations, large estimates).

Jobs wait in one FIFO and run one at a time on each worker: a separate process, so a search neither holds
the server's interpreter lock nor slows the quick requests it answers meanwhile. A job reports progress,
can be cancelled, and is bounded: in time (it stops at its next progress report past the limit, and its
process is ended if it has not stopped a second later) and in memory (the worker's address space is
capped with RLIMIT_AS, so numpy raises MemoryError instead of the machine swapping). When the queue is
full a new job is refused (HTTP 503) rather than queued without end.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("done", "failed", "cancelled")


class QueueFull(Exception):
    """Too many jobs are waiting: the caller should retry later (HTTP 503)."""


class _Stop(Exception):
    """Raised inside a worker's task, at a progress report, when the job is cancelled or out of time."""


# A stopped job leaves its worker this long to stop by itself (at its next progress report) before the
# process is ended: a search that reports progress stops cleanly and its warm worker is kept.
GRACE_S = 1.0


def time_limit_message(limit_s: float) -> str:
    return (f"the request ran longer than the server's limit of {limit_s:g} s; narrow it (fewer GPU types, schedules "
            "or requests) or run the CLI")


@dataclass(frozen=True)
class Limits:
    workers: int = 1  # worker processes, each running one job at a time
    max_waiting: int = 64  # jobs waiting beyond those running
    time_limit_s: float = 120.0  # per job, from its start
    memory_limit_gib: float | None = 4.0  # address space of a worker process; None: no cap
    keep_s: float = 600.0  # how long a finished job can still be polled


@dataclass
class Job:
    id: str
    task: str
    body: Any
    params: dict[str, Any]
    created_s: float
    state: str = "queued"  # queued | running | done | failed | cancelled
    message: str = "queued"
    fraction: float = 0.0
    result: Any = None
    error: str | None = None
    status: int = 200  # HTTP status of the final answer
    started_s: float | None = None
    finished_s: float | None = None
    cancel_requested: bool = False
    finished: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def _worker_main(conn: Any, memory_limit_gib: float | None) -> None:
    """Run tasks sent over `conn` until it closes: ("progress", message, fraction) while running, then
    ("done", result) or ("error", http_status, message)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.nice(10)  # searches yield the CPU to the server's quick requests
    if memory_limit_gib:
        import resource

        cap = int(memory_limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # Warm the imports a search needs, so the first job does not pay for them.
    import shardwise.serve.planner
    import shardwise.train.planner  # noqa: F401
    from shardwise.errors import ShardwiseError
    from shardwise.web.tasks import run_task

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        if msg == "cancel":  # for a job that ended before the request to stop it arrived
            continue
        task, body, params, limit_s = msg
        deadline = time.monotonic() + limit_s
        last = [0.0]

        def progress(message: str, fraction: float) -> None:
            """Report (at most ten times a second); stop here when cancelled or out of time."""
            now = time.monotonic()
            if now > deadline:
                raise _Stop(time_limit_message(limit_s))
            if conn.poll() and conn.recv() == "cancel":
                raise _Stop("cancelled")
            if now - last[0] >= 0.1:
                last[0] = now
                conn.send(("progress", str(message), float(fraction)))

        try:
            conn.send(("done", run_task(task, body, progress, **params)))
        except _Stop as exc:
            conn.send(("error", 409 if str(exc) == "cancelled" else 422, str(exc)))
        except ShardwiseError as exc:
            conn.send(("error", 422, str(exc)))
        except MemoryError:
            conn.send(("error", 422, f"the request needs more memory than the server's limit of {memory_limit_gib:g} GiB "
                                     "per search; make it smaller or run the CLI"))
        except RecursionError:
            conn.send(("error", 422, "the request is nested too deeply"))
        except Exception as exc:  # noqa: BLE001 - a bug: one line, no traceback, and the server goes on
            conn.send(("error", 500, f"internal error in {task}: {type(exc).__name__}: {exc}"))


class _Worker:
    """One worker process and the pipe to it; started on demand, ended when a job is cancelled or late."""

    def __init__(self, memory_limit_gib: float | None):
        self.memory_limit_gib = memory_limit_gib
        self.process: Any = None
        self.conn: Any = None

    def ensure(self) -> None:
        if self.process is not None and self.process.is_alive():
            return
        self.kill()
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(theirs, self.memory_limit_gib), daemon=True,
                              name="shardwise-web-worker")
        try:
            process.start()
        finally:
            theirs.close()
        self.process, self.conn = process, ours

    def kill(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=5)
            self.process = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class JobQueue:
    """FIFO of jobs served by `limits.workers` worker processes (started with the first job or `start`)."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._jobs: dict[str, Job] = {}
        self._pending: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._workers: list[_Worker] = []

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._threads:
                return
            for k in range(self.limits.workers):
                worker = _Worker(self.limits.memory_limit_gib)
                thread = threading.Thread(target=self._serve, args=(worker,), name=f"shardwise-jobs-{k}", daemon=True)
                self._workers.append(worker)
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for job in self._jobs.values():
                if not job.terminal:
                    job.cancel_requested = True
        for _ in threads:
            self._pending.put(None)
        for t in threads:
            t.join(timeout=10)
        for w in self._workers:
            w.kill()
        self._workers = []

    # --- the API's side ------------------------------------------------------------------------------
    def submit(self, task: str, body: Any, **params: Any) -> Job:
        self.start()
        now = time.monotonic()
        with self._lock:
            self._forget_old(now)
            waiting = sum(1 for j in self._jobs.values() if j.state == "queued")
            if waiting >= self.limits.max_waiting:
                raise QueueFull(f"{waiting} searches are waiting, the most this server queues; retry in a minute")
            job = Job(secrets.token_hex(8), task, body, params, now)
            self._jobs[job.id] = job
        self._pending.put(job)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job at once; a running one is ended by its worker thread within 0.1 s."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.terminal:
                return job
            job.cancel_requested = True
            if job.state == "queued":
                self._finish(job, "cancelled", 409, "cancelled before it started")
        return job

    def snapshot(self, job: Job, with_result: bool = True) -> dict[str, Any]:
        """What polling and the event stream report: state, progress, queue position, and at the end the
        result or the error."""
        with self._lock:
            ahead = sum(1 for j in self._jobs.values() if j.state == "queued" and j.created_s < job.created_s)
            now = time.monotonic()
            out: dict[str, Any] = {
                "id": job.id, "task": job.task, "state": job.state, "message": job.message, "fraction": job.fraction,
                "position": ahead if job.state == "queued" else 0,
                "elapsed_s": ((job.finished_s or now) - job.started_s) if job.started_s else 0.0,
            }
            if job.state == "done" and with_result:
                out["result"] = job.result
            if job.state in ("failed", "cancelled"):
                out["error"], out["status"] = job.error, job.status
        return out

    def stats(self) -> dict[str, int]:
        with self._lock:
            states = [j.state for j in self._jobs.values()]
        return {"workers": self.limits.workers, "waiting": states.count("queued"), "running": states.count("running")}

    # --- internals -----------------------------------------------------------------------------------
    def _forget_old(self, now: float) -> None:
        old = [k for k, j in self._jobs.items() if j.terminal and now - (j.finished_s or now) > self.limits.keep_s]
        for k in old:
            del self._jobs[k]

    def _finish(self, job: Job, state: str, status: int, error: str | None = None, result: Any = None) -> None:
        """Record the end of a job (the caller holds the lock)."""
        job.state, job.status, job.error, job.result = state, status, error, result
        job.message = {"done": "done", "cancelled": "cancelled"}.get(state, error or state)
        job.fraction = 1.0 if state == "done" else job.fraction
        job.finished_s = time.monotonic()
        job.body = None
        job.finished.set()

    def _serve(self, worker: _Worker) -> None:
        while True:
            job = self._pending.get()
            if job is None:
                return
            with self._lock:
                if job.terminal:
                    continue
                job.state, job.message, job.started_s = "running", "starting", time.monotonic()
            try:
                worker.ensure()
                worker.conn.send((job.task, job.body, job.params, self.limits.time_limit_s))
            except Exception as exc:  # noqa: BLE001 - could not start a worker or send it the job
                worker.kill()
                with self._lock:
                    self._finish(job, "failed", 503, f"the search worker could not start ({type(exc).__name__}: {exc}); retry")
                continue
            self._watch(job, worker)

    def _watch(self, job: Job, worker: _Worker) -> None:
        """Relay the worker's messages until the job ends. A cancelled or late job is asked to stop (it
        does at its next progress report); past GRACE_S more its process is ended."""
        deadline = (job.started_s or time.monotonic()) + self.limits.time_limit_s
        stop_by, why = None, None  # when the worker must have stopped, and the answer then
        while True:
            now = time.monotonic()
            if stop_by is None and (job.cancel_requested or now > deadline):
                why = ("cancelled", 409, "cancelled") if job.cancel_requested else \
                      ("failed", 422, time_limit_message(self.limits.time_limit_s))
                stop_by = now + GRACE_S
                try:
                    worker.conn.send("cancel")
                except (OSError, ValueError):
                    stop_by = now
            if stop_by is not None and now > stop_by:
                worker.kill()
                with self._lock:
                    self._finish(job, *why)
                return
            try:
                ready = worker.conn.poll(0.05)
                msg = worker.conn.recv() if ready else None
            except (EOFError, OSError):
                ready, msg = True, None
            if not ready:
                continue
            if msg is None:  # the process died: killed by the system or crashed
                code = worker.process.exitcode if worker.process is not None else None
                worker.kill()
                with self._lock:
                    self._finish(job, "failed", 500, f"the search worker stopped (exit code {code}) while running {job.task}")
                return
            with self._lock:
                if msg[0] == "progress":
                    job.message, job.fraction = msg[1], max(0.0, min(1.0, msg[2]))
                    continue
                if msg[0] == "done":
                    self._finish(job, "done", 200, result=msg[1])
                elif why is not None:  # stopped as asked (or ended meanwhile): answer as decided
                    self._finish(job, *why)
                else:
                    self._finish(job, "cancelled" if msg[1] == 409 else "failed", msg[1], msg[2])
            return
