"""The device model's GEMM timing (shardwise.cost.device): roofline with a short-dimension cost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.device import Device

D0 = 64.0
H100_LIKE = Device(peak_flops=989.4e12, attention_peak_flops=989.4e12, hbm_bytes_s=3.35e12, gemm_efficiency=0.7,
                   gemm_overhead_s=5e-6, gemm_dim_offset=D0, attention_efficiency=0.7, memory_efficiency=0.8,
                   kernel_overhead_s=4e-6)


def test_a_compute_bound_gemm_works_as_if_each_dimension_were_d0_longer():
    # 8192^3: 2 * 8192^3 * (1 + 64 * 3 / 8192) FLOPs at 0.7 * 989.4 TFLOP/s, plus the 5 us launch
    expected = 2 * 8192**3 * (1 + 3 * D0 / 8192) / (0.7 * 989.4e12) + 5e-6
    assert H100_LIKE.gemm_s(8192, 8192, 8192) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.6298e-3, rel=1e-4)


def test_a_short_dimension_costs_the_same_wherever_it_is():
    times = {H100_LIKE.gemm_s(*shape) for shape in ((1024, 8192, 65536), (65536, 1024, 8192), (8192, 65536, 1024))}
    assert max(times) == pytest.approx(min(times), rel=1e-12)
    # the same FLOPs with one dimension of 1024: (1 + d0 (1/1024 + 1/8192 + 1/65536)) / (1 + 3 d0 / 8192) slower
    slow = (H100_LIKE.gemm_s(1024, 8192, 65536) - 5e-6) / (H100_LIKE.gemm_s(8192, 8192, 8192) - 5e-6)
    assert slow == pytest.approx((1 + D0 * (1 / 1024 + 1 / 8192 + 1 / 65536)) / (1 + 3 * D0 / 8192), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(m=st.integers(256, 65536), n=st.integers(256, 65536), k=st.integers(256, 65536))
def test_achieved_rate_rises_with_every_dimension_and_never_passes_the_asymptote(m, n, k):
    def rate(mm, nn, kk):
        return 2.0 * mm * nn * kk / (H100_LIKE.gemm_s(mm, nn, kk) - H100_LIKE.gemm_overhead_s)
    base = rate(m, n, k)
    assert base <= 0.7 * 989.4e12 * (1 + 1e-12)
    for bigger in ((2 * m, n, k), (m, 2 * n, k), (m, n, 2 * k)):
        assert rate(*bigger) >= base * (1 - 1e-12)
