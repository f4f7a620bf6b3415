"""The iteration-level scheduler on hand-worked cases (FakeTimer: 10 ms + 0.1 ms per scheduled token)."""

import numpy as np
import pytest

from shardwise.serve.config import EngineSpec
from tests.serve.conftest import FakeTimer, make_requests, run_engine


def test_single_request_prefill_then_decode():
    # prefill 100 tokens: 10 + 10 = 20 ms -> first token; 4 decode steps of 10.1 ms -> last token at 60.4 ms
    tab, eng = run_engine(make_requests([0.0], [100], [5]))
    assert tab.first_s[0] == pytest.approx(0.020)
    assert tab.finish_s[0] == pytest.approx(0.0604)
    v, w = eng.itl.samples()
    assert np.repeat(v, w.astype(int)) == pytest.approx([0.0101] * 4)


def test_chunked_prefill_splits_the_prompt_by_the_token_budget():
    # budget 64: chunks of 64 and 36 tokens -> 16.4 ms + 13.6 ms = 30 ms to the first token
    tab, _ = run_engine(make_requests([0.0], [100], [2]), EngineSpec(max_num_batched_tokens=64, max_num_seqs=64))
    assert tab.first_s[0] == pytest.approx(0.030)
    assert tab.finish_s[0] == pytest.approx(0.030 + 0.0101)


def test_v1_mixes_a_new_prompt_with_running_decodes():
    # request 0 decodes alone from 20 ms; request 1 (50 tokens) arrives at 25 ms and joins the iteration
    # starting at 30.1 ms (end of the step in flight): 1 decode + 50 prompt tokens = 15.1 ms -> its first token at 45.2 ms
    tab, _ = run_engine(make_requests([0.0, 0.025], [100, 50], [10, 3]))
    assert tab.first_s[0] == pytest.approx(0.020)
    assert tab.first_s[1] == pytest.approx(0.0301 + 0.0151)


def test_v0_prefill_first_pauses_decodes():
    # chunked_prefill false: the prompt runs alone (10 + 5 = 15 ms) after the decode step in flight
    spec = EngineSpec(chunked_prefill=False, max_num_batched_tokens=4096)
    tab, eng = run_engine(make_requests([0.0, 0.025], [100, 50], [10, 3]), spec)
    assert tab.first_s[1] == pytest.approx(0.0301 + 0.015)
    v, w = eng.itl.samples()
    # request 0's gap across the paused iteration spans the prefill plus one decode step
    assert np.max(v) == pytest.approx(0.015 + 0.0102)


def test_multi_step_streams_tokens_in_rounds():
    # k=2: 4 decode steps = 2 rounds of 20.2 ms; ITL sees 2 gaps of 20.2 ms; TPOT is unchanged
    tab, eng = run_engine(make_requests([0.0], [100], [5]), EngineSpec(num_scheduler_steps=2))
    v, w = eng.itl.samples()
    assert np.repeat(v, w.astype(int)) == pytest.approx([0.0202, 0.0202])
    assert tab.finish_s[0] == pytest.approx(0.0604)


@pytest.mark.parametrize(("version", "scheduler", "lag_s"), [("vllm-0.6.0", None, 0.0101), ("vllm-0.10.1", "vllm-v0", 0.0101),
                                                        ("vllm-0.10.1", None, 0.0), ("vllm-0.5.4", None, 0.0), ("sglang-0.3.0", None, 0.0)])
def test_async_output_processing_delivers_each_token_one_iteration_late(version, scheduler, lag_s):
    # vLLM 0.6-0.10's V0 engine processes a step's outputs while the next step runs (vLLM PR #7049): the first
    # and the last token reach the client one decode step (10.1 ms at batch 1) after they are sampled; TPOT is
    # unchanged. From 0.8 on V1 is the default engine (no such lag) unless V0 is named.
    spec = EngineSpec(version=version, scheduler=scheduler, chunked_prefill=False, max_num_batched_tokens=4096)
    tab, _ = run_engine(make_requests([0.0], [100], [5]), spec)
    assert tab.first_s[0] == pytest.approx(0.020 + lag_s)
    assert tab.finish_s[0] == pytest.approx(0.0604 + lag_s)


def test_batch_of_decodes_shares_each_step():
    tab, _ = run_engine(make_requests([0.0, 0.0, 0.0], [10, 10, 10], [3, 3, 3]))
    # one prefill iteration of 30 tokens (13 ms), then 2 steps with 3 decodes (10.3 ms each)
    assert tab.first_s == pytest.approx([0.013] * 3)
    assert tab.finish_s == pytest.approx([0.013 + 0.0206] * 3)


def test_max_num_seqs_queues_the_rest():
    spec = EngineSpec(max_num_seqs=1, max_num_batched_tokens=512)
    tab, _ = run_engine(make_requests([0.0, 0.0], [10, 10], [3, 3]), spec)
    assert tab.first_s[1] >= tab.finish_s[0]


def test_preemption_by_recompute_when_blocks_run_out():
    # 10 blocks of 16 tokens = 160 tokens; two requests needing 60 + 60 tokens each cannot both finish
    req = make_requests([0.0, 0.0], [60, 60], [60, 60])
    tab, eng = run_engine(req, EngineSpec(block_size=16), blocks=10)
    assert np.all(np.isfinite(tab.finish_s))
    assert tab.preemptions.sum() >= 1
    assert eng.free == 10  # every block returned


def test_prefix_caching_skips_the_shared_prefix():
    req = make_requests([0.0, 1.0], [100, 100], [2, 2], prefix_len=64)
    cold, _ = run_engine(req, EngineSpec(prefix_caching=False))
    warm, _ = run_engine(req, EngineSpec(prefix_caching=True))
    # the second request prefills 100 - 64 = 36 tokens instead of 100: 6.4 ms sooner
    assert (cold.first_s[1] - warm.first_s[1]) == pytest.approx(0.0064)
    assert cold.first_s[0] == warm.first_s[0]


def test_context_cost_enters_decode_steps_in_closed_form():
    # 1 us per context token: decode step j has context 100 + j + 1
    timer = FakeTimer(ctx_s=1e-6)
    tab, _ = run_engine(make_requests([0.0], [100], [4]), timer=timer)
    decode = sum(0.0101 + 1e-6 * (101 + j) for j in range(3))
    assert tab.finish_s[0] - tab.first_s[0] == pytest.approx(decode)


def test_prefill_only_engine_finishes_at_the_first_token():
    tab, eng = run_engine(make_requests([0.0, 0.0], [100, 50], [9, 9]), prefill_only=True)
    assert tab.finish_s == pytest.approx(tab.first_s)
    assert eng.free == 100_000
