"""The network model: nccl-tests bus factors, rails, ring vs tree vs NVLS, mesh fabrics, all-to-all."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.comm import bus_factor, collective_s, group_collective_s
from shardwise.cost.constants import NetworkConstants
from shardwise.specs.hardware import make_cluster

# Ideal links: every efficiency 1, no latency: the times are the bandwidth formulas alone.
IDEAL = NetworkConstants(ring_efficiency_nvlink=1.0, ring_efficiency_xgmi=1.0, nvls_efficiency=1.0, tree_efficiency=1.0,
                         nic_efficiency=1.0, link_latency_s=0.0, nic_latency_infiniband_s=0.0, nic_latency_efa_s=0.0,
                         nic_latency_tcpxo_s=0.0, nvls_latency_s=0.0, chunk_latency_s=0.0,
                         a2a_peer_latency_s=0.0)
S = 2.0**30


def busbw_gbyte_s(cluster, kind, n, stride=1, constants=IDEAL, size=S):
    return bus_factor(kind, n) * size / group_collective_s(cluster, kind, size, n, stride, constants) / 1e9


@pytest.mark.parametrize("kind,factor", [("all_reduce", 2 * 7 / 8), ("reduce_scatter", 7 / 8), ("all_gather", 7 / 8),
                                         ("all_to_all", 7 / 8), ("send_recv", 1.0)])
def test_bus_factors_of_nccl_tests(kind, factor):
    """NVIDIA/nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (RS, AG, A2A)."""
    assert bus_factor(kind, 8) == pytest.approx(factor)


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather"])
def test_ring_inside_a_node_runs_at_the_link_rate(kind):
    """One NVSwitch node, NVLS off: ring bus bandwidth = the one-direction NVLink rate (900/2 GB/s)."""
    h100 = make_cluster("H100", 8, network={"nvls": False})
    assert busbw_gbyte_s(h100, kind, 8) == pytest.approx(450.0)


def test_rails_a_node_wide_group_uses_every_nic():
    """8 x 400 Gb/s per node: a DP group holding all 8 GPUs of each node leaves the node at 8 x 50 GB/s
    (NCCL drives every NIC at once), a group with one GPU per node at 50 GB/s (one NIC's share)."""
    h100 = make_cluster("H100", 32, network={"nvls": False})
    assert busbw_gbyte_s(h100, "reduce_scatter", 32) == pytest.approx(400.0)  # 4 nodes x 8: ring
    assert busbw_gbyte_s(h100, "reduce_scatter", 4, stride=8) == pytest.approx(50.0)  # 1 GPU per node
    assert busbw_gbyte_s(h100, "all_gather", 8, stride=4) == pytest.approx(100.0)  # 2 GPUs per node


def test_two_node_tree_carries_each_message_once_across():
    """All-reduce on 2 nodes: the double binary tree sends and receives S once per node, so its bus
    bandwidth is 2(n-1)/n x the node's NIC rate (nccl-tests #196: 'can go beyond the network bottleneck');
    from 3 nodes on interior nodes forward twice and the ring (= NIC rate) is as fast."""
    h100 = make_cluster("H100", 32, network={"nvls": False})
    assert busbw_gbyte_s(h100, "all_reduce", 16) == pytest.approx(2 * 15 / 16 * 400.0)
    assert busbw_gbyte_s(h100, "all_reduce", 32) == pytest.approx(400.0)


def test_sharp_reduces_in_the_switch_at_any_node_count():
    plain = make_cluster("H100", 64, network={"nvls": False})
    sharp = make_cluster("H100", 64, network={"nvls": False, "sharp": True})
    assert busbw_gbyte_s(sharp, "all_reduce", 64) == pytest.approx(2 * 63 / 64 * 400.0)
    assert busbw_gbyte_s(sharp, "all_reduce", 64) > 1.9 * busbw_gbyte_s(plain, "all_reduce", 64)


def test_nvls_all_reduce_and_its_architecture_factor():
    """NVLS: algorithm bandwidth eta_nvls x f_arch x B_link x (k-1)/k (NCCL tuning.cc nvlsEfficiency:
    Hopper 0.85, Blackwell 0.74); the model takes it when faster than the ring and only for all-reduce."""
    h100, b200 = make_cluster("H100", 8), make_cluster("B200", 8)
    assert busbw_gbyte_s(h100, "all_reduce", 8) == pytest.approx(2 * 7 / 8 * 0.85 * 450.0 * 7 / 8)
    assert busbw_gbyte_s(b200, "all_reduce", 8) == pytest.approx(2 * 7 / 8 * 0.74 * 900.0 * 7 / 8)
    assert busbw_gbyte_s(h100, "all_gather", 8) == pytest.approx(450.0)


@pytest.mark.parametrize("gpu,first", [("H100", 5), ("H200", 5), ("B200", 6)])
def test_nvls_takes_over_where_nccl_switches(gpu, first):
    """With the shipped constants NVLS beats the ring from 5 GPUs on Hopper and from 6 on B200, as NCCL
    selects it (NCCL issue #1455: ring-like ~370 GB/s up to 4 GPUs; stas00/ml-engineering: H200 from 5,
    B200 'NVLS only selected from 6 GPUs')."""
    on, off = make_cluster(gpu, 8), make_cluster(gpu, 8, network={"nvls": False})
    faster = [k for k in range(2, 9) if group_collective_s(on, "all_reduce", 8 * S, k, 1) < group_collective_s(off, "all_reduce", 8 * S, k, 1)]
    assert faster == list(range(first, 9))


def test_mesh_fabric_gives_a_small_group_only_its_peer_links():
    """MI300X: seven point-to-point Infinity Fabric links; 2 of 8 GPUs use one (stas00/ml-engineering:
    48 GB/s on 2 GPUs vs 313 on 8)."""
    mi = make_cluster("MI300X", 8)
    assert busbw_gbyte_s(mi, "all_reduce", 8) / busbw_gbyte_s(mi, "all_reduce", 2) == pytest.approx(7.0)


def test_all_to_all_is_bound_by_the_slower_level():
    """EP 16 on 2 nodes of 8: each rank sends 7/16 of S over NVLink and 8/16 through its NIC share."""
    h800 = make_cluster("H800", 16)
    t = group_collective_s(h800, "all_to_all", S, 16, 1, IDEAL)
    assert t == pytest.approx(max(S * 7 / 16 / 200e9, S * 8 / 16 / 50e9))
    assert group_collective_s(h800, "all_to_all", S, 8, 1, IDEAL) == pytest.approx(S * 7 / 8 / 200e9)


def test_latency_steps_of_ring_and_tree():
    """tuning.cc: a ring all-reduce takes 2(n-1) steps, 2(N-1) of them across nodes; the tree
    2((k-1) + ceil(log2 N)) steps; a 1-byte all-reduce on 64 nodes x 8 takes the tree."""
    lat = NetworkConstants(link_latency_s=1e-6, nic_latency_infiniband_s=10e-6, ll_nic_latency_infiniband_s=10e-6, chunk_latency_s=0.0)
    one = make_cluster("A100-80GB", 8)
    assert collective_s("all_reduce", 1.0, 8, one.tier_for(8, 1), lat) == pytest.approx(14e-6, rel=1e-3)
    wide = make_cluster("A100-80GB", 512)
    tree = 2 * (7 * 1e-6 + 6 * 10e-6)
    assert collective_s("all_reduce", 1.0, 512, wide.tier_for(512, 1), lat) == pytest.approx(tree, rel=1e-3)


def test_broadcast_is_a_pipelined_chain_with_one_step_per_rank():
    """nccl-tests: broadcast busbw = algbw (bus factor 1), at the ring's rate; tuning.cc: n steps, N of
    them across nodes. 4 nodes x 8 at 400 GB/s per node: S / 400 GB/s; 1-byte latency 28 x 1 + 4 x 10 us."""
    h100 = make_cluster("H100", 32, network={"nvls": False})
    assert bus_factor("broadcast", 32) == 1.0
    assert group_collective_s(h100, "broadcast", S, 32, 1, IDEAL) == pytest.approx(S / 400e9)
    assert group_collective_s(h100, "broadcast", S, 8, 1, IDEAL) == pytest.approx(S / 450e9)
    lat = NetworkConstants(link_latency_s=1e-6, nic_latency_infiniband_s=10e-6, ll_nic_latency_infiniband_s=10e-6, chunk_latency_s=0.0)
    assert group_collective_s(h100, "broadcast", 1.0, 32, 1, lat) == pytest.approx(28e-6 + 40e-6, rel=1e-3)
    assert group_collective_s(h100, "broadcast", 1.0, 8, 1, lat) == pytest.approx(8e-6, rel=1e-3)


def test_small_messages_take_the_ll_protocol_where_the_bulk_one_waits_longer():
    """NCCL's tuner times every protocol and takes the fastest (tuning.cc): LL moves a quarter of the bulk
    protocol's ring bus bandwidth (its ring LL factor 1/4) with no per-chunk handshake, at its own per-step
    latency. On a fabric whose bulk steps are slow (GPUDirect-TCPXO: 400 us, LL 50 us here), an 8-byte
    all-reduce over 2 x 8 ranks is the LL ring's latency, 28 NVLink steps and 2 network steps; a 1 GiB one
    is the bulk protocol's, four times faster per byte."""
    c = NetworkConstants(link_latency_s=1e-6, nic_latency_tcpxo_s=400e-6, ll_nic_latency_tcpxo_s=50e-6, chunk_latency_s=0.0,
                         nic_efficiency=1.0, ring_efficiency_nvlink=1.0, ll_bandwidth_fraction=0.25)
    a3 = make_cluster("H100", 16, network={"fabric": "tcpxo", "nics_per_node": 8, "nic_gbps": 200, "nvls": False})
    g = a3.tier_for(16, 1)
    assert collective_s("all_reduce", 8.0, 16, g, c) == pytest.approx(28e-6 + 2 * 50e-6, rel=1e-3)
    big = 2.0**30
    bulk = collective_s("all_reduce", big, 16, g, c, latency=False)
    assert collective_s("all_reduce", big, 16, g, c) < 1.01 * bulk + 2 * 400e-6 + 28e-6
    ll_only = replace(c, nic_latency_tcpxo_s=1.0)  # bulk unusable: every size goes by LL
    ring_ll = 28e-6 + 2 * 50e-6 + 2 * 15 / 16 * big / (0.25 * 8 * 25e9)  # the ring leaves a node through its 8 NICs
    assert collective_s("all_reduce", big, 16, g, ll_only) == pytest.approx(ring_ll, rel=1e-3)


def test_trivial_groups_cost_nothing():
    h100 = make_cluster("H100", 16)
    assert collective_s("all_reduce", 1e9, 1, h100.tier_for(1, 1)) == 0.0
    assert collective_s("all_gather", 0.0, 8, h100.tier_for(8, 1)) == 0.0
    assert group_collective_s(h100, "all_reduce", np.array([1e9, 0.0]), np.array([1, 8]), np.array([1, 1])).tolist() == [0.0, 0.0]


def test_latency_false_is_the_transfer_alone():
    h100 = make_cluster("H100", 16)
    g = h100.tier_for(16, 1)
    assert collective_s("all_reduce", S, 16, g, latency=False) < collective_s("all_reduce", S, 16, g)
    assert collective_s("all_reduce", S, 16, g, IDEAL) == pytest.approx(collective_s("all_reduce", S, 16, g, IDEAL, latency=False))


CLUSTERS = [make_cluster("H100", 256), make_cluster("A100-80GB", 64), make_cluster("MI300X", 64), make_cluster("GB200", 288),
            make_cluster("B200", 64, network={"fabric": "efa"}), make_cluster("L40S", 32)]
KINDS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv", "broadcast"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(CLUSTERS))), st.sampled_from(KINDS), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6),
       st.floats(1e3, 1e11)), min_size=1, max_size=6))
