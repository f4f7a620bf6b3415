"""Checkpoint size, write, load and reshard times.

What a checkpoint holds: the weights and the optimizer state of every parameter (mixed-precision Adam:
16-bit weights, fp32 master weights and two moments, ZeRO Sec. 3.1; gradients are not saved), plus per rank
its RNG states and data-loader position (derived: torch's CPU generator state is 5,056 bytes, the CUDA
Philox seed and offset 16 bytes, Python's and NumPy's generators about 3.8 kB and 2.7 kB pickled, the
loader a few integers: ``EXTRA_STATE_BYTES`` rounds them up to 16 KiB).

Who writes what: replicated tensors are written once, their writes spread over the replicas holding them
(PyTorch DCP's save planner de-duplicates and balances the write plan; Megatron-Core's fully parallel save
splits replicated shards over the data-parallel ranks), so a rank writes its states divided by their
replicas, and a node the sum over its ranks.

Synchronous save: the step waits for the copy to host memory and the write. Asynchronous save (PyTorch DCP
``async_save``, Megatron's and NVRx's async checkpointing): the step waits only for the copy of the rank's
resident states to pinned host memory over its PCIe link; the write runs in the background and the
checkpoint is durable when it ends (PyTorch blog "Reducing Model Checkpointing Times by Over 10x with
PyTorch Distributed Asynchronous Checkpointing", 2024: the GPU-to-CPU copy is the visible downtime).
In-memory checkpoints (Wang et al. 2023, Gemini, SOSP): the host copy plus `replicas` copies in the
host memory of peer nodes, sent over the scale-out network.

Write time through a tier: latency + max(bytes per node / per-node bandwidth, total / aggregate bandwidth):
the nodes write in parallel until the file system's aggregate bandwidth binds (derived). Load: the unique
bytes are read the same way, then every replica of a tensor receives it from the rank that read it over
the scale-out network (Megatron-Core's fully parallel load; DCP reads on each rank what it needs).
Resharding to another layout: DCP reshards while loading (no extra pass); DeepSpeed's universal checkpoint
converts once, reading and writing the whole checkpoint (Lian et al. 2024, "Universal Checkpointing",
arXiv 2406.18820, Sec. 4: ``ds_to_universal`` consolidates the ZeRO/TP/PP fragments per parameter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ShardwiseError

EXTRA_STATE_BYTES = 16 * 2**10  # RNG states and data-loader position of one rank (module docstring)
# Host work an asynchronous save still does on the step's critical path with a cached save plan (PyTorch
# blog "6x faster async checkpointing", 2025: 0.78 s of blocking at 1,856 H200 for Llama 3 70B, most of it
# the copy): assumed small next to the copy.
ASYNC_PLAN_S = 0.1


@dataclass(frozen=True)
class StorageTier:
    """Bandwidths in bytes/s (None: not a limit) and a fixed latency per checkpoint."""

    name: str
    write_node: float | None
    read_node: float | None
    write_total: float | None
    read_total: float | None
    latency_s: float
    survives_node_loss: bool
    source: str = ""


def storage_tier(name: str, data: dict[str, Any], **override: float | None) -> StorageTier:
    """A tier of ``data/reliability.yaml`` (GB/s there), with the fields a job overrides (GB/s)."""
    if name not in data:
        raise ShardwiseError(f"cluster.storage.tier: unknown tier {name!r}; use one of {', '.join(data)}")
    t = {**data[name], **{k: v for k, v in override.items() if v is not None}}

    def rate(key: str) -> float | None:
        return None if t.get(key) is None else float(t[key]) * 1e9

    return StorageTier(name, rate("write_gbyte_s_per_node"), rate("read_gbyte_s_per_node"), rate("write_gbyte_s"),
                       rate("read_gbyte_s"), float(t["latency_s"]), bool(t["survives_node_loss"]), t.get("source", ""))


def _transfer_s(bytes_per_node: float, nodes: int, per_node: float | None, total: float | None) -> float:
    node_s = 0.0 if per_node is None else bytes_per_node / per_node
    total_s = 0.0 if total is None else bytes_per_node * nodes / total
    return max(node_s, total_s)


def write_s(bytes_per_node: float, nodes: int, tier: StorageTier) -> float:
    """Seconds to write a checkpoint through `tier` (module docstring)."""
    return tier.latency_s + _transfer_s(bytes_per_node, nodes, tier.write_node, tier.write_total)


def read_s(bytes_per_node: float, nodes: int, tier: StorageTier) -> float:
    """Seconds to read the unique bytes back through `tier`."""
    return tier.latency_s + _transfer_s(bytes_per_node, nodes, tier.read_node, tier.read_total)


def copy_s(nbytes: float, rate_bytes_s: float) -> float:
    """Seconds of a copy at a link's achieved rate (GPU<->host over PCIe, or a node's NICs)."""
    return nbytes / rate_bytes_s if rate_bytes_s > 0 else math.inf


@dataclass(frozen=True)
class CheckpointTimes:
    """One checkpoint of one plan: what the step waits (`blocking_s`), when it is durable counted from
    the start of the save (`durable_s`), and the load on restart (`load_s`)."""

    blocking_s: float
    durable_s: float
    load_s: float
    stage_s: float  # GPU -> host copy of the resident states
    persist_s: float  # host/GPU -> tier (and peers), the background part of an async save


def checkpoint_times(mode: str, tier: StorageTier, *, write_bytes_node: float, staged_bytes_gpu: float,
                     resident_bytes_node: float, gpus_per_node: int, nodes: int, host_link_bytes_s: float,
                     nic_bytes_s_node: float, replicas: int) -> CheckpointTimes:
    """Save and load times of a checkpoint (module docstring). `write_bytes_node`: the unique bytes one
    node writes; `staged_bytes_gpu`: a GPU's states copied to host memory for the save;
    `resident_bytes_node`: what a node's GPUs hold again after a restart (replicas included); `replicas`:
    copies sent to the host memory or disks of peer nodes (tiers that do not survive a node's loss)."""
    stage = copy_s(staged_bytes_gpu, host_link_bytes_s)
    to_gpu = copy_s(resident_bytes_node / gpus_per_node, host_link_bytes_s)
    peers = copy_s(write_bytes_node * replicas, nic_bytes_s_node) if replicas else 0.0
    if tier.name == "host_memory":
        persist = tier.latency_s + peers
        # survivors reload from their own host memory; the replacement node from a peer over the network
        load = tier.latency_s + copy_s(resident_bytes_node, nic_bytes_s_node) + to_gpu
    else:
        persist = write_s(write_bytes_node, nodes, tier) + peers
        gather = copy_s(max(0.0, resident_bytes_node - write_bytes_node), nic_bytes_s_node)  # replicas from their readers
        load = read_s(write_bytes_node, nodes, tier) + gather + to_gpu
    if mode == "sync":
        return CheckpointTimes(stage + persist, stage + persist, load, stage, persist)
    blocking = stage + ASYNC_PLAN_S
    return CheckpointTimes(blocking, blocking + persist, load, stage, persist)


def reshard_s(total_bytes: float, nodes: int, tier: StorageTier, how: str) -> float:
    """Extra seconds to load into a different layout: none where the format reshards at load (DCP), a
    read and a write of the whole checkpoint for a universal-checkpoint conversion (module docstring)."""
    if how == "load":
        return 0.0
    per_node = total_bytes / max(nodes, 1)
    return read_s(per_node, nodes, tier) + write_s(per_node, nodes, tier)
