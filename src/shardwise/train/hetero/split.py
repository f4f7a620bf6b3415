"""How a heterogeneous layout shares its work: layers over pipeline ranks, micro-batches over replicas,
ZeRO/FSDP states over the ranks of a data-parallel group. Pure functions of numbers; the costs they
balance come from :mod:`shardwise.train.hetero.estimate`.

- Layers (pipeline across GPU types): minimise the slowest rank, max_r (L_r c_r + e_r), with L_r layers
  of c_r seconds each on rank r (its GPU's per-micro-batch F+I+W of one layer) plus its fixed work e_r
  (embedding, LM head), 0 <= L_r <= cap_r (memory) and sum L_r = L: the bottleneck partition of a chain
  (Bokhari 1988, "Partitioning problems in parallel, pipelined, and distributed computing", IEEE Trans.
  Computers 37(1)); its optimum is one of the values L c_r + e_r, found by bisection on the count
  sum_r min(cap_r, floor((T - e_r) / c_r)) >= L. In a steady pipeline the slowest stage sets the pace
  (Narayanan et al. 2019, PipeDream, Sec. 3.1), which is why Holmes and HexiScale give faster GPUs more
  layers.
- Micro-batches (data parallel across GPU types): replicas of group g take m_g micro-batches of t_g
  seconds each after a fixed a_g (pipeline fill and drain); all finish together at
  T* = (M + sum_g d_g a_g / t_g) / sum_g (d_g / t_g), m_g = (T* - a_g) / t_g, so with a_g = 0 the
  micro-batches are in proportion to speed 1/t_g (derived: sum_g d_g m_g = M with equal finish times).
  Integer counts, equal inside a group: the integer solution of sum_g d_g m_g = M nearest in makespan.
- ZeRO/FSDP states (Cephalo, Guo et al. 2025, arXiv 2411.01075, Sec. 3: the state share is decided apart
  from the compute share): a rank of group g holds s_g of the sharded states S, besides U_g of its own
  (activations, replicated states, buffers), out of C_g. Every rank at the same used fraction,
  (U_g + s_g S) / C_g = lambda, with sum_g n_g s_g = 1, gives lambda = (S + sum n_g U_g) / sum n_g C_g;
  a group whose share would be negative gets none and lambda is solved again over the others
  (water-filling; derived).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from shardwise.errors import ShardwiseError


def balanced_layer_split(layers: int, per_layer_s: Sequence[float], fixed_s: Sequence[float],
                         cap: Sequence[int] | None = None) -> tuple[int, ...]:
    """Layers per rank minimising max_r (L_r c_r + e_r) under 0 <= L_r <= cap_r (module docstring).
    Ties go to the split whose ranks are most even in time (the surplus is taken from the slowest)."""
    n = len(per_layer_s)
    if min(per_layer_s) <= 0:
        raise ShardwiseError(f"per-layer times must be > 0, got {list(per_layer_s)}")
    caps = [layers] * n if cap is None else [max(0, min(int(c), layers)) for c in cap]
    if sum(caps) < layers:
        raise ShardwiseError(f"{layers} layers do not fit: the ranks hold at most {sum(caps)} (memory)")

    def count(t: float) -> int:
        return sum(min(caps[r], math.floor((t - fixed_s[r]) / per_layer_s[r] + 1e-9)) if t >= fixed_s[r] else -1
                   for r in range(n))

    values = sorted({k * per_layer_s[r] + fixed_s[r] for r in range(n) for k in range(caps[r] + 1)})
    lo, hi = 0, len(values) - 1
    while lo < hi:  # the smallest makespan value at which the ranks hold every layer
        mid = (lo + hi) // 2
        if count(values[mid]) >= layers and all(values[mid] >= f for f in fixed_s):
            hi = mid
        else:
            lo = mid + 1
    t = values[lo]
    split = [min(caps[r], math.floor((t - fixed_s[r]) / per_layer_s[r] + 1e-9)) for r in range(n)]
    while sum(split) > layers:  # drop the surplus from the slowest ranks
        r = max((r for r in range(n) if split[r] > 0), key=lambda r: (split[r] * per_layer_s[r] + fixed_s[r], r))
        split[r] -= 1
    return tuple(split)


def refine_split(split: Sequence[int], time_s: Callable[[tuple[int, ...]], float], cap: Sequence[int] | None = None,
                 candidates: int = 3, max_rounds: int = 64) -> tuple[tuple[int, ...], float]:
    """Local search on an exact `time_s` (the schedule simulation): move one layer from one rank to
    another (within `cap`) while that shortens the step; with many ranks only moves touching the
    `candidates` fullest or emptiest ranks, or between neighbours, are tried. Returns the best split
    and its time."""
    best = tuple(split)
    best_t = time_s(best)
    n = len(best)
    caps = [10**9] * n if cap is None else list(cap)
    for _ in range(max_rounds):
        moves = [(a, b) for a, b in itertools.permutations(range(n), 2) if best[a] > 0 and best[b] < caps[b]]
        if n > 2 * candidates:  # large pipelines: move between the fullest and the emptiest ranks only
            order = sorted(range(n), key=lambda r: best[r])
            low, high = set(order[:candidates]), set(order[-candidates:])
            moves = [(a, b) for a, b in moves if a in high or b in low or abs(a - b) == 1]
        improved = False
        for a, b in moves:
            trial = list(best)
            trial[a] -= 1
            trial[b] += 1
            t = time_s(tuple(trial))
            if t < best_t * (1 - 1e-12):
                best, best_t, improved = tuple(trial), t, True
                break
        if not improved:
            break
    return best, best_t


def continuous_batch_split(total: int, replicas: Sequence[int], per_mb_s: Sequence[float],
                           fixed_s: Sequence[float] = ()) -> tuple[float, list[float]]:
    """The equal-finish split (module docstring): (T*, m_g per replica of each group), real-valued."""
    fixed = list(fixed_s) or [0.0] * len(replicas)
    rate = sum(d / t for d, t in zip(replicas, per_mb_s, strict=True))
    t_star = (total + sum(d * a / t for d, a, t in zip(replicas, fixed, per_mb_s, strict=True))) / rate
    return t_star, [(t_star - a) / t for a, t in zip(fixed, per_mb_s, strict=True)]


def batch_splits(total: int, replicas: Sequence[int], per_mb_s: Sequence[float], fixed_s: Sequence[float] = (),
                 keep: int = 1) -> list[tuple[int, ...]]:
    """Integer micro-batches per replica of each group (>= 1 each, sum_g d_g m_g = total), best first by
    max_g (a_g + m_g t_g); up to `keep` of them; [] when no integer split exists. Every group but the
    last is searched within its largest replica count of the equal-finish point (where the integer
    solutions lie, spaced by the other groups' counts)."""
    g = len(replicas)
    fixed = list(fixed_s) or [0.0] * g
    _, cont = continuous_batch_split(total, replicas, per_mb_s, fixed)
    width = max(replicas) + 1
    ranges = [range(max(1, math.floor(c) - width), max(1, math.ceil(c) + width) + 1) for c in cont[:-1]]
    found = []
    for head in itertools.product(*ranges):
        rest = total - sum(d * m for d, m in zip(replicas, head, strict=False))
        if rest <= 0 or rest % replicas[-1]:
            continue
        split = (*head, rest // replicas[-1])
        found.append((max(a + m * t for a, m, t in zip(fixed, split, per_mb_s, strict=True)), split))
    found.sort()
    return [s for _, s in found[:keep]]


def state_shares(capacity: Sequence[float], own: Sequence[float], sharded: float, ranks: Sequence[int]) -> list[float]:
    """Share of the `sharded` bytes each rank of group g holds (sum_g ranks_g * s_g = 1) so that every
    rank uses the same fraction of its `capacity` with `own` bytes of its own (module docstring)."""
    g = len(capacity)
    if sharded <= 0:
        total = sum(ranks)
        return [1.0 / total] * g
    active = [True] * g
    while True:
        cap = sum(n * c for n, c, a in zip(ranks, capacity, active, strict=True) if a)
        used = sum(n * u for n, u, a in zip(ranks, own, active, strict=True) if a)
        lam = (sharded + used) / cap
        shares = [max(0.0, (lam * c - u) / sharded) if a else 0.0 for c, u, a in zip(capacity, own, active, strict=True)]
        dropped = [i for i in range(g) if active[i] and lam * capacity[i] - own[i] < 0]
        if not dropped:
            return shares
        for i in dropped:
            active[i] = False