def test_vectorised_equals_scalar(ci, kind, groups):
    """The planner's numpy path and the estimate's scalar path give the same times."""
    cluster = CLUSTERS[ci]
    n = np.array([2 if kind == "send_recv" else 2**a for a, _, _ in groups])
    stride = np.array([2**b for _, b, _ in groups])
    size = np.array([s for *_, s in groups])
    vec = group_collective_s(cluster, kind, size, n, stride)
    one = [group_collective_s(cluster, kind, float(s), int(k), int(d)) for s, k, d in zip(size, n, stride, strict=True)]
    assert vec == pytest.approx(one, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(CLUSTERS))), st.sampled_from(KINDS), st.integers(1, 7), st.integers(0, 5), st.floats(1e3, 1e10))
def test_time_grows_with_size_and_bandwidth_stays_physical(ci, kind, a, b, size):
    cluster = CLUSTERS[ci]
    n = 2 if kind == "send_recv" else 2**a
    t1 = group_collective_s(cluster, kind, size, n, 2**b)
    t2 = group_collective_s(cluster, kind, 2 * size, n, 2**b)
    assert 0 < t1 < t2 <= 2 * t1 + 1e-12
    net = cluster.network
    peak = max(net.nvlink_gbyte_s / 2, net.nics_per_node * net.nic_gbps / 8) * 1e9
    assert bus_factor(kind, n) * size / t1 <= 2 * peak  # in-network reduction at most halves the traffic


def test_more_nic_bandwidth_never_slows_a_collective():
    slow, fast = make_cluster("H100", 64, network={"nic_gbps": 200}), make_cluster("H100", 64, network={"nic_gbps": 400})
    for kind in KINDS:
        n = 2 if kind == "send_recv" else 64
        assert group_collective_s(fast, kind, S, n, 8 if kind == "send_recv" else 1) <= group_collective_s(slow, kind, S, n, 8 if kind == "send_recv" else 1)
    assert not math.isnan(group_collective_s(fast, "all_reduce", S, 64, 1))
