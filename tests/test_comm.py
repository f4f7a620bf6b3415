"""Collective costs: the nccl-tests bus-bandwidth factors."""

import pytest

from shardwise.cost.comm import collective_s
from shardwise.specs.hardware import NetworkTier

TIER = NetworkTier(name="t", size=8, gbyte_s=100.0, latency_s=0.0, efficiency=1.0)


@pytest.mark.parametrize("kind,factor", [("all_reduce", 2 * 7 / 8), ("reduce_scatter", 7 / 8), ("all_gather", 7 / 8), ("all_to_all", 7 / 8), ("send_recv", 1.0)])
def test_bandwidth_factors(kind, factor):
    assert collective_s(kind, 1e9, 8 if kind != "send_recv" else 2, TIER) == pytest.approx(factor * 1e9 / 100e9)


def test_latency_ring_vs_tree_and_trivial_groups():
    lat = NetworkTier(name="t", size=8, gbyte_s=1e9, latency_s=1e-5, efficiency=1.0)
    assert collective_s("all_reduce", 1.0, 8, lat) == pytest.approx(2 * 7 * 1e-5, rel=1e-3)
    wide = NetworkTier(name="w", size=2**62, gbyte_s=1e9, latency_s=1e-5, efficiency=1.0)
    assert collective_s("all_reduce", 1.0, 1024, wide) == pytest.approx(2 * 10 * 1e-5, rel=1e-3)
    assert collective_s("all_reduce", 1e9, 1, TIER) == 0.0
