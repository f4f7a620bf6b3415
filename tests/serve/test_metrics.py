"""Metric definitions on hand-worked examples, as `vllm bench serve` computes them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.serve.config import EngineSpec, SLOSpec
from shardwise.serve.constants import ServingConstants
from shardwise.serve.deploy import make_pool
from shardwise.serve.metrics import compute_metrics, weighted_percentile
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import ServeSimResult
from shardwise.serve.state import ITLRecord
from shardwise.specs.model_ref import load_model
from tests.serve.conftest import make_requests


def hand_result():
    """Sent at 0, 1, 2 s; outputs 1, 5, 11 tokens; first tokens at 0.1, 1.3, 2.2 s; last at 0.1, 1.7, 3.2 s."""
    req = make_requests([0.0, 1.0, 2.0], [10, 20, 30], [1, 5, 11])
    itl = ITLRecord()
    itl.add_array(np.array([0.1, 0.1, 0.1, 0.1]), 1)
    itl.add_array(np.full(10, 0.1), 1)
    pool = make_pool("p", load_model("llama-3.1-8b"), Precision(), "a100-80gb", 1, 1, 1, EngineSpec(), ServingConstants())
    return ServeSimResult(req, np.array([0.1, 1.3, 2.2]), np.array([0.1, 1.7, 3.2]), np.zeros(3, int), itl, [pool], "colocated")


def test_ttft_tpot_e2e_by_hand():
    m = compute_metrics(hand_result())
    assert m["ttft_ms"]["mean"] == pytest.approx(200) and m["ttft_ms"]["median"] == pytest.approx(200)
    # TPOT excludes the first token: (1.7-1.3)/4 = (3.2-2.2)/10 = 100 ms; the 1-token request is left out
    assert m["tpot_ms"]["mean"] == pytest.approx(100) and m["tpot_ms"]["p99"] == pytest.approx(100)
    assert m["e2e_ms"]["median"] == pytest.approx(700)
    assert m["itl_ms"]["median"] == pytest.approx(100)
    assert m["duration_s"] == pytest.approx(3.2)
    assert m["request_throughput"] == pytest.approx(3 / 3.2)
    assert m["output_tokens_per_s"] == pytest.approx(17 / 3.2)
    assert m["total_tokens_per_s"] == pytest.approx(77 / 3.2)


def test_goodput_counts_requests_meeting_every_slo():
    # TTFTs 100, 300, 200 ms; TPOTs 0 (one token), 100, 100 ms -> requests 0 and 2 are good (SLO >= metric)
    m = compute_metrics(hand_result(), SLOSpec(ttft_ms=250, tpot_ms=100))
    assert m["goodput"] == pytest.approx(2 / 3.2)
    assert m["slo_attainment"] == pytest.approx(2 / 3)
    assert m["slo_met"] is False  # 67% < the 90% default
    m = compute_metrics(hand_result(), SLOSpec(tpot_ms=99))
    assert m["slo_attainment"] == pytest.approx(1 / 3)


def test_cost_per_token_convention():
    m = compute_metrics(hand_result())
    cost = 5.12 * 3.2 / 3600  # one A100-80GB at the catalog price for 3.2 s
    assert m["cost_usd"] == pytest.approx(cost)
    assert m["cost_usd_per_mtok_output"] == pytest.approx(cost / (17 + 60 / 4) * 1e6)
    assert m["cost_usd_per_mtok_input"] == pytest.approx(m["cost_usd_per_mtok_output"] / 4)


@given(st.lists(st.tuples(st.floats(0, 1e3, allow_nan=False), st.integers(1, 5)), min_size=1, max_size=40),
       st.sampled_from([50, 90, 99, 0, 100]))
@settings(max_examples=60, deadline=None)
def test_weighted_percentile_equals_numpy_on_the_expanded_samples(pairs, q):
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs])
    assert weighted_percentile(v, w.astype(float), q) == pytest.approx(np.percentile(np.repeat(v, w), q), rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["value", "array", "ramp"]), st.floats(0.0, 1.0), st.floats(0.0, 1e-3),
                          st.integers(0, 1), st.integers(0, 12), st.integers(0, 5)), max_size=12))
def test_ramps_expand_to_the_arrays_they_stand_for(records):
    """A decode stretch records its gaps first + slope*j as a ramp; samples() must give the floats (and
    order) that recording numpy's first + slope*arange(n)[start:] as an array gives."""
    lazy, eager = ITLRecord(), ITLRecord()
    for kind, first, slope, start, count, weight in records:
        if kind == "value":
            lazy.add(first, weight)
            eager.add(first, weight)
        elif kind == "array":
            arr = np.linspace(first, first + 1.0, count)
            lazy.add_array(arr, weight)
            eager.add_array(arr, weight)
        else:
            lazy.add_ramp(first, slope, start, count, weight)
            eager.add_array((first + slope * np.arange(start + count))[start:], weight)
    (lv, lw), (ev, ew) = lazy.samples(), eager.samples()
    assert lv.tolist() == ev.tolist() and lw.tolist() == ew.tolist()
