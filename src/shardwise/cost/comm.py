"""Collective communication time.

t = latency_steps * alpha + factor(n) * S / (B * eta)   (alpha-beta model; Calculon's network law)
with the bus-bandwidth factors of NCCL's tests (NVIDIA/nccl-tests doc/PERFORMANCE.md): all-reduce
2(n-1)/n, reduce-scatter and all-gather (n-1)/n of the full array S, all-to-all (n-1)/n, send/recv 1.
B and eta are those of the outermost tier the group crosses (:meth:`Cluster.tier_for`). Latency steps:
a ring's n-1 (x2 for all-reduce) inside a node; across nodes NCCL's tree/hierarchical algorithms,
2*ceil(log2 n) (derived).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs.hardware import Cluster, NetworkTier

FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0 + 0.0 * n,
}


def where(cond, a, b):
    """np.where that stays in plain Python for scalar conditions (the estimate's hot path)."""
    return np.where(cond, a, b) if np.ndim(cond) else (a if cond else b)


def collective_time_s(kind, size_bytes, n, gbyte_s, latency_s, efficiency, ring):
    """Array-friendly core: every argument may be a number or a numpy array (`ring`: the group sits in
    one domain, so NCCL uses a ring; otherwise a tree)."""
    n_safe = np.maximum(n, 1)
    factor = FACTORS[kind](n_safe)
    if kind == "send_recv":
        steps = 1.0
    else:
        ring_steps = (n_safe - 1) * (2 if kind == "all_reduce" else 1)
        steps = where(ring, ring_steps, 2 * np.ceil(np.log2(n_safe)))
    t = steps * latency_s + factor * size_bytes / (gbyte_s * 1e9 * efficiency)
    return where((n > 1) & (size_bytes > 0), t, 0.0)


def collective_s(kind: str, size_bytes: float, n: int, tier: NetworkTier) -> float:
    """Time of one collective of `kind` over `n` ranks on `tier`; S = `size_bytes` (full array)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    ring = tier.size >= n and tier.size < 2**40
    return float(collective_time_s(kind, size_bytes, n, tier.gbyte_s, tier.latency_s, tier.efficiency, ring))


def group_collective_s(cluster: Cluster, kind: str, size_bytes, n, stride):
    """Collective over groups of `n` ranks spaced `stride` apart in the global rank order; arguments
    may be numpy arrays (one group per element), each group on the outermost tier it spans."""
    if np.ndim(n) == 0 and np.ndim(stride) == 0 and np.ndim(size_bytes) == 0:  # one group: plain Python
        return collective_s(kind, float(size_bytes), int(n), cluster.tier_for(int(n), int(stride))) if n > 1 else 0.0
    n_arr, stride_arr = np.asarray(n), np.asarray(stride)
    span = (n_arr - 1) * stride_arr + 1
    tiers = cluster.tiers
    inside = [span <= t.size for t in tiers[:-1]]
    pick = lambda attr: np.select(inside, [getattr(t, attr) for t in tiers[:-1]], getattr(tiers[-1], attr))
    ring = np.select(inside, [t.size < 2**40 for t in tiers[:-1]], False)
    t = collective_time_s(kind, size_bytes, n_arr, pick("gbyte_s"), pick("latency_s"), pick("efficiency"), ring)
    return float(t) if np.ndim(t) == 0 else t
