"""Collective communication time on a two-level network: NVLink domains joined by the nodes' NICs.

A group of n = k x N ranks (k per NVLink domain, N domains; :meth:`Cluster.tier_for`) and a message of
S bytes (the full array, as nccl-tests' "size"; for all-to-all the bytes each rank sends). Rates per GPU
and direction, B_link = the datasheet NVLink (xGMI, PCIe) figure / 2:

- ring:  b_ring = eta_ring[link] * B_link, times (k-1)/(G-1) on a point-to-point mesh (AMD Infinity
  Fabric: a k-rank group uses only the links to its k-1 peers; stas00/ml-engineering measures 48 GB/s
  all-reduce busbw on 2 of 8 MI300X and 313 on 8);
- NVLS:  b_nvls = eta_nvls * f_arch * B_link * (k-1)/k, in-switch all-reduce (f_arch: NCCL's
  nvlsEfficiency; (k-1)/k: tuning.cc's (ppn-1)/ppn for NVLS. It reproduces where NCCL switches from ring
  to NVLS: from 5 GPUs on H100/H200, 6 on B200 (NCCL issue #1455; stas00/ml-engineering));
- tree:  b_tree = eta_tree * B_link, NCCL's tree kernels inside a node (per-channel caps, tuning.cc);
- NIC:   b_nic = eta_nic * R * B_nic / G, each GPU's share of the node's R NICs (rails): NCCL drives
  every NIC of a node at once, so a group with k GPUs per domain has k * b_nic leaving each domain.

Algorithms, the fastest one taken as NCCL's tuner does (NVIDIA/nccl src/graph/tuning.cc):

- ring (every collective): bus bandwidth b_ring inside a domain, min(b_ring, k b_nic) across domains
  (every ring leaves a domain once per channel, through one NIC); t_bw = f(n) S / busbw with the nccl-tests
  bus factors f (NVIDIA/nccl-tests doc/PERFORMANCE.md): all-reduce 2(n-1)/n, reduce-scatter and
  all-gather (n-1)/n. Steps 2(n-1) (all-reduce) or n-1, of which 2(N-1) or N-1 cross domains (tuning.cc
  nsteps / nInterSteps), each costing lat_link or lat_nic.
- NVLS all-reduce (one domain, NVLS on): t_bw = S / b_nvls, latency lat_nvls.
- tree all-reduce (N >= 2): reduce then broadcast, pipelined (NVLSTree with NVLS on): intra-domain bound
  b_nvls or b_tree, scale-out bound k b_nic for N = 2 (double binary tree: each domain sends and
  receives S once; tuning.cc doubles NVLSTree's network bandwidth on two nodes) and k b_nic / 2 beyond
  (an interior node forwards twice, as a ring does); with SHARP the switches reduce: k b_nic at any N.
  Latency 2 ((k-1) lat_link + ceil(log2 N) lat_nic) (tuning.cc's tree latency; NVLSTree: lat_nvls for
  the in-node part).
- all-to-all: each rank sends S (k-1)/n over the scale-up fabric and S (n-k)/n through its NIC share,
  concurrently (DeepEP's normal kernels are bound by the slower of the two): max of the two times;
  latency one step of each level it uses, plus lat_peer for each of the n - k remote peers (NCCL's
  all-to-all is one send/receive pair per peer in a group, nccl-tests' alltoall.cu: with many nodes the
  per-peer messages are small and their per-message cost shows).
- send/recv: S over one link, NVLink inside a domain, the GPU's NIC share across; one step's latency.
- broadcast: NCCL's pipelined ring (chain) from the root: the ring's bus bandwidth with bus factor 1
  (nccl-tests PERFORMANCE.md) and n steps, N of them across domains (tuning.cc nsteps / nInterSteps for
  broadcast and reduce).

Protocols (tuning.cc times each and takes the fastest): the formulas above are the bulk protocol (Simple,
or LL128 where NCCL enables it), with the latencies lat_*, the per-chunk handshake h below and NVLS. LL
(8-byte stores with inline flags) moves a fraction eta_LL of the ring's bus bandwidth (tuning.cc: 1/4 on
a ring across nodes) with no handshake, at its own per-step latency across domains, lat_LL[fabric]; on
fabrics whose bulk steps wait long (GPUDirect-TCPXO, EFA) it carries the small and mid-size messages, and
where the two cross, nccl-tests curves show the slow mid-size region (A3 Mega: 32 GB/s at 16 MiB). LL is
modelled on the ring only (all-reduce, reduce-scatter, all-gather, broadcast); all-to-all and send/recv
keep the bulk protocol.

Groups of ranks that span several GPU groups of a heterogeneous cluster (:func:`spanning_network`) run
the same formulas on the slowest link of each level: a ring or a tree through every rank moves at the
pace of its slowest hop (the bus bandwidth of a ring is its slowest link's; Patarasuk & Yuan 2009,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", Sec. 2), so the smallest NVLink
domain and rate, the smallest per-GPU NIC share, capped by the GPU's share of the links between the
groups, and the fabric with the longest latency; SHARP does not span fabrics, NVLS needs every group.

Latency a and transfer b combine as t = a + b + 2 sqrt(h b): NCCL moves a message through its pipeline in
chunks and pays a handshake h per chunk; with the chunk size chosen well a pipelined transfer costs
b + 2 sqrt(h b) beyond its fixed latency (Sanders & Sibeyn 2003, "A bandwidth latency tradeoff for
broadcast and reduction": T = (sqrt(a) + sqrt(b))^2 for a pipeline whose per-packet latency is a; here
the per-chunk term h is one constant and the steps' latency a is paid once). The term makes the bus
bandwidth climb with the message size over decades, as nccl-tests curves do, instead of the sharp knee
of the alpha-beta model (Hockney 1994, h = 0). All constants (eta_*, lat_*, h) are
:class:`~shardwise.cost.constants.NetworkConstants`, fitted by ``scripts/fit_network.py``
(:mod:`shardwise.cost.comm_fit`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from shardwise.cost.constants import NVLS_ARCH_FACTOR, NetworkConstants, fitted_network_constants
from shardwise.cost.numeric import Num
from shardwise.memo import IdentityMemo
from shardwise.specs.hardware import Cluster, CommGroup, Network, group_shape

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv", "broadcast")
INF = float("inf")


def bus_factor(kind: str, n: Num) -> Num:
    """nccl-tests bus bandwidth = algorithm bandwidth x this factor (PERFORMANCE.md)."""
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0 + 0.0 * n


class _Scalar:
    """Operations on plain floats (fast path)."""

    where = staticmethod(lambda c, a, b: a if c else b)
    either = staticmethod(lambda a, b: a or b)
    minimum = staticmethod(min)
    maximum = staticmethod(max)

    @staticmethod
    def ceil_log2(n):
        return math.ceil(math.log2(n)) if n > 1 else 0

    @staticmethod
    def combine(a, b, h):
        return a + b + 2.0 * math.sqrt(h * b)


class _Array:
    """The same operations on numpy arrays (one group per element)."""

    where = staticmethod(np.where)
    either = staticmethod(np.logical_or)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)

    @staticmethod
    def ceil_log2(n):
        return np.ceil(np.log2(np.maximum(n, 1)))

    @staticmethod
    def combine(a, b, h):
        return a + b + 2.0 * np.sqrt(h * b)


class _Rates(NamedTuple):
    """Per-network numbers of the formulas (module docstring)."""

    link: float  # B_link, bytes/s per direction
    mesh: int  # k-1 divisor of a point-to-point mesh (0: switched)
    eta_ring: float
    b_nic: float  # a GPU's share of its node's NICs, bytes/s
    lat_link: float
    lat_nic: float  # per cross-domain step, bulk protocol
    lat_nvls: float
    h: float  # per-chunk handshake of the bulk protocol
    nvls: float  # NVLS rate (0: off)
    eta_tree: float
    ll_fraction: float  # LL bus bandwidth / the bulk protocol's
    ll_lat_nic: float  # per cross-domain step, LL protocol
    lat_peer: float  # per remote peer of an all-to-all


def _rates(net: Network, c: NetworkConstants) -> _Rates:
    """:func:`_network_rates`, by the identity of the two objects (a job's network is asked for on every
    collective; hashing its fields each time cost more than the formulas): the last pair asked for, then
    a small cache (shardwise/memo.py)."""
    global _LAST_RATES
    last = _LAST_RATES
    if last[0] is net and last[1] is c:
        return last[2]
    r = _RATES(_network_rates, (net, c))
    _LAST_RATES = (net, c, r)
    return r


_RATES = IdentityMemo(256)
_LAST_RATES: tuple = (None, None, None)


@lru_cache(maxsize=256)
def _network_rates(net: Network, c: NetworkConstants) -> _Rates:
    """The network's rates and latencies under the constants (cached: a handful of networks per run)."""
    link = net.nvlink_gbyte_s * 0.5e9
    mesh = max(net.nvlink_domain - 1, 1) if net.topology == "mesh" else 0
    b_nic = c.nic_efficiency * net.nics_per_node * net.nic_gbps * 0.125e9 / net.gpus_per_node
    nvls = c.nvls_efficiency * NVLS_ARCH_FACTOR.get(net.link, 0.0) * link if net.nvls else 0.0
    return _Rates(link, mesh, c.ring_efficiency(net.link_family), b_nic, c.link_latency_s, c.nic_latency_s(net.fabric),
                  c.nvls_latency_s, c.chunk_latency_s, nvls, c.tree_efficiency, c.ll_bandwidth_fraction,
                  c.nic_latency_s(net.fabric, "ll_"), c.a2a_peer_latency_s)


