"""Speculative decoding: tokens per verification, the per-token cost of a spec step, memory and inputs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.serve.config import SpeculativeSpec, parse_serve_job
from shardwise.serve.constants import ServingConstants
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import build_pools, simulate
from shardwise.serve.speculative import make_spec_timer, tokens_per_step
from shardwise.serve.timing import StepTimer
from shardwise.specs.hardware import get_gpu
from shardwise.specs.model_ref import load_model


def test_tokens_per_step_is_leviathans_expectation():
    # Leviathan et al. 2023, Eq. 1: (1 - a^(k+1)) / (1 - a); a = 0.8, k = 4 -> 3.3616
    assert tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert tokens_per_step(0.0, 4) == 1.0


def _spec(method, alpha, k=3, draft=None, model="llama-3.1-8b"):
    target = StepTimer(load_model(model), get_gpu("h100"), 1, 1, Precision(), ServingConstants())
    return make_spec_timer(target, SpeculativeSpec(method=method, num_tokens=k, draft_model=draft), alpha)


def test_a_decode_step_costs_verification_plus_drafts_per_emitted_token():
    timer, _, _ = _spec("eagle3", 0.7)
    b, k = 16, 3
    verify = timer.target.iteration_s(b * (k + 1), b, b * (k + 1))
    drafts = k * timer.draft.iteration_s(b, b, b)
    assert timer.iteration_s(b, b, b, decoders=b) == pytest.approx((verify + drafts) / tokens_per_step(0.7, k))
    # n-gram lookup drafts on the CPU: only the verification
    ngram, _, _ = _spec("ngram", 0.7)
    assert ngram.iteration_s(b, b, b, decoders=b) == pytest.approx(verify / tokens_per_step(0.7, k))


def test_a_prompt_chunk_pays_its_marginal_cost_and_the_decoders_their_share():
    timer, _, _ = _spec("eagle3", 0.6)
    mixed = timer.iteration_s(512 + 8, 9, 9, decoders=8)
    decode_only = timer.iteration_s(8, 8, 8, decoders=8)
    assert mixed > decode_only
    real = timer._verify_s(512, 9, 1, 0.0, 8) + timer._draft_s(8)
    assert mixed == pytest.approx(real - (1 - 1 / timer.emitted) * (timer._verify_s(0, 8, 0, 0.0, 8) + timer._draft_s(8)))


def test_draft_weights_and_kv_come_out_of_the_cache():
    job = {"model": "llama-3.1-8b", "deployment": {"gpu": "h100"}, "workload": {"rate": 1, "num_requests": 1,
                                                                                "acceptance_rate": {"draft": 0.7, "eagle3": 0.7}}}
    base = build_pools(parse_serve_job(job), ServingConstants())[0].capacity
    for spec in ({"method": "draft", "draft_model": "llama-3.2-1b"}, {"method": "eagle3"}):
        job["deployment"]["engine"] = {"speculative": spec}
        cap = build_pools(parse_serve_job(job), ServingConstants())[0].capacity
        assert cap.tokens < base.tokens
        assert cap.kv_bytes_per_token > base.kv_bytes_per_token


def test_missing_inputs_say_what_to_add():
    with pytest.raises(ShardwiseError, match="acceptance_rate"):
        _spec("eagle3", None)
    with pytest.raises(ShardwiseError, match="draft_model"):
        _spec("draft", 0.7)
    with pytest.raises(ShardwiseError, match="share the tokenizer"):
        _spec("draft", 0.7, draft="llama-2-7b")
    with pytest.raises(ShardwiseError, match="multi-token-prediction"):
        _spec("mtp", 0.7)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.05, 0.9), st.floats(0.05, 0.9), st.sampled_from(["eagle", "eagle3", "ngram"]))
def test_higher_acceptance_never_slows_decoding(a, b, method):
    lo, hi = sorted((a, b))
    slow, _, _ = _spec(method, lo)
    fast, _, _ = _spec(method, hi)
    for batch in (1, 32):
        assert fast.iteration_s(batch, batch, batch, decoders=batch) <= slow.iteration_s(batch, batch, batch, decoders=batch) * (1 + 1e-12)
    assert fast.decode_attn_s_per_token <= slow.decode_attn_s_per_token * (1 + 1e-12)


def test_speculation_cuts_tpot_at_low_load_on_the_example():
    """The EAGLE-3 example (8B, one H100, 2 req/s, acceptance 0.7): TPOT at least 1.5x lower than without."""
    job = parse_serve_job({"model": "llama-3.1-8b", "deployment": {"gpu": "h100", "engine": {"speculative": {"method": "eagle3"}}},
                           "workload": {"rate": 2, "num_requests": 200, "acceptance_rate": 0.7}})
    plain = parse_serve_job({"model": "llama-3.1-8b", "deployment": {"gpu": "h100"}, "workload": {"rate": 2, "num_requests": 200}})
    with_spec, without = compute_metrics(simulate(job)), compute_metrics(simulate(plain))
    assert with_spec["tpot_ms"]["median"] * 1.5 < without["tpot_ms"]["median"]
