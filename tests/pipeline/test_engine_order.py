"""The timing pass in a precomputed visit order (pipeline/engine.py) against the event loop it replaced.

The reference below is the event loop as the engine ran it until 2026-12 (kept here only as the oracle):
ranks taken from a stack, each running its compute actions until one waits on an unfinished dependency.
On random durations, hop times and activations, for every registered schedule, the fast path must give
the same start of every action (exactly: the same float operations in the same order) and the same
summary figures, and its one-pass timing without hops must equal a second simulation at ``p2p_s = 0``;
the summary without per-action times (``timeline=False``) must equal the full pass's figures exactly.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.pipeline import generate_schedule, list_schedules, simulate
from shardwise.pipeline.engine import compile_schedule
from shardwise.pipeline.ir import F_CODE, Schedule, make_schedule

NAMED = [n for n in list_schedules() if n != "auto"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_starts(sched: Schedule, f: list[float], i: list[float], w: list[float], b: list[float],
                     p2p: float | list[float]) -> tuple[list[list[float]], list[int]]:
    """The event loop: per rank the start of each compute action and how many completed. ``f``, ``i``, ``w``,
    ``b``: durations per stage; ``p2p``: one hop time, or one per stage boundary."""
    comp = compile_schedule(sched)
    S = sched.num_stages
    table = [f, i, w, b]
    R = sched.pp
    durs, lats = [], []
    for r in range(R):
        k, s = comp.kind[r].tolist(), comp.stage[r].tolist()
        durs.append([table[kk][ss] for kk, ss in zip(k, s)])
        lat = []
        for kk, ss, c in zip(k, s, comp.cross[r].tolist()):
            boundary = min(max(ss - 1 if kk == F_CODE else ss, 0), max(S - 2, 0))
            hop = p2p if np.ndim(p2p) == 0 else (p2p[boundary] if S > 1 else 0.0)
            lat.append(c * hop)
        lats.append(lat)
    end = [-1.0] * (3 * S * sched.microbatches)
    waiter = [-1] * len(end)
    ptr, tfree = [0] * R, [0.0] * R
    starts = [[0.0] * len(d) for d in comp.dep]
    stack = list(range(R - 1, -1, -1))
    while stack:
        r = stack.pop()
        j, t = ptr[r], tfree[r]
        while j < len(comp.dep[r]):
            d = comp.dep[r][j]
            if d >= 0:
                e = end[d]
                if e < 0.0:
                    waiter[d] = r
                    break
                t = max(t, e + lats[r][j])
            starts[r][j] = t
            t += durs[r][j]
            o = comp.out[r][j]
            end[o] = t
            if waiter[o] >= 0:
                stack.append(waiter[o])
                waiter[o] = -1
            j += 1
        ptr[r], tfree[r] = j, t
    return [s[:p] for s, p in zip(starts, ptr)], ptr


def _vals(rng: np.random.Generator, S: int, integer: bool) -> list[float]:
    """Random per-stage values; integers make ties (equal ends) common, which is where orders matter."""
    return (rng.integers(0, 4, S).astype(float) if integer else rng.uniform(0.0, 3.0, S)).tolist()


@SETTINGS
@given(name=st.sampled_from(NAMED), pp=st.integers(1, 6), m=st.integers(1, 24), vpp=st.integers(1, 3),
       seed=st.integers(0, 2**16), integer=st.booleans(), per_boundary=st.booleans(),
       rho=st.sampled_from([0.0, 0.9, 1.0]))
def test_fast_pass_equals_the_event_loop(name, pp, m, vpp, seed, integer, per_boundary, rho):
    try:
        sched = generate_schedule(name, pp, m, vpp)
    except ShardwiseError:
        return  # a count or vpp this schedule does not admit
    S = sched.num_stages
    rng = np.random.default_rng(seed)
    f, i, w, act = (_vals(rng, S, integer) for _ in range(4))
    p2p = _vals(rng, max(S - 1, 1), integer)[:S - 1] if per_boundary and S > 1 else float(rng.integers(0, 3))
    res = simulate(sched, f, i, w, p2p, act, rho, without_hops=True)
    b = [x + y for x, y in zip(i, w)]
    ref, progress = reference_starts(sched, f, i, w, b, p2p)
    assert progress == [len(x) for x in res.starts]
    for r in range(pp):
        assert res.starts[r].tolist() == ref[r]  # exactly
        assert res.ends[r].tolist() == (np.asarray(ref[r]) + np.asarray([[f, i, w, b][k][s] for s, _, k in res.actions[r].tolist()])).tolist()
    # summaries as the loop's consumers computed them from per-rank arrays
    spans = [float(e.max() - s.min()) if len(s) else 0.0 for s, e in zip(res.starts, res.ends)]
    assert res.rank_spans == spans
    busy = [float((e - s).sum()) for s, e in zip(res.starts, res.ends)]
    assert res.rank_busy == pytest.approx(busy, rel=1e-12, abs=1e-12)
    first = min(float(s.min()) for s in res.starts if len(s))
    last = max(float(e.max()) for e in res.ends if len(e))
    assert res.makespan == last - first
    for r in range(pp):
        deltas = {0: act, 1: [-(1 - rho) * x for x in act], 2: [-rho * x for x in act], 3: [-x for x in act]}
        seq = [deltas[k][s] for s, _, k in res.actions[r].tolist()]
        assert res.peak_activation[r] == max([0.0, *np.cumsum(seq).tolist()])
    plain = simulate(sched, f, i, w, p2p, act, rho)  # the pass without the second timing
    assert [x.tolist() for x in plain.starts] == ref and plain.without_hops is None
    free = simulate(sched, f, i, w, 0.0, act, rho)
    assert res.without_hops == (free.makespan, free.stage_span)
    # the summary alone (no per-action times: the estimate's pass) gives every figure exactly as the full pass
    summary = simulate(sched, f, i, w, p2p, act, rho, without_hops=True, timeline=False)
    assert summary.starts == summary.ends == summary.actions == []
    assert summary == replace(res, starts=[], ends=[], actions=[])


def test_a_deadlock_is_found_by_the_structure_alone():
    """Two ranks each waiting for the other's backward: no durations are needed to see it."""
    ranks = [[0, 0, 0, 0, 0, 3], [1, 0, 3, 1, 0, 0]]  # rank 1 runs B before its F: B waits for F, F never runs
    sched = make_schedule("stuck", 2, 1, (0, 1), ranks)
    comp = compile_schedule(sched)
    assert comp.deadlocked
    assert reference_starts(sched, [1.0] * 2, [1.0] * 2, [1.0] * 2, [2.0] * 2, 0.0)[1] == list(comp.progress)
    with pytest.raises(ShardwiseError, match="deadlocks"):
        simulate(sched)
