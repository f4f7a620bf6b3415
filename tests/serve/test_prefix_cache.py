"""Prefix caching: content-keyed blocks, LRU eviction tail first, multi-turn conversations, the report."""

import numpy as np
import pytest

from shardwise.serve.config import EngineSpec, load_serve_job, parse_serve_job
from shardwise.serve.prefix_cache import PrefixCache
from shardwise.serve.report import simulation_report
from shardwise.serve.workload import Requests, build_requests
from tests.serve.conftest import ROOT, run_engine


def test_blocks_freed_tail_first_are_evicted_tail_first():
    cache = PrefixCache(16, 0, [0], [7])
    assert cache.insert(0, 0, 4) == (0, 0)
    freed, _ = cache.release(0, 4)
    assert freed == 4
    cache.evict(1)  # the last block of the prefix goes first
    assert cache.longest(0, 10) == 3
    cache.evict(2)
    assert cache.longest(0, 10) == 1


def test_a_second_turn_reuses_the_first_turns_prompt_and_reply():
    """Turn 1: 100-token prompt, 40-token reply; turn 2 (its prompt repeats 140 tokens, adds 30) reuses the
    8 full blocks of the first 140 tokens (128 tokens) and computes 42."""
    req = Requests(np.array([0.0, 5.0]), np.array([100, 170]), np.array([40, 5]), 0, np.zeros(2, np.int64), None, np.array([3, 3]))
    table, eng = run_engine(req, EngineSpec(prefix_caching=True, block_size=16))
    assert table.prefix_hit[1] >= 128  # its hit, then its own prompt's full blocks
    assert eng.cache.hit_tokens == 128
    assert eng.cache.query_tokens == 270
    other = Requests(np.array([0.0, 5.0]), np.array([100, 170]), np.array([40, 5]), 0, np.zeros(2, np.int64), None, np.array([3, 4]))
    _, eng2 = run_engine(other, EngineSpec(prefix_caching=True, block_size=16))
    assert eng2.cache.hit_tokens == 0  # another conversation shares nothing


def test_memory_pressure_evicts_and_lowers_the_hit_rate():
    wl = {"rate": 4, "num_requests": 400, "input_len": 200, "output_len": 100, "prefix_len": 512,
          "sessions": {"turns": 4, "turn_gap_s": 30}}
    req = build_requests(wl)
    roomy = run_engine(req, EngineSpec(prefix_caching=True), blocks=200_000)[1].cache
    tight = run_engine(req, EngineSpec(prefix_caching=True), blocks=2_000)[1].cache
    assert roomy.evicted == 0 and tight.evicted > 0
    assert tight.hit_tokens < roomy.hit_tokens


def test_conversations_grow_their_prompts_turn_by_turn():
    req = build_requests({"rate": 2, "num_requests": 6, "input_len": 50, "output_len": 20, "prefix_len": 100,
                          "sessions": {"turns": 3, "turn_gap_s": 10}})
    for s in np.unique(req.session):
        mine = req.session == s
        prompts, times = req.input_len[mine], req.arrival_s[mine]
        assert list(prompts) == [150, 220, 290][: len(prompts)]  # system + message, then + reply + message
        assert np.allclose(np.diff(times), 10.0)


def test_a_trace_carries_conversations_in_a_session_column(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,session_id\n0,100,40,a\n1,90,10,b\n5,170,5,a\n")
    req = build_requests({"arrival": "trace", "path": str(trace)})
    assert list(req.session) == [0, 1, 0]


def test_the_example_reports_the_hit_rate_and_the_ttft_it_saves():
    job = load_serve_job(ROOT / "examples" / "serve-multiturn-prefix-cache.yaml")
    job = parse_serve_job({"model": "llama-3.1-8b", "deployment": job.deployment.model_dump(exclude_none=True),
                           "workload": {**job.workload.model_dump(exclude_none=True), "num_requests": 400}})
    _, m = simulation_report(job)
    pc = m["prefix_cache"]
    assert 0.5 < pc["hit_rate"] < 1.0
    assert pc["ttft_saved_ms"]["mean"] > 0
    assert pc["ttft_saved_ms"]["ttft_mean_without_ms"] > m["ttft_ms"]["mean"]
    assert pc["ttft_saved_ms"]["mean"] == pytest.approx(pc["ttft_saved_ms"]["ttft_mean_without_ms"] - m["ttft_ms"]["mean"], rel=1e-6)


def test_a_trace_of_conversations_replays_as_the_generated_ones(tmp_path):
    """The same conversations as `workload.sessions` draws them, written as a trace with a session column,
    give the same requests (each conversation keeping its system prompt) and the same hit rate and TTFT saved."""
    wl = {"rate": 3, "num_requests": 240, "input_len": 120, "output_len": {"dist": "lognormal", "median": 150, "sigma": 0.5},
          "prefix_len": 512, "prefix_groups": 3, "sessions": {"turns": 4, "turn_gap_s": 15}, "seed": 3}
    drawn = build_requests(wl)
    rows = [f"{float(t)!r},{i},{o},c{s}" for t, i, o, s in zip(drawn.arrival_s - drawn.arrival_s[0], drawn.input_len, drawn.output_len, drawn.session)]
    trace = tmp_path / "conversations.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,session_id\n" + "\n".join(rows) + "\n")
    traced = build_requests({"arrival": "trace", "path": str(trace), "prefix_len": 512, "prefix_groups": 3})
    assert np.array_equal(traced.input_len, drawn.input_len) and np.array_equal(traced.prefix_group, drawn.prefix_group)
    deployment = {"gpu": "a100-80gb", "engine": {"prefix_caching": True}}
    _, gen = simulation_report(parse_serve_job({"model": "llama-3.1-8b", "deployment": deployment, "workload": wl}))
    _, rep = simulation_report(parse_serve_job({"model": "llama-3.1-8b", "deployment": deployment,
                                                "workload": {"arrival": "trace", "path": str(trace), "prefix_len": 512, "prefix_groups": 3}}))
    assert rep["prefix_cache"]["hit_rate"] > 0.5
    assert rep["prefix_cache"]["hit_rate"] == pytest.approx(gen["prefix_cache"]["hit_rate"], rel=1e-9)
    assert rep["prefix_cache"]["ttft_saved_ms"]["mean"] == pytest.approx(gen["prefix_cache"]["ttft_saved_ms"]["mean"], rel=1e-6)


def test_the_trace_example_reports_its_hit_rate_and_saved_ttft():
    _, m = simulation_report(load_serve_job(ROOT / "examples" / "serve-multiturn-trace.yaml"))
    assert m["completed"] == 600 and 0.5 < m["prefix_cache"]["hit_rate"] < 1.0
    assert m["prefix_cache"]["ttft_saved_ms"]["mean"] > 0
