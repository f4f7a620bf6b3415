"""Effective training time ratio (ETTR) and the checkpoint interval that maximises it.

A run alternates compute segments of tau seconds with checkpoints that block the step for b seconds
(period P = tau + b); a checkpoint started at the end of a segment is durable L >= b seconds later
(L = b when synchronous; asynchronous saves persist in the background). Unexpected failures are Poisson
with mean time M; after each, the job is down for D seconds on average (detection, waiting for a node,
and a restart of R seconds that itself restarts if a failure hits it) and resumes from the last durable
checkpoint.

Exact renewal result (derived; Daly 2006's model when L = b): a cycle is an up time X ~ Exp(M) plus the
downtime D, and commits n(X) = floor((X - a) / P) segments, a = L - b, so
E[n] = sum_k P(X >= a + kP) = e^(-a/M) / (e^(P/M) - 1) and by the renewal-reward theorem

    ETTR(tau) = tau e^(-a/M) / ((e^(P/M) - 1) (M + D)),    D = detect + wait + M (e^(R/M) - 1).

With L = b and no detection or wait this is Daly's T_s / T_w = tau / (M e^(R/M) (e^((tau+b)/M) - 1))
(Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22,
Eq. 13). A save cannot start before the previous one is durable, so a tau below L - b blocks the step
for L - tau instead of b. Planned interruptions (maintenance) arrive at rate lambda_p while the job runs,
save first (no lost work) and cost R_p each: ETTR / (1 + lambda_p R_p) (derived, first order in
lambda_p R_p).

Young's interval sqrt(2 b M) (Young 1974, "A first order approximation to the optimum checkpoint
interval", CACM 17(9)) and Daly's higher-order one, sqrt(2 b M) (1 + sqrt(b/2M)/3 + (b/2M)/9) - b for
b < 2M, else M (Daly 2006 Eq. 37), are reported beside the exact optimum, found numerically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# Past e^700 a float overflows; a run whose restarts or segments are that many MTTFs long never finishes.
MAX_EXPONENT = 700.0


def _expm1(x: float) -> float:
    return math.expm1(min(x, MAX_EXPONENT))


@dataclass(frozen=True)
class RunModel:
    """The inputs of the closed forms, in seconds (rates per second of run time)."""

    mttf_s: float  # mean time between unexpected interruptions (inf: none)
    block_s: float  # b: what a checkpoint blocks the step
    durable_s: float  # L: from the start of a save until it is durable (>= block_s)
    restart_s: float  # R: relaunch + rendezvous + load, restarted by a failure during it
    detect_s: float = 0.0  # from the failure until the restart begins
    wait_s: float = 0.0  # mean wait for a healthy node per unexpected interruption
    planned_rate_s: float = 0.0  # planned interruptions per second of run
    planned_cost_s: float = 0.0  # downtime of one planned interruption (a save, then a restart)

    @property
    def downtime_s(self) -> float:
        """D: mean downtime after an unexpected interruption (module docstring)."""
        m = self.mttf_s
        restart = 0.0 if math.isinf(m) else m * _expm1(self.restart_s / m)
        return self.detect_s + self.wait_s + restart


def young_interval_s(block_s: float, mttf_s: float) -> float:
    """Young 1974: tau = sqrt(2 b M)."""
    return math.sqrt(2.0 * block_s * mttf_s)


def daly_interval_s(block_s: float, mttf_s: float) -> float:
    """Daly 2006 Eq. 37: the higher-order optimum compute interval."""
    if block_s >= 2.0 * mttf_s:
        return mttf_s
    x = block_s / (2.0 * mttf_s)
    return math.sqrt(2.0 * block_s * mttf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - block_s


def effective_block_s(run: RunModel, tau_s: float) -> float:
    """The step's wait per checkpoint: b, or longer when the previous save is not yet durable."""
    return max(run.block_s, run.durable_s - tau_s)


def ettr(run: RunModel, tau_s: float) -> float:
    """Effective training time ratio at compute interval tau (module docstring: exact for Poisson failures)."""
    b = effective_block_s(run, tau_s)
    m = run.mttf_s
    if math.isinf(m):
        base = tau_s / (tau_s + b)
    else:
        a = run.durable_s - b
        if max((tau_s + b) / m, run.restart_s / m) >= MAX_EXPONENT:
            return 0.0
        base = tau_s * math.exp(-a / m) / (_expm1((tau_s + b) / m) * (m + run.downtime_s))
    return base / (1.0 + run.planned_rate_s * run.planned_cost_s)


def golden_max(f: Callable[[float], float], lo: float, hi: float, xatol: float) -> float:
    """The maximiser of a unimodal `f` on [lo, hi] to within `xatol`: golden-section search (Kiefer 1953).
    Written here rather than scipy.optimize.minimize_scalar, whose import costs 0.3 s of every CLI call."""
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - inv_phi * (b - a), a + inv_phi * (b - a)
    fc, fd = f(c), f(d)
    while b - a > xatol:
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = f(d)
    return (a + b) / 2.0


def optimal_interval_s(run: RunModel, step_s: float) -> float:
    """The compute interval, a whole number of steps, that maximises :func:`ettr` (numerically)."""
    m = run.mttf_s
    if math.isinf(m):
        return math.inf
    hi = max(4.0 * m, 4.0 * step_s, 2.0 * run.durable_s)
    best = golden_max(lambda t: ettr(run, t), step_s, hi, 1e-3 * step_s)
    k = max(1.0, math.floor(best / step_s))
    return max((k * step_s, (k + 1) * step_s), key=lambda t: ettr(run, t))


def expected_interruptions(run: RunModel, wall_s: float) -> tuple[float, float]:
    """(unexpected, planned) interruptions expected over `wall_s` of wall-clock time: one unexpected per
    renewal cycle of mean M + D, plus e^(R/M) - 1 failed restart attempts per cycle (derived)."""
    m = run.mttf_s
    planned_share = run.planned_rate_s * run.planned_cost_s
    running = wall_s / (1.0 + planned_share)
    unexpected = 0.0 if math.isinf(m) else running * (1.0 + _expm1(run.restart_s / m)) / (m + run.downtime_s)
    return unexpected, run.planned_rate_s * running
