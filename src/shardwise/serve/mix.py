"""GPU-type mix by request class: Mélange's cost-aware bin packing as an integer program.

Griggs et al. 2024 (Mélange) Sec. 5: GPUs are bins with a capacity and a cost, items are request
slices (a length class and a rate); each slice goes to one GPU type, and the load a slice puts on an
instance of type g is its rate over the rate one such instance sustains for that class under the SLO
(its profiled capacity). Minimise sum_g cost_g * y_g subject to
    sum_g z[s, g] = 1                                      every slice placed once
    sum_s rate_s / cap[class(s), g] * z[s, g] <= y_g       instances cover the load
    y_g <= available_g,  z binary,  y integer
solved with scipy.optimize.milp (HiGHS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp


@dataclass(frozen=True)
class Allocation:
    """Instances per GPU type and the share of each class each type takes."""

    instances: dict[str, int]
    shares: dict[str, list[float]]  # per GPU type, fraction of each class's rate
    cost: float
    feasible: bool


def allocate(rates: list[float], capacity: dict[str, list[float]], cost: dict[str, float], available: dict[str, int], slices: int = 4) -> Allocation:
    """Cheapest instance counts per type for classes with `rates` (req/s); `capacity[g][b]` is the
    rate one instance of type g sustains on class b (0 = cannot meet the SLO); `available[g]` caps y_g."""
    types = list(capacity)
    nb, ng = len(rates), len(types)
    items = [(b, rates[b] / slices) for b in range(nb) for _ in range(slices) if rates[b] > 0]
    ns = len(items)
    nz = ns * ng
    # variables: z[s, g] (row-major), then y[g]; a tiny second objective breaks ties between equal-cost
    # packings by sending each slice where it costs least per unit of load (fractional cost)
    frac = np.zeros(nz)
    for s_, (b, rate) in enumerate(items):
        for j, g in enumerate(types):
            if capacity[g][b] > 0:
                frac[s_ * ng + j] = cost[g] * rate / capacity[g][b]
    c = np.concatenate([1e-3 * frac / max(frac.max(), 1e-12) * min(cost.values()), [cost[g] for g in types]])
    upper_z = np.ones(nz)
    rows, lows, highs = [], [], []
    for s in range(ns):
        row = np.zeros(nz + ng)
        row[s * ng:(s + 1) * ng] = 1.0
        rows.append(row)
        lows.append(1.0)
        highs.append(1.0)
    for j, g in enumerate(types):
        row = np.zeros(nz + ng)
        for s, (b, rate) in enumerate(items):
            cap = capacity[g][b]
            if cap > 0:
                row[s * ng + j] = rate / cap
            else:
                upper_z[s * ng + j] = 0.0
        row[nz + j] = -1.0
        rows.append(row)
        lows.append(-np.inf)
        highs.append(0.0)
    bounds = Bounds(np.zeros(nz + ng), np.concatenate([upper_z, [float(available[g]) for g in types]]))
    res = milp(c, constraints=LinearConstraint(np.array(rows), lows, highs), integrality=np.ones(nz + ng), bounds=bounds)
    if not res.success or res.x is None:
        return Allocation({}, {}, float("inf"), False)
    x = np.rint(res.x)
    y = {g: int(x[nz + j]) for j, g in enumerate(types)}
    shares = {g: [0.0] * nb for g in types}
    for s, (b, rate) in enumerate(items):
        for j, g in enumerate(types):
            if x[s * ng + j] > 0.5:
                shares[g][b] += rate / rates[b]
    used = {g: n for g, n in y.items() if n > 0}
    return Allocation(used, {g: shares[g] for g in used}, float(sum(cost[g] * n for g, n in used.items())), True)
