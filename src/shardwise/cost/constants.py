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


# NCCL's relative NVLS efficiency per GPU architecture (NVIDIA/nccl src/graph/tuning.cc, nvlsEfficiency:
# Hopper 0.85, Blackwell 0.74), keyed by the catalog's scale-up link. The fitted `nvls_efficiency` scales it.
NVLS_ARCH_FACTOR = {"nvlink4": 0.85, "nvlink4-export": 0.85, "nvlink5": 0.74}
NETWORK_CONSTANTS_FILE = "network_constants.json"


@dataclass(frozen=True)
class NetworkConstants:
    """The network model's constants (formulas in :mod:`shardwise.cost.comm`). The defaults are starting
    values; ``scripts/fit_network.py`` fits the ones marked *fitted* on the nccl-tests / DeepEP records
    (``data/calibration/comm-measurements.json``) and writes ``data/network_constants.json``, whose values
    replace the defaults. Latencies of fabrics without measurements fall back as noted."""

    ring_efficiency_nvlink: float = 0.80  # fitted: ring bus bandwidth / NVLink one-direction rate (NCCL maintainer: ~80%, nccl-tests #212)
    ring_efficiency_xgmi: float = 0.70  # fitted: same on AMD Infinity Fabric (per-peer links)
    ring_efficiency_pcie: float = 0.80  # no measurements: taken equal to NVLink's starting value (assumption)
    nvls_efficiency: float = 0.70  # fitted: NVLS all-reduce algorithm bandwidth / (NVLink rate x NVLS_ARCH_FACTOR)
    tree_efficiency: float = 0.30  # fitted: NCCL tree (no NVLS) intra-node chain rate / NVLink rate (per-channel caps)
    nic_efficiency: float = 0.93  # fitted: achieved / line rate of the scale-out NICs
    link_latency_s: float = 2e-6  # fitted: per ring step on the scale-up fabric
    nic_latency_infiniband_s: float = 10e-6  # fitted: per step across domains, InfiniBand (RoCE uses it: no data)
    nic_latency_efa_s: float = 50e-6  # fitted: same on AWS EFA (SRD)
    nic_latency_tcpxo_s: float = 100e-6  # fitted: same on GCP GPUDirect-TCPXO
    nvls_latency_s: float = 30e-6  # fitted: NVLS / NVLSTree fixed cost (NCCL's tuner charges 25 us, tuning.cc)
    chunk_latency_s: float = 8e-6  # fitted: per-chunk handshake h of the pipelined transfer, t = a + b + 2 sqrt(h b)

    def ring_efficiency(self, link_family: str) -> float:
        return getattr(self, f"ring_efficiency_{link_family}")

    def nic_latency_s(self, fabric: str) -> float:
        return getattr(self, f"nic_latency_{'infiniband' if fabric == 'roce' else fabric}_s")


@lru_cache(maxsize=1)
def fitted_network_constants() -> NetworkConstants:
    """Defaults overlaid with ``data/network_constants.json`` (written by scripts/fit_network.py)."""
    path = data_path(NETWORK_CONSTANTS_FILE)
    if not path.exists():
        return NetworkConstants()
    values = json.loads(path.read_text())["constants"]
    known = {f.name for f in fields(NetworkConstants)}
    return NetworkConstants(**{k: float(v) for k, v in values.items() if k in known})


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
    network: NetworkConstants = field(default_factory=fitted_network_constants)
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
    "MI325X": "H100-SXM",
    "A800-80GB": "A100-80GB",
    "H100-SXM-96GB": "H100-SXM",
    "H100-NVL": "H100-SXM",
    "GB200": "H100-SXM",
}


@lru_cache(maxsize=1)
def default_constants() -> Constants:
    """Defaults overlaid with the fitted values in ``data/fitted_constants.json`` when present."""
    path = data_path("fitted_constants.json")
    base = Constants(families=dict(DEFAULT_FAMILIES))
    if not path.exists():
        return base
    data = json.loads(path.read_text())
    # The network's constants have their own fit and file (fitted_network_constants); a "network" section
    # here is ignored.
    fitted = Constants.from_dict({k: v for k, v in data.items() if k in {f.name for f in fields(Constants)} - {"network"}})
    return replace(fitted, families={**DEFAULT_FAMILIES, **fitted.families})


def network_constants(constants: Constants | None = None) -> NetworkConstants:
    return constants.network if constants is not None else fitted_network_constants()
