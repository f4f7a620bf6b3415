"""Hardware: GPUs from the catalog (``data/gpus.yaml``, every number with its source) and clusters.

A :class:`Cluster` is nodes x GPUs with a two-level network (:class:`Network`): an NVLink (or Infinity
Fabric, or PCIe) domain of ``nvlink_domain`` GPUs, and a scale-out fabric of ``nics_per_node`` NICs per
node that every GPU of the node shares (rails). A parallel group of ranks is placed on it by
:meth:`Cluster.tier_for`: k ranks per NVLink domain times N domains. What a collective costs on that
placement is :mod:`shardwise.cost.comm`'s business.

A :class:`HeteroCluster` is several such clusters (:class:`GpuGroup`: one GPU type, node size and NICs
each) joined by links of ``inter_group_gbps``; a job file gives it as ``cluster.groups``
(:class:`GroupSpec`). One group is a plain :class:`Cluster`.

Power limit (``cluster.power_limit_w``): below the board power the peak tensor throughput scales as
(limit / rated)^(1/3). Assumption, from the CMOS dynamic-power relation P ~ C V^2 f with the supply
voltage following the clock in the DVFS range (P ~ f^3); memory bandwidth is unchanged. Measured losses
can be larger near the minimum voltage (a practitioner report: an H100 capped at 600 W runs
transformer pre-training 10-15% slower, factryze.ai/scale-atlas/power/power-capping; the rule says 5%),
so treat the rule as optimistic.

Memory tiers (:class:`HostTiers`): each GPU's host link (PCIe generation and lanes, or NVLink-C2C on Grace
parts), the host DRAM and the NVMe drives of its node, from the catalog's ``host`` block (the reference
system's datasheet) and overridable per job in ``cluster.host`` (:class:`HostSpec`). Offloaded model states
live there (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_CLUSTER_GPUS
from shardwise.memo import cached_hash, dataclass_getstate, quick_init
from shardwise.specs._loading import data_path, format_validation_error, load_yaml

DTYPE_FOR_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4", "fp32": "tf32"}
POWER_CLOCK_EXPONENT = 1.0 / 3.0  # assumption (module docstring): clock ~ power^(1/3) below the rated power
Fabric = Literal["infiniband", "roce", "efa", "tcpxo"]

#: Share of each GPU's memory a plan must leave free to "fit": what the caching allocator cannot hand out
#: (fragmentation of reserved blocks) and short spikes the model does not track. PyTorch's CUDA semantics
#: notes describe the caching allocator's reserved-but-unallocated memory; 5% is a policy default, set
#: per job with `cluster.memory_headroom` (0 = the whole HBM).
DEFAULT_MEMORY_HEADROOM = 0.05

#: Host link per GPU, one direction, where neither the catalog nor the job gives one: PCIe 4.0 x16
#: (31.5 GB/s, PCI-SIG PCIe 4.0 base specification: 16 GT/s x 16 lanes, 128b/130b), the slowest link of the
#: catalog's current parts. Only a GPU built outside the catalog reaches this default.
DEFAULT_HOST_LINK_GBYTE_S = 31.5


class GPU(BaseModel):
    """One accelerator type: peak dense throughput per dtype, memory, power, links and price."""

    model_config = ConfigDict(frozen=True)

    name: str
    aliases: tuple[str, ...] = ()
    tflops: dict[str, float]
    arch: str = Field(default="ampere", description="GPU generation: ampere, hopper, blackwell, ada, cdna3")
    family: str = Field(description="the catalog GPU whose fitted device constants this part uses (itself if measured)")
    sms: int = Field(gt=0, description="streaming multiprocessors (AMD: compute units)")
    tflops_at_w: float | None = Field(default=None, gt=0, description="board power the tflops are quoted at (default power_w)")
    memory_gib: float = Field(gt=0)
    hbm_tbyte_s: float = Field(gt=0)
    power_w: float = Field(gt=0, description="rated board power (TDP/TBP)")
    power_limit_w: float | None = Field(default=None, gt=0, description="enforced power limit, if below power_w")
    intra_node_link: str = "nvlink"
    intra_node_gbyte_s: float = Field(gt=0, description="datasheet figure per GPU, both directions")
    intra_node_topology: Literal["switch", "mesh"] = "switch"
    nvls: bool = False
    gpus_per_node: int = Field(default=8, gt=0)
    nvlink_domain: int | None = Field(default=None, gt=0)
    nics_per_node: int = Field(gt=0)
    nic_gbps: float = Field(gt=0)
    fabric: Fabric = "infiniband"
    price_usd_per_hour: float | None = None
    host_link: str = Field(default="pcie4-x16", description="host link of one GPU: pcie3/4/5-x16 or nvlink-c2c")
    host_link_gbyte_s: float | None = Field(default=None, gt=0, description="host link per GPU, one direction, GB/s")
    host_dram_gib: float | None = Field(default=None, gt=0, description="host DRAM per node of the reference system, GiB")
    nvme_tb: float | None = Field(default=None, gt=0, description="NVMe capacity per node, TB (10^12 B)")
    nvme_read_gbyte_s: float | None = Field(default=None, gt=0, description="NVMe read bandwidth per node (all drives), GB/s")
    nvme_write_gbyte_s: float | None = Field(default=None, gt=0, description="NVMe write bandwidth per node (all drives), GB/s")
    cpu_adam_gparams_s: float | None = Field(default=None, gt=0, description="measured CPU-Adam rate of the node's CPUs, 1e9 parameters/s")
    sources: dict[str, str] = {}

    @property
    def power_factor(self) -> float:
        """Peak throughput at the enforced power relative to the catalog tflops (module docstring)."""
        rated = self.tflops_at_w or self.power_w
        watts = min(self.power_limit_w or self.power_w, self.power_w)
        return min(1.0, watts / rated) ** POWER_CLOCK_EXPONENT

    def peak_flops(self, precision: str) -> float:
        """Peak dense FLOP/s for a training/serving precision (fp32 uses TF32 tensor cores)."""
        dtype = DTYPE_FOR_PRECISION.get(precision, precision)
        if dtype not in self.tflops:
            have = ", ".join(k for k in DTYPE_FOR_PRECISION if DTYPE_FOR_PRECISION[k] in self.tflops)
            raise ShardwiseError(f"{self.name} has no {precision} tensor throughput in the catalog; use one of: {have}")
        return self.tflops[dtype] * 1e12 * self.power_factor

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def hbm_bytes_s(self) -> float:
        return self.hbm_tbyte_s * 1e12

    @property
    def scale_out_gbps(self) -> float:
        """Scale-out bandwidth per GPU (its share of the node's NICs), Gbit/s."""
        return self.nics_per_node * self.nic_gbps / self.gpus_per_node

    def at_power(self, limit_w: float | None) -> GPU:
        """This GPU under an enforced power limit (None: the rated power)."""
        if limit_w is None:
            return self
        if limit_w > self.power_w:
            raise ShardwiseError(
                f"cluster.power_limit_w: {limit_w:g} W exceeds the {self.power_w:g} W board power of {self.name}; "
                f"give at most {self.power_w:g} or leave it out"
            )
        return self.model_copy(update={"power_limit_w": float(limit_w)})


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@lru_cache(maxsize=1)
def _catalog() -> dict[str, GPU]:
    raw: dict[str, dict[str, Any]] = load_yaml(data_path("gpus.yaml"))
    out = {}
    for name, entry in raw.items():
        if entry.get("family") not in raw:
            raise ShardwiseError(f"data/gpus.yaml: {name} needs a family: the catalog GPU whose fitted constants it uses "
                                 f"(itself once its runs are fitted; one of {', '.join(raw)})")
        fields = {k: v for k, v in entry.items() if k not in ("intra_node", "network", "host")}
        link, net, host = entry["intra_node"], entry["network"], entry.get("host")
        if not host or "host" not in entry.get("sources", {}):
            raise ShardwiseError(f"data/gpus.yaml: {name} needs a host block (link, gbyte_s, dram_gib, nvme_tb, "
                                 "nvme_read_gbyte_s, nvme_write_gbyte_s; null where unknown) and a sources.host citation")
        out[name] = GPU(
            name=name, intra_node_link=link["link"], intra_node_gbyte_s=link["gbyte_s"],
            intra_node_topology=link["topology"], nvls=link["nvls"], **net, **fields,
            host_link=host["link"], host_link_gbyte_s=host["gbyte_s"], host_dram_gib=host.get("dram_gib"),
            nvme_tb=host.get("nvme_tb"), nvme_read_gbyte_s=host.get("nvme_read_gbyte_s"),
            nvme_write_gbyte_s=host.get("nvme_write_gbyte_s"), cpu_adam_gparams_s=host.get("cpu_adam_gparams_s"),
        )
    return out


def catalog_families() -> dict[str, str]:
    """GPU name -> the catalog GPU whose fitted device constants it uses, for the parts that borrow them."""
    return {name: gpu.family for name, gpu in _catalog().items() if gpu.family != name}


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


class NetworkSpec(BaseModel):
    """The job file's `cluster.network` mapping: what differs from the catalog defaults of the GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nics_per_node: int | None = Field(default=None, gt=0, le=1024, description="scale-out NICs per node (rails)")
    nic_gbps: float | None = Field(default=None, gt=0, le=1e5, description="line rate of one NIC, Gbit/s")
    fabric: Fabric | None = Field(default=None, description="scale-out fabric")
    nvlink_gbyte_s: float | None = Field(default=None, gt=0, le=1e5, description="NVLink bandwidth per GPU, both "
                                         "directions, GB/s (datasheet convention)")
    nvlink_domain: int | None = Field(default=None, gt=0, le=1_000_000, description="GPUs on one NVLink fabric "
                                      "(a multiple of gpus_per_node)")
    nvls: bool | None = Field(default=None, description="NVLink SHARP (NVSwitch reductions, Hopper or newer); "
                              "default: the GPU's")
    sharp: bool = Field(default=False, description="SHARP in-network reduction on InfiniBand switches")


class HostSpec(BaseModel):
    """The job file's `cluster.host` mapping: the memory tiers that differ from the GPU's catalog entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    link_gbyte_s: float | None = Field(default=None, gt=0, le=10_000, description="host link per GPU, one direction, "
                                       "GB/s (PCIe 3.0 x16 15.75, 4.0 x16 31.5, 5.0 x16 63; NVLink-C2C 450)")
    dram_gib: float | None = Field(default=None, gt=0, le=1e6, description="host DRAM per node, GiB")
    nvme_tb: float | None = Field(default=None, ge=0, le=1e5, description="NVMe capacity per node, TB (10^12 B); 0 = none")
    nvme_read_gbyte_s: float | None = Field(default=None, gt=0, le=10_000, description="NVMe read bandwidth per node "
                                            "(all drives together), GB/s")
    nvme_write_gbyte_s: float | None = Field(default=None, gt=0, le=10_000, description="NVMe write bandwidth per node "
                                             "(all drives together), GB/s")
    cpu_adam_gparams_s: float | None = Field(default=None, gt=0, le=1e4, description="CPU Adam rate of a node's CPUs, "
                                             "10^9 parameters per second (DGX-2: 3.9, ZeRO-Offload Table 4); unset: the "
                                             "fitted host rate")
    cxl_gib: float | None = Field(default=None, ge=0, le=1e6, description="CXL-attached memory per node (Type-3 memory "
                                  "expanders, a CPU-less NUMA node), GiB: offloaded states fill host DRAM first, then it")
    cxl_gbyte_s: float | None = Field(default=None, gt=0, le=10_000, description="bandwidth of the node's CXL memory, all "
                                      "expanders together, GB/s (reads and writes); CPU Adam over the states that spill "
                                      "into it runs no faster")

    @model_validator(mode="after")
    def _cxl_has_a_bandwidth(self) -> HostSpec:
        if self.cxl_gib and not self.cxl_gbyte_s:
            raise ValueError("cxl_gib needs cxl_gbyte_s, the expanders' bandwidth per node in GB/s (a CXL 2.0 module "
                             "on PCIe 5.0 x8 signalling: at most 31.5 each way)")
        return self


@dataclass(frozen=True)
class HostTiers:
    """A node's memory tiers below HBM, resolved: the catalog's reference system with the job's overrides.
    None: the catalog has no figure for this system (the check it feeds is skipped, with a note)."""

    link_gbyte_s: float  # per GPU, one direction
    link: str
    dram_gib: float | None  # per node
    nvme_tb: float | None  # per node
    nvme_read_gbyte_s: float | None  # per node
    nvme_write_gbyte_s: float | None  # per node
    cpu_adam_gparams_s: float | None = None  # per node, 1e9 parameters/s; None: the fitted host rate
    cxl_gib: float | None = None  # per node, CXL memory expanders (job override only: no catalog system has them)
    cxl_gbyte_s: float | None = None  # per node, all expanders

    @classmethod
    def of(cls, gpu: GPU, spec: HostSpec | None = None) -> HostTiers:
        """The tiers of `gpu`'s catalog system with the job's `spec` overrides (module docstring)."""
        global _LAST_HOST
        last = _LAST_HOST
        if last[0] is gpu and last[1] is spec:  # an estimate asks for its cluster's tiers once per rank and more
            return last[2]
        tiers = _host_tiers(gpu.host_link_gbyte_s, gpu.host_link, gpu.host_dram_gib, gpu.nvme_tb, gpu.nvme_read_gbyte_s,
                           gpu.nvme_write_gbyte_s, gpu.cpu_adam_gparams_s, spec)
        _LAST_HOST = (gpu, spec, tiers)
        return tiers


@lru_cache(maxsize=64)
def _host_tiers(link_gbyte_s: float | None, link: str, dram_gib: float | None, nvme_tb: float | None,
                nvme_read: float | None, nvme_write: float | None, cpu_adam: float | None, spec: HostSpec | None) -> HostTiers:
    """:meth:`HostTiers.of` from the GPU's catalog figures (cached: a pure function of a few numbers; an
    estimate asks for its cluster's tiers once per pipeline rank and more)."""
    spec = spec or _NO_HOST_SPEC
    pick = lambda mine, catalog: catalog if mine is None else mine  # noqa: E731
    return HostTiers(
        link_gbyte_s=pick(spec.link_gbyte_s, link_gbyte_s) or DEFAULT_HOST_LINK_GBYTE_S,
        link=link if spec.link_gbyte_s is None else "cluster.host",
        dram_gib=pick(spec.dram_gib, dram_gib), nvme_tb=pick(spec.nvme_tb, nvme_tb),
        nvme_read_gbyte_s=pick(spec.nvme_read_gbyte_s, nvme_read),
        nvme_write_gbyte_s=pick(spec.nvme_write_gbyte_s, nvme_write),
        cpu_adam_gparams_s=pick(spec.cpu_adam_gparams_s, cpu_adam),
        cxl_gib=spec.cxl_gib or None, cxl_gbyte_s=spec.cxl_gbyte_s if spec.cxl_gib else None,
    )


_NO_HOST_SPEC = HostSpec()
_LAST_HOST: tuple = (None, None, None)  # the last (GPU, HostSpec) object pair HostTiers.of resolved, and its tiers


@dataclass(frozen=True)
class Network:
    """A cluster's network, resolved (by :func:`make_network`, from validated inputs): the NVLink domain
    and the scale-out NICs of each node. A plain frozen dataclass: it keys the comm model's caches."""

    __hash__ = cached_hash  # keys the layer, rank and comm caches: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    gpus_per_node: int
    nvlink_domain: int  # GPUs on one NVLink/NVSwitch (or xGMI, PCIe) fabric
    link: str  # scale-up link: nvlink3/4/5, nvlink4-export, xgmi, pcie4/5
    topology: str  # switch | mesh
    nvlink_gbyte_s: float  # per GPU, both directions (datasheet convention)
    nvls: bool
    sharp: bool
    nics_per_node: int
    nic_gbps: float  # line rate of one NIC
    fabric: str  # infiniband | roce | efa | tcpxo

    @property
    def link_family(self) -> str:
        """nvlink | xgmi | pcie: the key of the fitted ring efficiencies."""
        return next((f for f in ("nvlink", "xgmi", "pcie") if self.link.startswith(f)), "nvlink")


@quick_init
@dataclass(frozen=True)
class CommGroup:
    """A parallel group as the network sees it: `per_domain` ranks in each of `domains` NVLink domains."""

    per_domain: int
    domains: int
    network: Network

    @property
    def size(self) -> int:
        return self.per_domain * self.domains

    @property
    def name(self) -> str:
        return self.network.link if self.domains == 1 else "scale-out"


def group_shape(size: int | np.ndarray, stride: int | np.ndarray, domain: int) -> tuple[int | np.ndarray, int | np.ndarray]:
    """(ranks per NVLink domain, domains) of groups of `size` ranks spaced `stride` apart in the global
    rank order, domains being aligned blocks of `domain` ranks (numbers or numpy arrays)."""
    if not (isinstance(size, np.ndarray) or isinstance(stride, np.ndarray)):
        if (size - 1) * stride + 1 <= domain:
            return size, 1
        k = min(max(domain // stride, 1), size)
        return k, -(-size // k)
    size, stride = np.asarray(size), np.asarray(stride)
    inside = (size - 1) * stride + 1 <= domain
    k = np.where(inside, size, np.clip(domain // np.maximum(stride, 1), 1, np.maximum(size, 1)))
    return k, np.where(inside, 1, -(-size // k))


class Cluster(BaseModel):
    """`num_gpus` GPUs of one type in nodes of `gpus_per_node`, with a two-level network."""

    model_config = ConfigDict(frozen=True)

    gpu: GPU
    num_gpus: int = Field(gt=0, le=MAX_CLUSTER_GPUS)
    gpus_per_node: int = Field(gt=0)
    network: Network
    price_usd_per_gpu_hour: float | None = None
    memory_headroom: float = Field(default=DEFAULT_MEMORY_HEADROOM, ge=0, lt=1)
    host_spec: HostSpec | None = None  # the job's cluster.host overrides of the catalog's memory tiers

    @property
    def host(self) -> HostTiers:
        """Host link, DRAM and NVMe of this cluster's nodes (catalog, with cluster.host overrides)."""
        return HostTiers.of(self.gpu, self.host_spec)

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

    def tier_for(self, size: int, stride: int) -> CommGroup:
        """Placement of a group of `size` ranks spaced `stride` apart: it spans (size - 1) * stride + 1
        consecutive ranks; NVLink domains are aligned blocks of `nvlink_domain` ranks."""
        k, n_domains = group_shape(int(size), int(stride), self.network.nvlink_domain)
        return CommGroup(k, n_domains, self.network)


def make_network(gpu: GPU, gpus_per_node: int, spec: NetworkSpec | None = None, inter_node_gbps: float | None = None) -> Network:
    """The catalog's network for `gpu` with the job's overrides. NICs scale with a non-default node size;
    `inter_node_gbps` (per-GPU scale-out bandwidth, the older field) sets the NIC rate."""
    spec = spec or NetworkSpec()
    if inter_node_gbps is not None and spec.nic_gbps is not None:
        raise ShardwiseError("cluster.inter_node_gbps: give either inter_node_gbps (per GPU) or network.nic_gbps (per NIC), not both")
    nics = spec.nics_per_node or max(1, round(gpu.nics_per_node * gpus_per_node / gpu.gpus_per_node))
    nic_gbps = spec.nic_gbps or (inter_node_gbps * gpus_per_node / nics if inter_node_gbps else gpu.nic_gbps)
    domain = spec.nvlink_domain or (gpu.nvlink_domain if gpu.nvlink_domain and gpus_per_node == gpu.gpus_per_node else gpus_per_node)
    if domain < gpus_per_node or domain % gpus_per_node:
        raise ShardwiseError(
            f"cluster.network.nvlink_domain: {domain} must be a multiple of gpus_per_node ({gpus_per_node}); "
            "GPUs of one node share its NVLink fabric"
        )
    if spec.nvls and not gpu.nvls:
        raise ShardwiseError(
            f"cluster.network.nvls: {gpu.name} has no NVLink SHARP (NVLS needs NVSwitch with Hopper or newer); remove nvls"
        )
    fabric = spec.fabric or gpu.fabric
    if spec.sharp and fabric != "infiniband":
        raise ShardwiseError(f"cluster.network.sharp: SHARP in-network reduction needs InfiniBand switches, not {fabric}; set sharp: false")
    return Network(
        gpus_per_node=gpus_per_node, nvlink_domain=domain, link=gpu.intra_node_link, topology=gpu.intra_node_topology,
        nvlink_gbyte_s=spec.nvlink_gbyte_s or gpu.intra_node_gbyte_s, nvls=gpu.nvls if spec.nvls is None else spec.nvls,
        sharp=spec.sharp, nics_per_node=nics, nic_gbps=nic_gbps, fabric=fabric,
    )


def make_cluster(
    gpu: str | GPU,
    gpus: int,
    gpus_per_node: int | None = None,
    inter_node_gbps: float | None = None,
    price_usd_per_gpu_hour: float | None = None,
    network: NetworkSpec | dict[str, Any] | None = None,
    power_limit_w: float | None = None,
    gpu_field: str = "--gpu",
    memory_headroom: float | None = None,
    host: HostSpec | dict[str, Any] | None = None,
) -> Cluster:
    """Cluster of `gpus` GPUs with the catalog's network, overridden by `network` (see NetworkSpec).
    `gpu_field` names the field an unknown GPU is reported on; `memory_headroom` defaults to
    DEFAULT_MEMORY_HEADROOM."""
    try:
        g = get_gpu(gpu)
    except ShardwiseError as exc:
        raise ShardwiseError(f"{gpu_field}: {exc}") from None
    g = g.at_power(power_limit_w)
    per_node = gpus_per_node or g.gpus_per_node
    if isinstance(network, dict):
        try:
            network = NetworkSpec(**network)
        except ValidationError as exc:
            raise ShardwiseError(format_validation_error(exc, "cluster.network")) from None
    if isinstance(host, dict):
        try:
            host = HostSpec(**host)
        except ValidationError as exc:
            raise ShardwiseError(format_validation_error(exc, "cluster.host")) from None
    net = make_network(g, per_node, network, inter_node_gbps)
    price = price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else g.price_usd_per_hour
    try:
        headroom = DEFAULT_MEMORY_HEADROOM if memory_headroom is None else memory_headroom
        return Cluster(gpu=g, num_gpus=gpus, gpus_per_node=per_node, network=net, price_usd_per_gpu_hour=price,
                       memory_headroom=headroom, host_spec=host)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, "cluster")) from None



NIC_KINDS: dict[str, Fabric] = {"ib": "infiniband", "infiniband": "infiniband", "roce": "roce", "efa": "efa", "tcpxo": "tcpxo"}


class NicSpec(BaseModel):
    """A group's scale-out NICs: `count` per node of `gbps` each, of one `kind`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(gt=0, le=1024, description="scale-out NICs per node (rails)")
    gbps: float = Field(gt=0, le=1e5, description="line rate of one NIC, Gbit/s")
    kind: Literal["ib", "infiniband", "roce", "efa", "tcpxo"] | None = Field(
        default=None, description="fabric: ib (InfiniBand), roce, efa or tcpxo; default: the GPU's")


class GroupSpec(BaseModel):
    """One entry of `cluster.groups`: nodes of one GPU type with their own network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, description="label used by parallel.stage_groups and parallel.replicas; "
                             "default: the GPU's catalog name")
    gpu: str = Field(description="GPU type: a name or alias from data/gpus.yaml (h100, a100-80gb, ...)")
    nodes: int = Field(gt=0, description="nodes in the group")
    gpus_per_node: int | None = Field(default=None, gt=0, description="GPUs per node; default: the GPU's in data/gpus.yaml")
    nic: NicSpec | None = Field(default=None, description="scale-out NICs of each node; default: the GPU's catalog network")
    network: NetworkSpec | None = Field(default=None, description="other network fields (NVLink, SHARP) as in cluster.network")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="$ per GPU-hour; default: the GPU's list price")
    power_limit_w: float | None = Field(default=None, gt=0, le=1e5, description="enforced power limit per GPU, W")
    host: HostSpec | None = Field(default=None, description="this group's memory tiers below HBM that differ from its GPU's "
                                  "catalog system, as cluster.host (docs/offload.md)")


class GroupsSpec(BaseModel):
    """The `cluster` section of a heterogeneous job: groups of nodes and the links between them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: list[GroupSpec] = Field(min_length=1, description="groups of nodes, each of one GPU type and network")
    inter_group_gbps: float | None = Field(
        default=None, gt=0, le=1e7, description="bandwidth of the links joining two groups, Gbit/s per direction, "
        "shared by every transfer between them; default: no limit beyond each group's NICs (one fabric)")
    memory_headroom: float | None = Field(default=None, ge=0, lt=1, description="share of GPU memory a plan must leave "
                                          "free to fit, in every group; default 0.05")


@dataclass(frozen=True)
class GpuGroup:
    """A named group of a heterogeneous cluster: a homogeneous :class:`Cluster`."""

    name: str
    cluster: Cluster

    @property
    def gpu(self) -> GPU:
        return self.cluster.gpu

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus


@dataclass(frozen=True)
class HeteroCluster:
    """Groups of GPUs that differ in type, node size or network, and the links joining them."""

    groups: tuple[GpuGroup, ...]
    inter_group_gbps: float | None = None

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)

    @property
    def nodes(self) -> int:
        return sum(g.cluster.nodes for g in self.groups)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def group(self, name: str, where: str = "group") -> GpuGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise ShardwiseError(f"{where}: unknown group {name!r}; the cluster's groups are {', '.join(self.names)}")

    def describe(self) -> str:
        return " + ".join(f"{g.num_gpus} x {g.gpu.name} ({g.name})" for g in self.groups)


def group_cluster(spec: GroupSpec, where: str, memory_headroom: float | None = None) -> Cluster:
    """The homogeneous cluster of one group; `nic` fills the network's NIC fields."""
    net = dict((spec.network or NetworkSpec()).model_dump(exclude_none=True, exclude_defaults=True))
    if spec.nic is not None:
        both = [k for k in ("nics_per_node", "nic_gbps", "fabric") if k in net]
        if both:
            raise ShardwiseError(f"{where}.network.{both[0]}: give the NICs once, in {where}.nic or in {where}.network")
        net.update(nics_per_node=spec.nic.count, nic_gbps=spec.nic.gbps)
        if spec.nic.kind is not None:
            net["fabric"] = NIC_KINDS[spec.nic.kind]
    try:
        gpu = get_gpu(spec.gpu)
    except ShardwiseError as exc:
        raise ShardwiseError(f"{where}.gpu: {exc}") from None
    per_node = spec.gpus_per_node or gpu.gpus_per_node
    try:
        return make_cluster(gpu, spec.nodes * per_node, per_node, None, spec.price_usd_per_gpu_hour, net or None, spec.power_limit_w,
                            gpu_field=f"{where}.gpu", memory_headroom=memory_headroom, host=spec.host)
    except ShardwiseError as exc:  # the flat form's messages name `cluster.<field>`: name the group instead
        msg = str(exc)
        raise ShardwiseError(where + msg[len("cluster"):] if msg.startswith("cluster") else f"{where}: {msg}") from None


def make_hetero_cluster(spec: GroupsSpec, where: str = "cluster") -> Cluster | HeteroCluster:
    """The cluster of a `cluster.groups` section; a single group is the plain :class:`Cluster` the
    `{gpu, gpus}` form gives (same numbers)."""
    clusters = [group_cluster(g, f"{where}.groups[{i}]", spec.memory_headroom) for i, g in enumerate(spec.groups)]
    if len(clusters) == 1:
        if spec.inter_group_gbps is not None:
            raise ShardwiseError(f"{where}.inter_group_gbps: a single group has no links to other groups; remove it")
        return clusters[0]
    names = [g.name or c.gpu.name for g, c in zip(spec.groups, clusters, strict=True)]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ShardwiseError(f"{where}.groups[{i}].name: {n!r} names two groups; give each group a distinct name")
    return HeteroCluster(tuple(GpuGroup(n, c) for n, c in zip(names, clusters, strict=True)), spec.inter_group_gbps)
