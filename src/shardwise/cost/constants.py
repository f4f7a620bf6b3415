"""The cost model's named constants: few, physically meaningful, in one place.

Defaults below are starting values with their rationale. ``scripts/fit_constants.py`` fits the ones
marked *fitted* on the fit split of ``shared/calibration/training-measurements.json`` and writes
``data/fitted_constants.json``; when that file exists its values replace the defaults. Nothing here is
tuned to a single record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from shardwise.specs._loading import data_path

GIB = 2**30


@dataclass(frozen=True)
class ComputeConstants:
    """Roofline efficiencies. A GEMM of F FLOPs takes F/(peak*gemm_efficiency) + gemm_overhead_s,
    i.e. efficiency F/(F + F_half) of the asymptote, the launch/wave-tail curve (derived)."""

    gemm_efficiency: float = 0.70  # fitted per GPU family: achieved/peak for large bf16 GEMMs
    gemm_overhead_s: float = 20e-6  # fitted: fixed time per GEMM (launch + wave-quantisation tail)
    kernel_overhead_s: float = 5e-6  # per-kernel launch cost, a few microseconds (CUDA C Best Practices Guide)
    attention_efficiency: float = 0.50  # FlashAttention-2 forward+backward, ~50% of A100 peak (Dao 2023, Fig. 4-5)
    memory_efficiency: float = 0.85  # achieved/peak HBM bandwidth of streaming kernels (STREAM-like copy)


@dataclass(frozen=True)
class NetworkConstants:
    """Collective efficiencies (bus bandwidth / link bandwidth, NCCL tests' busbw) and latencies."""

    intra_node_efficiency: float = 0.78  # NVLink ring busbw ~ 230/300 GB/s on A100 (nccl-tests PERFORMANCE.md law)
    inter_node_efficiency: float = 0.85  # InfiniBand/RoCE ring busbw ~ 0.85 of line rate
    intra_node_latency_s: float = 5e-6  # per ring step
    inter_node_latency_s: float = 10e-6  # per ring step


@dataclass(frozen=True)
class OverlapConstants:
    """How much communication hides under compute (0 = none, 1 = all that fits in the window)."""

    tp_backward_overlap: float = 0.5  # fitted: Megatron overlaps input-grad all-reduce with weight-grad GEMMs
    dp_overlap: float = 0.8  # fitted: gradient reduce overlapped with the last backward (overlap_grad_reduce)
    zero3_prefetch_overlap: float = 0.8  # fitted: parameter all-gathers prefetched under layer compute


@dataclass(frozen=True)
class MemoryConstants:
    """Runtime memory outside the model states and activations (named assumptions)."""

    cuda_context_gib: float = 0.75  # CUDA context + cuBLAS/cuDNN workspaces (PyTorch CUDA semantics notes)
    comm_buffers_gib: float = 0.5  # NCCL channel buffers per process (NCCL_BUFFSIZE 4 MiB x channels x peers)
    fragmentation: float = 0.05  # caching-allocator fragmentation, fraction of dynamic (activation) memory
    dp_bucket_mib: float = 40.0  # gradient-reduce bucket (Megatron/DDP default 40 MB class)


@dataclass(frozen=True)
class StepConstants:
    """Per-step costs outside the layer loop."""

    optimizer_bytes_per_param: float = 34.0  # Adam: read w32,m,v,g32 + grad-norm read, write w32,m,v,w16 (derived)
    step_overhead_s: float = 0.02  # fitted: data loading, loss scaling, logging, launch gaps per step


@dataclass(frozen=True)
class Constants:
    compute: ComputeConstants = field(default_factory=ComputeConstants)
    network: NetworkConstants = field(default_factory=NetworkConstants)
    overlap: OverlapConstants = field(default_factory=OverlapConstants)
    memory: MemoryConstants = field(default_factory=MemoryConstants)
    step: StepConstants = field(default_factory=StepConstants)
    # Per GPU-family overrides of ComputeConstants fields, e.g. {"H100-SXM": {"gemm_efficiency": 0.62}}.
    per_gpu: dict[str, dict[str, float]] = field(default_factory=dict)
    # GPU families: GPUs without their own measurements use their family's fitted values.
    families: dict[str, str] = field(default_factory=dict)

    def compute_for(self, gpu_name: str) -> ComputeConstants:
        key = gpu_name if gpu_name in self.per_gpu else self.families.get(gpu_name)
        over = self.per_gpu.get(key or "", {})
        return replace(self.compute, **over) if over else self.compute

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value if isinstance(value, dict) else {g.name: getattr(value, g.name) for g in fields(value)}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Constants:
        base = cls()
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            current = getattr(base, f.name)
            kwargs[f.name] = dict(data[f.name]) if isinstance(current, dict) else replace(current, **data[f.name])
        return replace(base, **kwargs)


# Hopper parts share GH100 silicon; Ampere parts GA100/GA10x; the rest map to their closest measured family.
DEFAULT_FAMILIES = {
    "A100-40GB": "A100-80GB",
    "A10G": "A100-80GB",
    "RTX-4090": "A100-80GB",
    "L40S": "A100-80GB",
    "L4": "A100-80GB",
    "H100-PCIe": "H100-SXM",
    "H200": "H100-SXM",
    "H800": "H100-SXM",
    "H20": "H100-SXM",
    "B200": "H100-SXM",
    "MI300X": "H100-SXM",
}


@lru_cache(maxsize=1)
def default_constants() -> Constants:
    """Defaults overlaid with the fitted values in ``data/fitted_constants.json`` when present."""
    path = data_path("fitted_constants.json")
    base = Constants(families=dict(DEFAULT_FAMILIES))
    if not path.exists():
        return base
    data = json.loads(path.read_text())
    fitted = Constants.from_dict({k: v for k, v in data.items() if k in {f.name for f in fields(Constants)}})
    return replace(fitted, families={**DEFAULT_FAMILIES, **fitted.families})


def network_constants(constants: Constants | None = None) -> NetworkConstants:
    return (constants or default_constants()).network