def _time_s(kind: str, size: Num, k: Num, n_dom: Num, net: Network, c: NetworkConstants, ops: type[_Scalar | _Array],
            latency: bool = True) -> Num:
    """Seconds of one collective; `size`, `k` (ranks per domain) and `n_dom` (domains) may be arrays.
    The faster of the bulk protocol and LL (module docstring) where both apply."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}")
    r = _rates(net, c)
    if not latency:
        r = r._replace(lat_link=0.0, lat_nic=0.0, lat_nvls=0.0, h=0.0, lat_peer=0.0)
    n = k * n_dom
    across = n_dom > 1
    link_k = r.link * ops.maximum(k - 1, 1) / r.mesh if r.mesh else r.link
    b_ring = r.eta_ring * link_k
    if kind == "send_recv":
        return ops.combine(ops.where(across, r.lat_nic, r.lat_link), size / ops.where(across, r.b_nic, b_ring), r.h)
    if kind == "all_to_all":
        t_bw = ops.maximum(size * (k - 1) / n / b_ring, size * (n - k) / n / r.b_nic)
        lat = ops.where(k > 1, r.lat_link, 0.0) + ops.where(across, r.lat_nic + (n - k) * r.lat_peer, 0.0)
        return ops.combine(lat, t_bw, r.h)
    # Ring (and broadcast's chain): steps on NVLink, steps across domains, transfer at the ring's bus bandwidth.
    busbw = ops.where(across, ops.minimum(ops.where(k > 1, b_ring, INF), k * r.b_nic), b_ring)
    if kind == "broadcast":
        inter = ops.where(across, n_dom, 0)
        link_steps, t_bw = n - inter, size / busbw
    else:
        mult = 2.0 if kind == "all_reduce" else 1.0
        inter = mult * (n_dom - 1)
        link_steps, t_bw = mult * (n - 1) - inter, mult * (n - 1) / n * size / busbw
    t = ops.combine(link_steps * r.lat_link + inter * r.lat_nic, t_bw, r.h)
    if kind == "all_reduce":
        t = _nvls_and_tree_s(t, size, k, n_dom, link_k, r, net.sharp, ops)
    if not latency:
        return t
    ll = link_steps * r.lat_link + inter * r.ll_lat_nic + t_bw / r.ll_fraction  # LL: a share of the ring's rate, no handshake
    return ops.minimum(t, ll)


def _nvls_and_tree_s(ring: Num, size: Num, k: Num, n_dom: Num, link_k: Num, r: _Rates, sharp: bool,
                     ops: type[_Scalar | _Array]) -> Num:
    """All-reduce: the ring's time `ring`, NVLS inside a domain and the tree across domains, the fastest."""
    across = n_dom > 1
    b_nvls = r.nvls * ops.maximum(k - 1, 1) / ops.maximum(k, 1)  # used only where k >= 2
    t = ring
    if r.nvls:
        nvls = ops.combine(r.lat_nvls, size / b_nvls, r.h)
        t = ops.where(ops.either(across, k < 2), t, ops.minimum(t, nvls))
    intra = ops.where(k > 1, b_nvls if r.nvls else r.eta_tree * link_k, INF)
    scale_out = k * r.b_nic * (1.0 if sharp else ops.where(n_dom > 2, 0.5, 1.0))
    rounds = 1 if sharp else ops.ceil_log2(n_dom)
    head = r.lat_nvls if r.nvls else 2 * (k - 1) * r.lat_link
    tree = ops.combine(head + 2 * rounds * r.lat_nic, size / ops.minimum(intra, scale_out), r.h)
    return ops.where(across, ops.minimum(t, tree), t)


