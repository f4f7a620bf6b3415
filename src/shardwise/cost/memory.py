"""Memory per GPU by placement: each training state is placed over each parallel group as replicated,
sharded, or sharded-and-gathered-on-use; bytes per GPU follow from placement alone.

Model states for mixed-precision Adam (Rajbhandari et al. 2020, ZeRO Sec. 3.1 and Fig. 1): weights
2 B, gradients 2 B (4 B when accumulated in fp32, Megatron-LM's main_grad: 18 B/param in total), and
K = 12 B of optimizer state (fp32 master weights, momentum, variance). ZeRO-1 shards the optimizer
state over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3 (= FSDP) also the weights, which
are gathered layer by layer on use. TP and EP shard the weights they split; PP places whole stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from shardwise.cost.numeric import Num, where
from shardwise.memo import quick_init


class Placement(Enum):
    REPLICATED = "replicated"
    SHARDED = "sharded"
    GATHERED_ON_USE = "sharded, gathered on use"


# The ZeRO stage from which each state is sharded over the data-parallel group, and how.
SHARDED_FROM = {"weights": (3, Placement.GATHERED_ON_USE), "grads": (2, Placement.SHARDED), "optimizer": (1, Placement.SHARDED)}

_FROM_W, _FROM_G, _FROM_O = (SHARDED_FROM[s][0] for s in ("weights", "grads", "optimizer"))


def zero_placements(zero: int) -> dict[str, Placement]:
    """Placement of each model state over the data-parallel group for a ZeRO stage (3 = FSDP)."""
    return {state: how if zero >= stage else Placement.REPLICATED for state, (stage, how) in SHARDED_FROM.items()}


@quick_init
@dataclass(frozen=True)
class ModelStateBytes:  # bytes per GPU of each model state (arrays: one plan per element)
    weights: Num
    grads: Num
    optimizer: Num

    @property
    def total(self) -> Num:
        return self.weights + self.grads + self.optimizer

    def __add__(self, other: ModelStateBytes) -> ModelStateBytes:
        return ModelStateBytes(self.weights + other.weights, self.grads + other.grads, self.optimizer + other.optimizer)


def model_state_bytes(
    params: Num,
    dp_group: Num,
    zero: int | np.ndarray,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
    optimizer_bytes: float = 12.0,
) -> ModelStateBytes:
    """Per-GPU bytes of `params` parameters (already split by TP/PP/EP) under ZeRO over `dp_group`.

    ZeRO paper example (Fig. 1, Psi = 7.5B, N_d = 64): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB for stages 0-3.
    `params`, `dp_group` and `zero` may be numpy arrays (one plan per element).
    """

    if not isinstance(zero, np.ndarray):  # one plan (the exact estimate): the same arithmetic in plain Python
        return ModelStateBytes(params * weight_bytes / (dp_group if zero >= _FROM_W else 1),
                               params * grad_bytes / (dp_group if zero >= _FROM_G else 1),
                               params * optimizer_bytes / (dp_group if zero >= _FROM_O else 1))

    def per_gpu(state: str, nbytes: float) -> Num:
        stage, _ = SHARDED_FROM[state]
        return params * nbytes / where(zero >= stage, dp_group, 1)

    return ModelStateBytes(per_gpu("weights", weight_bytes), per_gpu("grads", grad_bytes), per_gpu("optimizer", optimizer_bytes))


def optimizer_bytes_per_param(precision: str) -> float:
    """Adam state per parameter: fp32 master + m + v = 12 B in mixed precision; 8 B when the working
    weights are already fp32 (no separate master copy)."""
    return 8.0 if precision == "fp32" else 12.0
