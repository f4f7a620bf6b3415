"""Property tests: every generated schedule validates, respects the lower bounds, round-trips."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.pipeline import (
    check_schedule,
    generate_schedule,
    list_schedules,
    read_csv_text,
    simulate,
    write_csv_text,
)
from shardwise.pipeline.auto import auto_schedule

NAMED = [n for n in list_schedules() if n != "auto"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def admitted(name: str, pp: int, m: int, vpp: int) -> bool:
    """The documented admission rules (see registry and generators)."""
    if name in ("gpipe", "1f1b", "zb-h2"):
        return vpp == 1
    if name == "interleaved":
        return vpp >= 2 and m % max(1, m // pp) == 0
    if name == "zb-h1":
        return vpp == 1 or m % max(1, m // pp) == 0
    if name == "bfs":
        return True
    if name == "dualpipev":
        return vpp in (1, 2) and m >= 2 * pp
    return vpp in (1, 2)  # zbv, v-half, v-min


def lower_bound(sched, f, i, w, p2p):
    """No schedule can beat the busiest rank's compute, nor one micro-batch's trip down and back."""
    S = sched.num_stages
    s2r = sched.stage_to_rank
    busy = [0.0] * sched.pp
    for s in range(S):
        busy[s2r[s]] += sched.microbatches * (f[s] + i[s] + w[s])
    hops = sum(1 for s in range(S - 1) if s2r[s] != s2r[s + 1])
    chain = float(np.sum(f) + np.sum(i) + w[0] + 2 * hops * p2p)
    return max(max(busy), chain)


@SETTINGS
@given(
    name=st.sampled_from(NAMED),
    pp=st.integers(1, 6),
    m=st.integers(1, 20),
    vpp=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    p2p=st.sampled_from([0.0, 0.05, 0.5]),
)
def test_generated_schedules_validate_and_respect_lower_bounds(name, pp, m, vpp, seed, p2p):
    try:
        sched = generate_schedule(name, pp, m, vpp)
    except ShardwiseError:
        assert not admitted(name, pp, m, vpp)
        return
    assert admitted(name, pp, m, vpp)
    assert check_schedule(sched) == []
    rng = np.random.default_rng(seed)
    S = sched.num_stages
    f, i, w = (rng.uniform(0.2, 2.0, S) for _ in range(3))
    res = simulate(sched, f, i, w, p2p_s=p2p)
    lb = lower_bound(sched, f, i, w, p2p)
    assert res.makespan >= max(res.rank_busy) - 1e-9
    assert res.makespan >= lb - 1e-9
    assert all(span <= res.makespan + 1e-9 for span in res.rank_spans)
    assert 0.0 <= res.bubble_fraction < 1.0 and res.bubble_ratio >= 0.0 and 0.0 <= res.stage_bubble_ratio < 1.0
    assert res.bubble_ratio == pytest.approx(res.bubble_fraction / (1 - res.bubble_fraction), rel=1e-9, abs=1e-12)
    per_rank_stages = S // pp if pp else 1
    assert all(1.0 <= p <= m * per_rank_stages for p in res.peak_activation_microbatches if m)
    # same input, same output
    again = simulate(generate_schedule(name, pp, m, vpp), f, i, w, p2p_s=p2p)
    assert again.makespan == res.makespan and again.peak_activation == res.peak_activation


@SETTINGS
@given(name=st.sampled_from(NAMED), pp=st.integers(1, 5), m=st.integers(1, 16))
def test_csv_export_import_is_identical(name, pp, m):
    try:
        sched = generate_schedule(name, pp, m)
    except ShardwiseError:
        return
    assert read_csv_text(write_csv_text(sched), microbatches=m) == sched


@SETTINGS
@given(
    pp=st.integers(2, 5),
    m=st.integers(2, 16),
    cap_extra=st.integers(0, 4),
    seed=st.integers(0, 2**16),
    p2p=st.sampled_from([0.0, 0.1]),
)
def test_auto_respects_its_cap_and_beats_what_fits(pp, m, cap_extra, seed, p2p):
    rng = np.random.default_rng(seed)
    f, i, w = (rng.uniform(0.5, 1.5, pp) for _ in range(3))
    cap = min(pp + cap_extra, 2 * pp)
    sched = auto_schedule(pp, m, 1, f, i, w, p2p, mem_cap=cap)
    assert check_schedule(sched) == []
    res = simulate(sched, f, i, w, p2p_s=p2p)
    assert max(res.peak_activation_microbatches) <= cap + 1e-9
    for name in ("1f1b", "zb-h1"):
        other = simulate(generate_schedule(name, pp, m), f, i, w, p2p_s=p2p)
        if max(other.peak_activation_microbatches) <= cap:
            assert res.makespan <= other.makespan + 1e-9