def collective_s(kind: str, size_bytes: float, n: int, tier: CommGroup, constants: NetworkConstants | None = None,
                 latency: bool = True) -> float:
    """Time of one collective of `kind` over the `n` ranks of `tier` (:meth:`Cluster.tier_for`); S =
    `size_bytes` (full array). `latency=False` gives the transfer time alone."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    k = min(tier.per_domain, n)
    return float(_time_s(kind, size_bytes, k, -(-n // k), tier.network, constants or fitted_network_constants(), _Scalar, latency))


def group_collective_s(cluster: Cluster, kind: str, size_bytes: Num, n: Num, stride: Num,
                       constants: NetworkConstants | None = None) -> Num:
    """Collective over groups of `n` ranks spaced `stride` apart in the global rank order; arguments
    may be numpy arrays (one group per element)."""
    if not (isinstance(n, np.ndarray) or isinstance(stride, np.ndarray) or isinstance(size_bytes, np.ndarray)):  # plain Python
        if n <= 1 or size_bytes <= 0:
            return 0.0
        net = cluster.network
        k, n_dom = group_shape(int(n), int(stride), net.nvlink_domain)  # what Cluster.tier_for places
        return float(_time_s(kind, float(size_bytes), k, n_dom, net, constants or fitted_network_constants(), _Scalar))
    n_arr = np.maximum(np.asarray(n), 1)
    k, n_dom = group_shape(n_arr, np.asarray(stride), cluster.network.nvlink_domain)
    size = np.asarray(size_bytes, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _time_s(kind, size, k, n_dom, cluster.network, constants or fitted_network_constants(), _Array)
    t = np.where((n_arr > 1) & (size > 0), t, 0.0)
    return float(t) if np.ndim(t) == 0 else t


def spanning_network(networks: Sequence[Network], cross_gbps_per_gpu: float | None = None,
                     constants: NetworkConstants | None = None) -> Network:
    """The network seen by a group of ranks spread over GPU groups with these networks: each level at
    its slowest link (module docstring). `cross_gbps_per_gpu`: a GPU's share of the links joining the
    groups (None: no limit beyond the NICs). One network and no cap: that network itself."""
    if len(set(networks)) == 1 and cross_gbps_per_gpu is None:
        return networks[0]
    c = constants or fitted_network_constants()
    slow_link = min(networks, key=lambda n: n.nvlink_gbyte_s)
    per_gpu = min(n.nics_per_node * n.nic_gbps / n.gpus_per_node for n in networks)
    if cross_gbps_per_gpu is not None:
        per_gpu = min(per_gpu, cross_gbps_per_gpu)
    per_node = min(n.gpus_per_node for n in networks)
    return replace(
        slow_link, gpus_per_node=per_node, nvlink_domain=min(n.nvlink_domain for n in networks),
        topology="mesh" if any(n.topology == "mesh" for n in networks) else slow_link.topology,
        nvls=all(n.nvls for n in networks), sharp=False, nics_per_node=per_node, nic_gbps=per_gpu,
        fabric=max((n.fabric for n in networks), key=c.nic_latency_s),
    )
