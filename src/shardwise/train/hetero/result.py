"""HeteroEstimate: what `train estimate` reports for a plan laid over the groups of a heterogeneous
cluster: the step, the memory and work of every pipeline rank of every GPU type, and the split used."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shardwise.specs.hetero import HeteroLayout
from shardwise.train.result import FLOP_CONVENTIONS, GIB, MemoryBreakdown, TimeBreakdown


@dataclass(frozen=True)
class RankReport:
    """One pipeline rank of one GPU type (`copies` data-parallel ranks are alike)."""

    group: str
    gpu: str
    pipeline_rank: int
    copies: int
    layers: int
    microbatches: int
    busy_s: float  # compute of the step on this rank: its micro-batches' F + I + W
    memory: MemoryBreakdown
    capacity_gib: float  # usable memory of its GPU (HBM less the cluster's headroom)
    state_share: float  # share of its data-parallel group's sharded states (1 / group size when even)

    @property
    def fits(self) -> bool:
        return self.memory.total / GIB <= self.capacity_gib

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "memory"}
        return d | {"memory_gib": self.memory.gib(), "peak_memory_gib": self.memory.total / GIB, "fits": self.fits}


@dataclass(frozen=True)
class HeteroEstimate:
    name: str
    model: str
    cluster: str
    layout: HeteroLayout  # with the layer or batch split that was costed
    gpus_per_group: dict[str, int]
    step_time_s: float
    time_s: TimeBreakdown  # of the pipeline that sets the step, on its critical rank
    critical_group: str
    ranks: tuple[RankReport, ...]
    tokens_per_s: float
    model_tflops: float  # model FLOP/s of the whole job (the mfu convention: full attention), TFLOP/s
    peak_tflops: float  # sum of the GPUs' dense BF16 peaks (fp8/fp4 jobs too, as train estimate's MFU)
    bubble_fraction: float
    usd_per_hour: float | None
    model_tflops_causal: float = 0.0  # the same with causal attention (the mfu_causal convention)
    days_to_train: float | None = None
    cost_usd: float | None = None
    notes: tuple[str, ...] = ()
    #: per pipeline (one, or one per group of replicas): the simulation's inputs (``PipelineTiming.inputs``)
    pipelines: dict[str, tuple] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_group.values())

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def mfu(self) -> float:
        """Model FLOPs (full attention) over the sum of the GPUs' peaks (each GPU type at its own); the
        conventions of :data:`shardwise.train.result.FLOP_CONVENTIONS`."""
        return self.model_tflops / self.peak_tflops

    @property
    def mfu_causal(self) -> float:
        """:attr:`mfu` with causal attention."""
        return self.model_tflops_causal / self.peak_tflops

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour / 3600 / self.tokens_per_s * 1e6

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.ranks)

    @property
    def peak_memory_gib(self) -> float:
        return max(r.memory.total for r in self.ranks) / GIB

    @property
    def memory_used_fraction(self) -> float:
        """The fullest rank's memory over its own GPU's."""
        return max(r.memory.total / GIB / r.capacity_gib for r in self.ranks)

    def label(self) -> str:
        return self.layout.label()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "model": self.model, "cluster": self.cluster, "kind": self.layout.kind,
            "layout": self.layout.to_dict(), "label": self.label(), "gpus_per_group": dict(self.gpus_per_group),
            "num_gpus": self.num_gpus, "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu, "mfu_causal": self.mfu_causal,
            "flop_conventions": {k: FLOP_CONVENTIONS[k] for k in ("mfu", "mfu_causal")}, "model_tflops": self.model_tflops,
            "fits": self.fits, "peak_memory_gib": self.peak_memory_gib, "memory_used_fraction": self.memory_used_fraction,
            "critical_group": self.critical_group, "time_s": asdict(self.time_s), "bubble_fraction": self.bubble_fraction,
            "usd_per_hour": self.usd_per_hour, "usd_per_million_tokens": self.usd_per_million_tokens,
            "days_to_train": self.days_to_train, "cost_usd": self.cost_usd,
            "ranks": [r.to_dict() for r in self.ranks], "notes": list(self.notes),
        }
