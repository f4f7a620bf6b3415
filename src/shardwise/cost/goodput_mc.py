"""Monte Carlo simulation of a whole training run under failures, checkpoints and restarts.

Each simulated run draws its interruptions from the failure model and plays the run out event by event
(vectorised over runs with numpy): compute segments of tau seconds between saves that block the step for
b seconds and become durable L seconds after they start; an unexpected interruption (Poisson, mean M)
loses the work since the last durable checkpoint, then the job waits for detection, for a healthy node
when the failure took one out (a pool of hot spares, each failed node back after a fixed repair time; no
spare free: the job waits for the earliest return), and restarts (R seconds, restarted by a failure during
it); a planned interruption (rate lambda_p) saves first and loses nothing. The run ends when its work is
done. The mean over runs is the quantity :mod:`shardwise.cost.goodput` gives in closed form; the spread
(P10/P90) is the risk the closed form does not show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardwise.cost.goodput import RunModel, effective_block_s


@dataclass(frozen=True)
class Fleet:
    """What the spare pool needs: the share of unexpected interruptions that take a node out, the hot
    spares and the repair time of a node (seconds)."""

    swap_share: float = 0.0
    spares: int = 0
    repair_s: float = 0.0


@dataclass(frozen=True)
class FailureSimResult:
    wall_s: np.ndarray  # per run: wall-clock seconds to finish the work
    unexpected: np.ndarray  # per run: unexpected interruptions (failed restarts included)
    planned: np.ndarray
    waits_s: np.ndarray  # per run: seconds spent waiting for a healthy node

    def percentile_s(self, q: float) -> float:
        return float(np.percentile(self.wall_s, q))


def simulate(run: RunModel, work_s: float, tau_s: float, fleet: Fleet = Fleet(), runs: int = 2000,
             seed: int = 0, max_events: int = 10_000_000) -> FailureSimResult:
    """Simulate `runs` runs of `work_s` seconds of failure-free compute, checkpointing every `tau_s`."""
    rng = np.random.default_rng(seed)
    b = effective_block_s(run, tau_s)
    period, lag = tau_s + b, run.durable_s - b
    m, lam_p = run.mttf_s, run.planned_rate_s
    committed = np.zeros(runs)
    wall = np.zeros(runs)
    unexpected = np.zeros(runs, dtype=np.int64)
    planned = np.zeros(runs, dtype=np.int64)
    waits = np.zeros(runs)
    back = np.full((runs, fleet.spares + 1), -np.inf)  # when each node in repair returns (one slot per spare + 1)
    active = np.arange(runs)
    events = 0
    while active.size:
        events += active.size
        if events > max_events:
            raise RuntimeError("simulation exceeded its event budget: the run cannot finish at this failure rate")
        rem = work_s - committed[active]
        finish = rem + b * np.maximum(np.ceil(rem / tau_s) - 1, 0)
        x = rng.exponential(m, active.size) if math.isfinite(m) else np.full(active.size, np.inf)
        y = rng.exponential(1 / lam_p, active.size) if lam_p > 0 else np.full(active.size, np.inf)
        done = finish <= np.minimum(x, y)
        wall[active[done]] += finish[done]
        fail = ~done & (x < y)
        plan = ~done & ~fail
        # unexpected: back to the last durable checkpoint
        i = active[fail]
        kept = np.clip(np.floor((x[fail] - lag) / period), 0, None) * tau_s
        committed[i] += np.minimum(kept, rem[fail])
        wall[i] += x[fail] + run.detect_s
        unexpected[i] += 1
        if fleet.swap_share > 0 and i.size:
            _take_nodes(rng, i, wall, waits, back, fleet)
        _restart(rng, i, wall, unexpected, run.restart_s, m)
        # planned: save what is done, then restart
        j = active[plan]
        yj = y[plan]
        saves = np.floor(yj / period)
        did = saves * tau_s + np.minimum(yj - saves * period, tau_s)
        committed[j] += np.minimum(did, rem[plan])
        wall[j] += yj + run.planned_cost_s
        planned[j] += 1
        active = active[~done]
    return FailureSimResult(wall, unexpected, planned, waits)


def _take_nodes(rng: np.random.Generator, runs: np.ndarray, wall: np.ndarray, waits: np.ndarray, back: np.ndarray,
                fleet: Fleet) -> None:
    """The failed node goes to repair; when all spares are already out, the job waits for the earliest
    return (without spares, for its own node). At most `spares` nodes are out between failures, so the
    `spares + 1` slots always hold a free one for the new node."""
    swap = runs[rng.random(runs.size) < fleet.swap_share]
    if not swap.size:
        return
    now = wall[swap]
    slots = back[swap]
    out = slots > now[:, None]
    if fleet.spares == 0:
        wait = np.full(swap.size, fleet.repair_s)
    else:
        earliest = np.where(out, slots, np.inf).min(axis=1)
        wait = np.where(out.sum(axis=1) >= fleet.spares, earliest - now, 0.0)
    free = np.argmin(np.where(out, np.inf, slots), axis=1)
    slots[np.arange(swap.size), free] = now + fleet.repair_s
    back[swap] = slots
    wall[swap] += wait
    waits[swap] += wait


def _restart(rng: np.random.Generator, runs: np.ndarray, wall: np.ndarray, unexpected: np.ndarray, restart_s: float,
             mttf_s: float) -> None:
    """A restart of `restart_s` that starts over when a failure hits it."""
    pending = runs
    while pending.size:
        z = rng.exponential(mttf_s, pending.size) if math.isfinite(mttf_s) else np.full(pending.size, np.inf)
        ok = z >= restart_s
        wall[pending[ok]] += restart_s
        hit = pending[~ok]
        wall[hit] += z[~ok]
        unexpected[hit] += 1
        pending = hit
