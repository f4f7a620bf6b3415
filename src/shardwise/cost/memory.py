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


class Placement(Enum):
    REPLICATED = "replicated"
    SHARDED = "sharded"
    GATHERED_ON_USE = "sharded, gathered on use"


def zero_placements(zero: int) -> dict[str, Placement]:
    """Placement of each model state over the data-parallel group for a ZeRO stage (3 = FSDP)."""
    return {
        "weights": Placement.GATHERED_ON_USE if zero >= 3 else Placement.REPLICATED,
        "grads": Placement.SHARDED if zero >= 2 else Placement.REPLICATED,
        "optimizer": Placement.SHARDED if zero >= 1 else Placement.REPLICATED,
    }


def placed_bytes(total_bytes: float, placement: Placement, group: int) -> float:
    """Bytes per GPU of a state of `total_bytes` placed over a group of `group` GPUs (at rest)."""
    return total_bytes if placement is Placement.REPLICATED else total_bytes / group


@dataclass(frozen=True)
class ModelStateBytes:
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer

    def __add__(self, other: ModelStateBytes) -> ModelStateBytes:
        return ModelStateBytes(self.weights + other.weights, self.grads + other.grads, self.optimizer + other.optimizer)


def model_state_bytes(
    params: float,
    dp_group: int,
    zero: int,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
    optimizer_bytes: float = 12.0,
) -> ModelStateBytes:
    """Per-GPU bytes of `params` parameters (already split by TP/PP/EP) under ZeRO over `dp_group`.

    ZeRO paper example (Fig. 1, Psi = 7.5B, N_d = 64): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB for stages 0-3.
    """
    place = zero_placements(zero)
    return ModelStateBytes(
        weights=placed_bytes(params * weight_bytes, place["weights"], dp_group),
        grads=placed_bytes(params * grad_bytes, place["grads"], dp_group),
        optimizer=placed_bytes(params * optimizer_bytes, place["optimizer"], dp_group),
    )


def optimizer_bytes_per_param(precision: str) -> float:
    """Adam state per parameter: fp32 master + m + v = 12 B in mixed precision; 8 B when the working
    weights are already fp32 (no separate master copy)."""
    return 8.0 if precision == "fp32" else 12.0
