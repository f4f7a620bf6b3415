"""`Layout`: how one training plan lays its ranks out — the parallel degrees, the ZeRO stage and the per-layer
choices (sequence parallelism, recompute, micro-batch, CP scheme) — as one value the cost assembly reads.

Every field is a plain number (the exact estimate: one plan) or a numpy array with one element per plan
(the planner's screen), so the same rules serve both.

The rank grid (one rule for every stride): ranks are numbered with TP innermost, then CP, DP and PP
outermost, as Megatron-LM orders its groups (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp" with
ep folded below) and as picotron builds its grid in one line (``torch.arange(world).view(...)``, one axis
per dimension). A group's stride is the product of the sizes of the dimensions inside it. The same ranks are
read in three other orders that refine it:

- CP split into its all-to-all (Ulysses) ranks, innermost, and the ring across them (USP, Fang & Zhao
  2024: the head-exchange group inside the ring group);
- the expert layers re-split the tp*cp*dp ranks of a stage as etp (innermost), ep and expert-dp (MoE
  Parallel Folding, Liu et al. 2025; Megatron-Core's expert order tp-ep-dp-pp);
- the dense data-parallel group dp*cp (gradients reduce over both: Megatron-LM's dp-cp group) split as the
  ZeRO/FSDP shard group (innermost, `dp_shard` ranks) and its replicas (hybrid sharding, HSDP; Zhao et al.
  2023, PyTorch FSDP Sec. 3.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.memo import cached_hash, dataclass_getstate, quick_init

if TYPE_CHECKING:
    from shardwise.specs.training import TrainPlan

#: A degree: one plan's (an int) or one per plan (an integer array).
Deg = int | np.ndarray

#: The orders the ranks are read in, innermost first (module docstring); the last dimension of each is pp.
ORDERS: tuple[tuple[str, ...], ...] = (
    ("tp", "cp", "dp", "pp"),
    ("tp", "ulysses", "ring", "dp", "pp"),
    ("etp", "ep", "edp", "pp"),
    ("tp", "dp_cp", "pp"),
    ("tp", "shard", "replica", "pp"),
)
DIMS = tuple(dict.fromkeys(d for order in ORDERS for d in order))
#: per dimension, the dimensions inside it in its order (what its stride multiplies)
_INSIDE = {d: order[:order.index(d)] for order in reversed(ORDERS) for d in order}
#: the dimensions that are a field of the layout
_FIELDS = frozenset(("tp", "cp", "dp", "pp", "ep", "etp", "ulysses"))


@quick_init  # built once per estimate: quick_init's __init__ skips object.__setattr__ per field
@dataclass(frozen=True)
class Layout:
    """One plan's rank layout (or one per plan, each field an array). `etp` None means tp (the classic
    expert layout); `ulysses` is the ranks of cp that exchange heads by all-to-all (TrainPlan.cp_a2a: cp for
    a2a, the Ulysses size for a2a+p2p, 1 for p2p); `dp_shard` the ranks of dp*cp that shard ZeRO/FSDP states
    (None: all of them)."""

    __hash__ = cached_hash  # keys the per-rank tail cache, once per rank: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    tp: Deg = 1
    cp: Deg = 1
    ep: Deg = 1
    etp: Deg | None = None
    dp: Deg = 1
    pp: Deg = 1
    vpp: Deg = 1
    zero: Deg = 0
    sp: bool | np.ndarray = False
    recompute: str | np.ndarray = "none"
    micro_batch: Deg = 1
    cp_comm: str | np.ndarray = "p2p"
    ulysses: Deg = 1
    dp_shard: Deg | None = None

    def __post_init__(self) -> None:
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)

    @classmethod
    def of(cls, plan: TrainPlan) -> Layout:
        """The layout of a plan (dp unset counts as 1, as before the plan is checked)."""
        return cls(tp=plan.tp, cp=plan.cp, ep=plan.ep, etp=plan.expert_tp, dp=plan.dp or 1, pp=plan.pp, vpp=plan.vpp,
                   zero=plan.zero, sp=plan.sp, recompute=plan.recompute, micro_batch=plan.micro_batch,
                   cp_comm=plan.cp_comm, ulysses=plan.cp_a2a, dp_shard=plan.dp_shard)

    @property
    def shard(self) -> Deg:
        """Ranks that shard the dense ZeRO/FSDP states: `dp_shard`, at most dp*cp (all of them when unset)."""
        dense = self.dp * self.cp
        if self.dp_shard is None:
            return dense
        return np.minimum(self.dp_shard, dense) if isinstance(dense, np.ndarray) or isinstance(self.dp_shard, np.ndarray) \
            else min(self.dp_shard, dense)

    @property
    def world(self) -> Deg:
        """Ranks of the whole plan: tp*cp*dp*pp."""
        return self.tp * self.cp * self.dp * self.pp

    def group(self, dim: str) -> Deg:
        """Ranks in one group of `dim` (one of DIMS)."""
        if dim in _FIELDS:
            return getattr(self, dim)
        if dim == "ring":
            return self.cp // self.ulysses
        if dim == "dp_cp":
            return self.dp * self.cp
        if dim == "edp":
            return self.tp * self.cp * self.dp // (self.etp * self.ep)
        if dim == "shard":
            return self.shard
        if dim == "replica":
            return self.dp * self.cp // self.shard
        raise ShardwiseError(f"no rank dimension {dim!r}; one of {', '.join(DIMS)}")

    def stride(self, dim: str) -> Deg:
        """Ranks between neighbours of one `dim` group: the product of the group sizes inside it (module
        docstring: one rule for every dimension, pp included)."""
        inside = _INSIDE.get(dim)
        if inside is None:
            raise ShardwiseError(f"no rank dimension {dim!r}; one of {', '.join(DIMS)}")
        out = 1
        for inner in inside:
            out = out * self.group(inner)
        return out

    def take(self, rows: np.ndarray) -> Layout:
        """The layout of the plans at `rows` (array fields indexed; plain fields kept)."""
        return Layout(**{f.name: (v[rows] if isinstance(v := getattr(self, f.name), np.ndarray) else v) for f in fields(self)})
