"""Hardware: GPUs from the catalog (``data/gpus.yaml``, every number with its source) and clusters.

A :class:`Cluster` is nodes x GPUs with a tiered network, innermost tier first (NVLink domain, then
scale-out). A parallel group uses the outermost tier its members span.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_CLUSTER_GPUS
from shardwise.specs._loading import data_path, format_validation_error, load_yaml

DTYPE_FOR_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "tf32"}

#: Share of each GPU's memory a plan must leave free to "fit": what the caching allocator cannot hand out
#: (fragmentation of reserved blocks) and short spikes the model does not track. PyTorch's CUDA semantics
#: notes describe the caching allocator's reserved-but-unallocated memory; 5% is a policy default, set
#: per job with `cluster.memory_headroom` (0 = the whole HBM).
DEFAULT_MEMORY_HEADROOM = 0.05


class GPU(BaseModel):
    """One accelerator type: peak dense throughput per dtype, memory, links and price."""

    model_config = ConfigDict(frozen=True)

    name: str
    aliases: tuple[str, ...] = ()
    tflops: dict[str, float]
    memory_gib: float = Field(gt=0)
    hbm_tbyte_s: float = Field(gt=0)
    intra_node_link: str = "nvlink"
    intra_node_gbyte_s: float = Field(gt=0, description="datasheet figure, both directions")
    scale_out_gbps: float = Field(gt=0)
    gpus_per_node: int = Field(default=8, gt=0)
    price_usd_per_hour: float | None = None
    sources: dict[str, str] = {}

    def peak_flops(self, precision: str) -> float:
        """Peak dense FLOP/s for a training/serving precision (fp32 uses TF32 tensor cores)."""
        dtype = DTYPE_FOR_PRECISION.get(precision, precision)
        if dtype not in self.tflops:
            have = ", ".join(k for k in DTYPE_FOR_PRECISION if DTYPE_FOR_PRECISION[k] in self.tflops)
            raise ShardwiseError(f"{self.name} has no {precision} tensor throughput in the catalog; use one of: {have}")
        return self.tflops[dtype] * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def hbm_bytes_s(self) -> float:
        return self.hbm_tbyte_s * 1e12


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@lru_cache(maxsize=1)
def _catalog() -> dict[str, GPU]:
    raw: dict[str, dict[str, Any]] = load_yaml(data_path("gpus.yaml"))
    out = {}
    for name, entry in raw.items():
        fields = {k: v for k, v in entry.items() if k != "intra_node"}
        link = entry["intra_node"]
        out[name] = GPU(name=name, intra_node_link=link["link"], intra_node_gbyte_s=link["gbyte_s"], **fields)
    return out


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    index = {}
    for name, gpu in _catalog().items():
        for alias in (name, *gpu.aliases):
            index[_norm(alias)] = name
    return index


def gpu_names() -> list[str]:
    return list(_catalog())


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by name or alias, case-insensitively."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise ShardwiseError(f"gpu must be a name such as 'H100-SXM', got {shorten(name)}")
    key = _alias_index().get(_norm(name))
    if key is None:
        raise ShardwiseError(f"unknown GPU {shorten(name)}; known GPUs: {', '.join(gpu_names())} (aliases such as 'h100', 'a100-80gb' work)")
    return _catalog()[key]


class NetworkTier(BaseModel):
    """One level of the network: GPUs within `size` consecutive ranks reach each other at this tier."""

    model_config = ConfigDict(frozen=True)

    name: str
    size: int = Field(gt=0, description="GPUs per domain of this tier")
    gbyte_s: float = Field(gt=0, description="per-GPU bandwidth in one direction")
    latency_s: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1.2, description="achieved bus bandwidth / link bandwidth (>1 with in-network reduction)")


class Cluster(BaseModel):
    """`num_gpus` GPUs of one type in nodes of `gpus_per_node`, with a tiered network."""

    model_config = ConfigDict(frozen=True)

    gpu: GPU
    num_gpus: int = Field(gt=0, le=MAX_CLUSTER_GPUS)
    gpus_per_node: int = Field(gt=0)
    tiers: tuple[NetworkTier, ...]
    price_usd_per_gpu_hour: float | None = None
    memory_headroom: float = Field(default=DEFAULT_MEMORY_HEADROOM, ge=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise ValueError(f"gpus ({self.num_gpus}) must be a multiple of gpus_per_node ({self.gpus_per_node})")
        return self

    @property
    def usable_memory_bytes(self) -> float:
        """Per-GPU memory a plan may use: HBM less the headroom."""
        return self.gpu.memory_bytes * (1.0 - self.memory_headroom)

    @property
    def nodes(self) -> int:
        return max(1, self.num_gpus // self.gpus_per_node)

    def tier_for(self, size: int, stride: int) -> NetworkTier:
        """Outermost tier crossed by a group of `size` ranks spaced `stride` apart: the group spans
        (size - 1) * stride + 1 consecutive ranks (domains are aligned blocks of `tier.size` ranks)."""
        span = (size - 1) * stride + 1
        for tier in self.tiers:
            if span <= tier.size:
                return tier
        return self.tiers[-1]


def make_cluster(
    gpu: str | GPU,
    gpus: int,
    gpus_per_node: int | None = None,
    inter_node_gbps: float | None = None,
    price_usd_per_gpu_hour: float | None = None,
    constants: Any = None,
    gpu_field: str = "--gpu",
    memory_headroom: float | None = None,
) -> Cluster:
    """Cluster with the default two tiers (intra-node link, scale-out) from the catalog.

    Link efficiencies and latencies are the named constants of :mod:`shardwise.cost.constants`.
    """
    from shardwise.cost.constants import network_constants

    try:
        g = get_gpu(gpu)
    except ShardwiseError as exc:
        raise ShardwiseError(f"{gpu_field}: {exc}") from None
    per_node = gpus_per_node or g.gpus_per_node
    net = network_constants(constants)
    intra = NetworkTier(
        name=g.intra_node_link,
        size=per_node,
        gbyte_s=g.intra_node_gbyte_s / 2,
        latency_s=net.intra_node_latency_s,
        efficiency=net.intra_node_efficiency,
    )
    outer = NetworkTier(
        name="scale-out",
        size=2**62,
        gbyte_s=(inter_node_gbps or g.scale_out_gbps) / 8,
        latency_s=net.inter_node_latency_s,
        efficiency=net.inter_node_efficiency,
    )
    price = price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else g.price_usd_per_hour
    try:
        headroom = DEFAULT_MEMORY_HEADROOM if memory_headroom is None else memory_headroom
        return Cluster(gpu=g, num_gpus=gpus, gpus_per_node=per_node, tiers=(intra, outer), price_usd_per_gpu_hour=price,
                       memory_headroom=headroom)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, "cluster")) from None
