"""What a job file says about failures, storage and checkpoints: `cluster.reliability`, `cluster.storage`
and the top-level `checkpoint:` section (every field optional; defaults with their sources in
``data/reliability.yaml``, the model in :mod:`shardwise.cost.failures` and :mod:`shardwise.cost.checkpoint`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Fleet = Literal["llama3", "rsc1", "rsc2"]
Tier = Literal["parallel_fs", "object_store", "local_nvme", "host_memory"]


class ReliabilitySpec(BaseModel):
    """`cluster.reliability`: how often the job is interrupted and how it comes back."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    failures: bool = Field(default=True, description="count interruptions (false: the failure-free days and dollars only)")
    fleet: Fleet = Field(default="llama3", description="published fleet whose failure rates are the defaults: llama3 "
                         "(Llama 3 paper Table 5, 16,384 H100, 54 days), rsc1 or rsc2 (Kokolis et al. 2025, Meta's A100 "
                         "research clusters)")
    gpu_failures_per_1k_gpu_days: float | None = Field(default=None, ge=0, le=1e6, description="measured interruptions "
                                                       "caused by GPUs (GPU, HBM, SRAM, NVLink...) per 1,000 GPU-days")
    node_failures_per_1k_node_days: float | None = Field(default=None, ge=0, le=1e6, description="measured interruptions "
                                                         "caused by hosts and software per 1,000 node-days")
    link_failures_per_1k_link_days: float | None = Field(default=None, ge=0, le=1e6, description="measured interruptions "
                                                         "caused by scale-out links and switches per 1,000 NIC-days")
    planned_per_1k_node_days: float | None = Field(default=None, ge=0, le=1e6, description="planned interruptions "
                                                   "(maintenance) per 1,000 node-days; the job saves first")
    detect_s: float | None = Field(default=None, ge=0, le=1e6, description="seconds from a failure to its detection; "
                                   "default 150 (5-minute health checks)")
    relaunch_s: float | None = Field(default=None, ge=0, le=1e6, description="seconds to reschedule, start and initialise "
                                     "the job, the rendezvous and the checkpoint load aside; default 300")
    rendezvous_s_per_rank: float | None = Field(default=None, ge=0, le=10, description="rendezvous seconds per rank; "
                                                "default 1.017e-3 (100 s at 98,304 ranks)")
    spare_nodes: Annotated[int, Field(ge=0, le=100_000)] | Literal["auto"] = Field(default="auto", description="hot spare nodes; auto: the count that "
                                               "spends the fewest GPU-hours, spares included; 0: wait for repair")
    repair_hours: float | None = Field(default=None, gt=0, le=1e5, description="hours until a failed node is back; "
                                       "default 24")


class StorageSpec(BaseModel):
    """`cluster.storage`: where checkpoints go (bandwidths override the tier's defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tier: Tier = Field(default="parallel_fs", description="parallel_fs (Lustre, GPFS, Tectonic...), object_store (S3...), "
                       "local_nvme (the node's disks, copies to peers) or host_memory (in-memory, copies to peers)")
    write_gbyte_s_per_node: float | None = Field(default=None, gt=0, le=1e5, description="write bandwidth of one node, GB/s")
    read_gbyte_s_per_node: float | None = Field(default=None, gt=0, le=1e5, description="read bandwidth of one node, GB/s")
    write_gbyte_s: float | None = Field(default=None, gt=0, le=1e7, description="aggregate write bandwidth, GB/s")
    read_gbyte_s: float | None = Field(default=None, gt=0, le=1e7, description="aggregate read bandwidth, GB/s")
    latency_s: float | None = Field(default=None, ge=0, le=1e4, description="fixed seconds per checkpoint (open, "
                                    "metadata, commit)")


class CheckpointSpec(BaseModel):
    """The `checkpoint:` section: how the job saves its state."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    mode: Literal["sync", "async"] = Field(default="sync", description="sync: the step waits for the write; async: only "
                                           "for the copy to pinned host memory, the write runs in the background")
    every_steps: int | None = Field(default=None, gt=0, le=10**9, description="steps between checkpoints; default: the "
                                    "interval that maximises the effective training time")
    replicas: int | None = Field(default=None, ge=0, le=16, description="copies on peer nodes (tiers lost with a node: "
                                 "local_nvme, host_memory); default 1 there, 0 elsewhere")
    reshard: Literal["load", "convert"] = Field(default="load", description="loading on another layout: load (PyTorch "
                                                "DCP reshards while loading) or convert (a universal-checkpoint "
                                                "conversion first, DeepSpeed)")


@dataclass(frozen=True)
class Resilience:
    """The three sections a training job may carry (each its defaults when left out)."""

    reliability: ReliabilitySpec = field(default_factory=ReliabilitySpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
