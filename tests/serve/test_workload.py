"""Arrivals, lengths and traces; bad workloads give one clear error."""

import math
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.serve.config import parse_serve_job
from shardwise.serve.trace import read_trace
from shardwise.serve.workload import arrival_times, build_requests


def wl(**kw):
    return build_requests({"arrival": "poisson", "rate": 4.0, "num_requests": 100, **kw})


@given(rate=st.floats(0.1, 1000), n=st.integers(1, 500), kind=st.sampled_from(["poisson", "gamma", "fixed"]))
@settings(max_examples=40, deadline=None)
def test_last_request_is_sent_at_n_over_rate(rate, n, kind):
    # vllm bench serve rescales cumulative gaps so the last send is at num_requests / rate
    t = arrival_times(kind, rate, n, np.random.default_rng(0), cv=2.0)
    assert t[-1] == pytest.approx(n / rate)
    assert np.all(np.diff(t) >= 0)


def test_gamma_cv_sets_burstiness():
    rng = np.random.default_rng(1)
    gaps = np.diff(arrival_times("gamma", 10.0, 20000, rng, cv=3.0))
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(3.0, rel=0.1)
    gaps = np.diff(arrival_times("poisson", 10.0, 20000, rng))
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.05)


def test_infinite_rate_sends_everything_at_zero():
    r = wl(rate="inf")
    assert np.all(r.arrival_s == 0)


def test_sharegpt_stand_in_matches_published_means():
    r = build_requests({"rate": 1, "num_requests": 20000, "seed": 3})
    assert r.input_len.mean() == pytest.approx(230, rel=0.05)  # 229,711 / 1,000 (vLLM PR #18566)
    assert r.output_len.mean() == pytest.approx(200, rel=0.05)  # 194-203 per request (SGLang, vLLM runs)
    assert r.input_len.max() <= 1024 and (r.input_len + r.output_len).max() <= 2048


def test_same_seed_same_requests_other_seed_differs():
    a, b, c = wl(seed=5), wl(seed=5), wl(seed=6)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_len, b.input_len)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


@pytest.mark.parametrize(
    "block, message",
    [
        ({"rate": -1}, "rate must be positive"),
        ({"rate": 0}, "rate must be positive"),
        ({"rate": "fast"}, "rate must be a number"),
        ({"num_requests": 0}, "greater than 0"),
        ({"arrival": "trace"}, "needs path"),
        ({"input_len": {"dist": "uniform", "min": 10}}, "needs min and max"),
        ({"input_len": {"dist": "uniform", "min": 10, "max": 5}}, "must be <= max"),
        ({"output_len": -3}, "greater than or equal to 1"),
        ({"arrival": "weibull"}, "workload.arrival"),
        ({"rte": 3}, "unknown field"),
    ],
)
def test_bad_workloads_raise_one_clear_error(block, message):
    with pytest.raises(ShardwiseError, match=message):
        wl(**block)


def write(tmp_path, text, name="trace.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_trace_layout(tmp_path):
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.0000000,879,0\n")
    t, inp, out = read_trace(p)
    assert t[1] - t[0] == pytest.approx(4.314579, abs=1e-6)
    assert inp.tolist() == [374, 396, 879]
    assert out.tolist() == [44, 109, 1]  # zero-token replies still return one token
    r = build_requests({"arrival": "trace", "path": str(p)})
    assert r.arrival_s[0] == 0 and len(r) == 3
    scaled = build_requests({"arrival": "trace", "path": str(p), "rate": 1.0})
    assert scaled.arrival_s[-1] == pytest.approx(2.0)  # 2 gaps at 1 req/s


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is empty"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
        ("time,foo,bar\n0,1,2\n", "no input-token column"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,12\n", "line 2: expected 3 columns"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,12,3\nyesterday,4,4\n", "line 3: bad timestamp"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,12.5,3\n", "line 2: input tokens must be a non-negative whole number"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,abc,3\n", "line 2: input tokens must be a non-negative whole number"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,0,3\n", "line 2: a request needs at least 1 input token"),
    ],
)
def test_malformed_traces(tmp_path, text, message):
    with pytest.raises(ShardwiseError, match=message):
        read_trace(write(tmp_path, text))


def test_missing_trace_file():
    with pytest.raises(ShardwiseError, match="trace file not found"):
        build_requests({"arrival": "trace", "path": "/nonexistent/azure.csv"})


def test_job_errors_name_the_field():
    base = {"model": "llama-3.1-8b", "deployment": {"gpu": "a100-80gb"}, "workload": {"rate": 1, "num_requests": 5}}
    with pytest.raises(ShardwiseError, match="unknown GPU 'z100'"):
        from shardwise.serve import simulate

        simulate(parse_serve_job({**base, "deployment": {"gpu": "z100"}}))
    with pytest.raises(ShardwiseError, match="tp: 3 does not divide the 32 attention heads"):
        simulate(parse_serve_job({**base, "deployment": {"gpu": "a100-80gb", "tp": 3}}))
    with pytest.raises(ShardwiseError, match="max_num_batched_tokens .* must be >= max_num_seqs"):
        parse_serve_job({**base, "deployment": {"gpu": "a100-80gb", "engine": {"max_num_batched_tokens": 100}}})
    with pytest.raises(ShardwiseError, match="missing workload"):
        parse_serve_job({"model": "llama-3.1-8b", "deployment": {"gpu": "h100"}})
    with pytest.raises(ShardwiseError, match="exactly one of"):
        parse_serve_job({**base, "deployment": {"gpu": "h100", "prefill": {"gpu": "h100"}, "decode": {"gpu": "h100"}}})
    assert math.isinf(build_requests({"rate": "inf", "num_requests": 2}).mean_rate)


_numeric_stamps = st.floats(0, 1e9, allow_nan=False).map(repr)
_iso_stamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2030, 1, 1)).flatmap(
    lambda d: st.sampled_from([d.isoformat(sep=" "), d.isoformat(), d.strftime("%Y-%m-%d %H:%M:%S") + ".6805909",
                               d.strftime("%Y-%m-%d %H:%M")]))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([_numeric_stamps, _iso_stamps]).flatmap(
    lambda stamps: st.lists(st.tuples(stamps, st.integers(1, 10**5), st.integers(0, 10**5)), min_size=1, max_size=30)),
    st.booleans())
def test_the_column_reader_equals_the_row_reader(rows, spaced):
    """Well-formed traces are read a column at a time; the result equals the row-by-row reader's (which names bad
    lines), times to the microsecond both cut at."""
    from shardwise.serve.trace import _columns_at_once, _columns_row_by_row

    pad = " " if spaced else ""
    body = [[f"{pad}{t}{pad}", f"{pad}{i}", str(o)] for t, i, o in rows]
    fast = _columns_at_once(body, 0, 1, 2)
    slow = _columns_row_by_row(body, ["t", "i", "o"], 0, 1, 2, "trace")
    assert fast is not None
    np.testing.assert_allclose(fast[0] - fast[0][0], slow[0] - slow[0][0], atol=2e-6)
    assert (fast[1] == slow[1]).all() and (fast[2] == slow[2]).all()


@pytest.mark.parametrize("cell", ["2023-11-16 18:15:46+02:00", "2023-11-16T18:15:46Z", "noon", "inf", "-"])
def test_cells_the_column_reader_does_not_take_go_to_the_row_reader(cell):
    from shardwise.serve.trace import _columns_at_once

    assert _columns_at_once([["2023-11-16 18:15:45", "5", "5"], [cell, "5", "5"]], 0, 1, 2) is None
