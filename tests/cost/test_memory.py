"""Model-state memory by placement, pinned to the ZeRO paper's Figure 1."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise.cost.memory import Placement, model_state_bytes, zero_placements


@pytest.mark.parametrize("stage,printed_gb", [(0, "120"), (1, "31.4"), (2, "16.6"), (3, "1.9")])
def test_zero_figure1(stage, printed_gb):
    """Psi = 7.5B, N_d = 64, K = 12: 120, 31.4, 16.6, 1.9 GB (exact to the printed precision)."""
    got = model_state_bytes(7.5e9, 64, stage, weight_bytes=2, grad_bytes=2, optimizer_bytes=12).total / 1e9
    decimals = len(printed_gb.split(".")[1]) if "." in printed_gb else 0
    assert round(got, decimals) == float(printed_gb)


def test_placements_per_stage():
    assert zero_placements(0) == {k: Placement.REPLICATED for k in ("weights", "grads", "optimizer")}
    assert zero_placements(1)["optimizer"] is Placement.SHARDED
    assert zero_placements(2)["grads"] is Placement.SHARDED
    assert zero_placements(3)["weights"] is Placement.GATHERED_ON_USE


def test_megatron_18_bytes_per_param():
    """bf16 weights, fp32 main grads, Adam fp32 states: 18 B/param (Korthikanti Fig. 1: 45.56 GiB for 22B/TP8)."""
    layers_params = 12 * 48 * 6144**2 / 8  # the figure counts the transformer layers on one TP rank
    assert model_state_bytes(layers_params, 1, 0, 2, 4, 12).total / 2**30 == pytest.approx(45.5625, rel=1e-4)


@given(params=st.floats(1e6, 1e12), dp=st.integers(1, 512), zero=st.integers(0, 3))
def test_memory_never_grows_with_more_sharding(params, dp, zero):
    a = model_state_bytes(params, dp, zero).total
    assert model_state_bytes(params, dp * 2, zero).total <= a
    if zero < 3:
        assert model_state_bytes(params, dp, zero + 1).total <= a
