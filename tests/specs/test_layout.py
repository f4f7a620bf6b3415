"""The rank grid of a Layout: one stride rule for every dimension, the same for one plan and for arrays of plans."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.specs.layout import DIMS, ORDERS, Layout
from shardwise.specs.training import TrainPlan


def groups_of(layout: Layout, dim: str) -> list[list[int]]:
    """Every `dim` group as rank lists, built from the grid: the ranks that differ only in their `dim` coordinate."""
    order = next(o for o in ORDERS if dim in o)
    sizes = [int(layout.group(d)) for d in order]
    strides = [int(layout.stride(d)) for d in order]
    out = {}
    for coords in itertools.product(*(range(s) for s in sizes)):
        rank = sum(c * s for c, s in zip(coords, strides, strict=True))
        key = tuple(c for c, d in zip(coords, order, strict=True) if d != dim)
        out.setdefault(key, []).append(rank)
    return sorted(out.values())


def test_megatron_docstring_example():
    """megatron/core/parallel_state.py initialize_model_parallel's example: 16 GPUs, tp 2, pp 4 (so dp 2):
    TP groups [0, 1], [2, 3], ...; DP groups [0, 2], [1, 3], [4, 6], ...; PP groups [0, 4, 8, 12], [1, 5, 9, 13], ..."""
    layout = Layout(tp=2, dp=2, pp=4)
    assert groups_of(layout, "tp")[:2] == [[0, 1], [2, 3]]
    assert groups_of(layout, "dp")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert groups_of(layout, "pp")[:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]


degrees = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=60, deadline=None)
@given(tp=degrees, cp=degrees, dp=degrees, pp=st.sampled_from([1, 2, 3]), ep=degrees, etp=degrees, uly=degrees, shard=degrees)
def test_every_order_numbers_each_rank_once(tp, cp, dp, pp, ep, etp, uly, shard):
    """In each order the coordinates map onto 0..world-1 one to one (where the sizes divide), the pipeline
    stride is the stage's rank count, and every order agrees on pp."""
    if (tp * cp * dp) % (ep * etp) or cp % uly or (dp * cp) % shard:
        return
    layout = Layout(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp, ulysses=uly, dp_shard=shard)
    for order in ORDERS:
        sizes = [int(layout.group(d)) for d in order]
        assert np.prod(sizes) == layout.world
        ranks = sorted(sum(c * int(layout.stride(d)) for c, d in zip(coords, order, strict=True))
                       for coords in itertools.product(*(range(s) for s in sizes)))
        assert ranks == list(range(layout.world))
    assert layout.stride("pp") == tp * cp * dp


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(degrees, degrees, degrees, st.sampled_from([1, 2, 4])), min_size=1, max_size=6))
def test_arrays_give_each_plans_scalars(rows):
    """A layout of arrays answers, element by element, what each plan's own layout answers."""
    tp, cp, dp, pp = (np.array(x) for x in zip(*rows, strict=True))
    many = Layout(tp=tp, cp=cp, dp=dp, pp=pp)
    for dim in DIMS:
        got = np.broadcast_to(many.stride(dim), tp.shape)
        want = [Layout(tp=a, cp=b, dp=c, pp=d).stride(dim) for a, b, c, d in rows]
        assert got.tolist() == want
    picked = many.take(np.array([len(rows) - 1, 0]))
    assert picked.tp.tolist() == [rows[-1][0], rows[0][0]]


def test_train_plan_strides_are_the_layouts():
    plan = TrainPlan(tp=4, cp=2, dp=8, pp=4, ep=8, etp=1, zero=1)
    layout = Layout.of(plan)
    assert [plan.stride(d) for d in DIMS] == [layout.stride(d) for d in DIMS]
    assert plan.stride("ep") == 1 and plan.stride("edp") == 8 and plan.stride("pp") == 64


def test_unknown_dimension_is_refused():
    with pytest.raises(ShardwiseError, match="no rank dimension 'xp'"):
        Layout().stride("xp")
    with pytest.raises(ShardwiseError, match="no rank dimension"):
        Layout().group("xp")
