"""Collective communication time.

t = latency_steps * alpha + factor(n) * S / (B * eta)   (alpha-beta model; Calculon's network law)
with the bus-bandwidth factors of NCCL's tests (NVIDIA/nccl-tests doc/PERFORMANCE.md): all-reduce
2(n-1)/n, reduce-scatter and all-gather (n-1)/n of the full array S, all-to-all (n-1)/n, send/recv 1.
B and eta are those of the outermost tier the group crosses (:meth:`Cluster.tier_for`). Latency steps:
a ring's n-1 (x2 for all-reduce) inside a node; across nodes NCCL's tree/hierarchical algorithms,
2*ceil(log2 n) (derived).
"""

from __future__ import annotations

import math

from shardwise.specs.hardware import Cluster, NetworkTier

FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def collective_s(kind: str, size_bytes: float, n: int, tier: NetworkTier) -> float:
    """Time of one collective of `kind` over `n` ranks on `tier`; S = `size_bytes` (full array)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    factor = FACTORS[kind](n)
    if kind == "send_recv":
        steps = 1
    elif tier.size >= n and tier.size < 2**40:  # inside one domain: ring
        steps = (n - 1) * (2 if kind == "all_reduce" else 1)
    else:
        steps = 2 * math.ceil(math.log2(n))
    return steps * tier.latency_s + factor * size_bytes / (tier.gbyte_s * 1e9 * tier.efficiency)


def group_collective_s(cluster: Cluster, kind: str, size_bytes: float, n: int, stride: int) -> float:
    """Collective over a group of `n` ranks spaced `stride` apart in the global rank order."""
    if n <= 1:
        return 0.0
    return collective_s(kind, size_bytes, n, cluster.tier_for(n, stride))
