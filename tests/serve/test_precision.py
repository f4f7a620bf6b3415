"""Serving precision: the weights' and the KV cache's formats, in memory and in the step timer."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.flops import matmul_weights
from shardwise.errors import ShardwiseError
from shardwise.serve.config import parse_serve_job
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import weight_bytes_per_gpu
from shardwise.serve.precision import FA3_FP8_SPEEDUP, WEIGHT_BYTES, Precision
from shardwise.serve.timing import StepTimer, kv_bytes_per_token_per_gpu
from shardwise.specs.hardware import get_gpu
from shardwise.specs.model_ref import load_model


def _timer(model="llama-3.1-70b", gpu="h100", tp=4, precision="bf16"):
    return StepTimer(load_model(model), get_gpu(gpu), tp, 1, Precision.parse(precision), ServingConstants())


def test_shorthands_and_mappings():
    assert Precision.parse("fp8") == Precision("fp8", "fp8")  # the old meaning: FP8 weights and KV cache
    assert Precision.parse("int4") == Precision("int4", "bf16")
    assert Precision.parse({"weights": "fp8"}) == Precision("fp8", "bf16")
    assert Precision.parse({"weights": "fp16"}) == Precision("fp16", "fp16")  # auto KV: the activation type
    assert Precision.parse({"weights": "int4", "kv_cache": "fp8"}).label == "int4 weights, fp8 KV"
    with pytest.raises(ShardwiseError, match="precision"):
        parse_serve_job({"model": "llama-3.1-8b", "precision": "int3", "deployment": {"gpu": "h100"},
                         "workload": {"rate": 1, "num_requests": 1}})


def test_weight_bytes_per_format():
    # GPTQ/AWQ int4 with 128-element groups and an fp16 scale each; NVFP4 with an FP8 scale per 16 elements
    assert WEIGHT_BYTES["int4"] == pytest.approx(0.5 + 2 / 128)
    assert WEIGHT_BYTES["fp4"] == pytest.approx(0.5625)


def test_fp8_weights_halve_the_block_linears_and_keep_the_rest_16_bit():
    """Llama 3.1 70B on TP4: block linears at 1 B, the embedding, LM head and norms at 2 B (hand count)."""
    m = load_model("llama-3.1-70b")
    attn_in, attn_out, dense, _ = matmul_weights(m)
    linears = m.layers * (attn_in + attn_out + dense)
    rest = m.params_total - linears
    assert weight_bytes_per_gpu(m, 4, 1, Precision("fp8", "fp8")) == pytest.approx((linears * 1 + rest * 2) / 4)
    assert weight_bytes_per_gpu(m, 4, 1, Precision()) == pytest.approx(m.params_total * 2 / 4)


def test_linear_rate_follows_the_weight_format_and_the_gpu():
    h100 = _timer(precision="fp8")
    compute = ServingConstants().device_constants().compute_for("H100-SXM")
    assert h100.linear_rate == pytest.approx(get_gpu("h100").peak_flops("fp8") * compute.fp8_gemm_efficiency)
    assert _timer(precision="int4").linear_rate == _timer().linear_rate  # weight-only: 16-bit math (Marlin)
    assert _timer(gpu="a100-80gb", precision="fp8").linear_rate == _timer(gpu="a100-80gb").linear_rate  # no FP8 tensor cores
    assert _timer(precision="fp8").flop_rate == _timer().flop_rate  # the LM head stays 16-bit


def test_fp8_kv_cache_halves_decode_reads_and_speeds_prefill_attention_on_hopper_only():
    m = load_model("llama-3.1-70b")
    assert kv_bytes_per_token_per_gpu(m, 4, 1, 1.0) * 2 == kv_bytes_per_token_per_gpu(m, 4, 1, 2.0)
    bf16, fp8kv = _timer(precision="bf16"), _timer(precision={"weights": "bf16", "kv_cache": "fp8"})
    assert fp8kv.prefill_attn_s_per_pair == pytest.approx(bf16.prefill_attn_s_per_pair / FA3_FP8_SPEEDUP)
    a100 = _timer(gpu="a100-80gb", precision={"weights": "bf16", "kv_cache": "fp8"})
    assert a100.prefill_attn_s_per_pair == _timer(gpu="a100-80gb").prefill_attn_s_per_pair


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b"]), st.sampled_from(["h100", "a100-80gb", "b200"]),
       st.sampled_from([1, 8, 64]))
def test_smaller_weights_never_slow_a_decode_step(model, gpu, batch):
    """At decode sizes the step streams the weights: fp8 and int4 weights are never slower than bf16, and
    neither quantisation ever shrinks what the KV cache may hold."""
    times = {p: _timer(model, gpu, 8, p).iteration_s(batch, batch, batch) for p in ("bf16", "fp8", "int4")}
    assert times["fp8"] <= times["bf16"] * (1 + 1e-9)
    assert times["int4"] <= times["bf16"] * (1 + 1e-9)
    m = load_model(model)
    assert weight_bytes_per_gpu(m, 8, 1, Precision("int4")) < weight_bytes_per_gpu(m, 8, 1, Precision("fp8")) < weight_bytes_per_gpu(m, 8, 1, Precision())
