"""Per-rank wall-clock recording of compute actions (F/I/W/B) and visible communication (no torch).

Times are ``time.perf_counter()`` seconds; on Linux that is ``CLOCK_MONOTONIC``, one clock for every
process of the host, so ranks launched on one machine share a time axis. On GPUs the caller passes a
``sync`` (``torch.cuda.synchronize``) so that an action's end is the end of its kernels.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator


class Recorder:
    """Collects ``(kind, stage, microbatch, start_s, end_s)`` actions and ``(name, start_s, end_s)`` comms."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self.sync = sync
        self.enabled = True
        self.actions: list[tuple[str, int, int, float, float]] = []
        self.comms: list[tuple[str, float, float]] = []

    def _now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    @contextmanager
    def action(self, kind: str, stage: int, microbatch: int) -> Iterator[None]:
        """Time one compute action (kind F, I, W or B of ``stage`` on ``microbatch``)."""
        if not self.enabled:
            yield
            return
        t0 = self._now()
        yield
        self.actions.append((kind, stage, microbatch, t0, self._now()))

    def extend_last(self, kind: str, stage: int, microbatch: int) -> None:
        """Stretch the latest matching action to now (e.g. the loss computed right after a last-stage F)."""
        if not self.enabled:
            return
        for i in range(len(self.actions) - 1, -1, -1):
            k, s, m, t0, _ = self.actions[i]
            if (k, s, m) == (kind, stage, microbatch):
                self.actions[i] = (k, s, m, t0, self._now())
                return

    @contextmanager
    def comm(self, name: str) -> Iterator[None]:
        """Time a blocking communication the rank waits on (P2P wait, DP all-reduce, gradient reduce)."""
        if not self.enabled:
            yield
            return
        t0 = self._now()
        yield
        self.comms.append((name, t0, self._now()))

    def take(self) -> dict:
        """Return and clear what was recorded since the last call."""
        out = {"actions": self.actions, "comms": self.comms}
        self.actions, self.comms = [], []
        return out
