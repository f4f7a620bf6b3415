"""KV bytes per token and KV block capacity, pinned to hand-worked numbers (vLLM cache_engine.get_cache_block_size and worker.determine_num_available_blocks)."""

import pytest

from shardwise.errors import ShardwiseError
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import (
    GIB,
    activation_peak_bytes,
    kv_bytes_per_token_per_gpu,
    kv_capacity,
    weight_bytes_per_gpu,
)
from shardwise.serve.precision import Precision
from shardwise.specs.hardware import get_gpu
from shardwise.specs.model_ref import load_model

BF16 = Precision()


def test_kv_bytes_per_token_llama3_8b_is_128_kib():
    # 2 * L=32 * H_kv=8 * d_h=128 * 2 B = 131,072 B
    assert load_model("llama-3-8b").kv_cache_bytes_per_token(2) == 128 * 1024
    assert kv_bytes_per_token_per_gpu(load_model("llama-3-8b"), 1, 1, 2) == 131_072


def test_kv_bytes_per_token_llama3_70b_is_320_kib():
    # 2 * 80 * 8 * 128 * 2 B = 327,680 B
    assert load_model("llama-3-70b").kv_cache_bytes_per_token(2) == 320 * 1024


def test_kv_per_gpu_shards_heads_and_layers_and_replicates_beyond_kv_heads():
    m = load_model("llama-3-70b")
    assert kv_bytes_per_token_per_gpu(m, 4, 1, 2) == 327_680 / 4
    assert kv_bytes_per_token_per_gpu(m, 8, 2, 2) == 327_680 / 8 / 2
    # tp=16 > 8 KV heads: each GPU keeps one whole KV head (vLLM replicates), i.e. 1/8, not 1/16
    assert kv_bytes_per_token_per_gpu(m, 16, 1, 2) == 327_680 / 8
    assert kv_bytes_per_token_per_gpu(m, 1, 1, 1) == 163_840  # fp8 KV cache


def test_kv_capacity_llama3_8b_a100_hand_worked():
    """72 GiB budget - 16.06 GB weights - activations (8192 tokens x (2*14336 + 4*4096) x 2 B + 256 x
    128256 x 4 B x 2 logits) - 1.25 GiB overhead = 58,905,845,760 B; / (16 x 131,072 B) = 28,088 blocks."""
    m, gpu = load_model("llama-3.1-8b"), get_gpu("a100-80gb")
    c = ServingConstants(non_torch_gib=1.25)
    assert weight_bytes_per_gpu(m, 1, 1, BF16) == 16_060_522_496
    assert activation_peak_bytes(m, 1, 8192, 256) == 8192 * 90_112 + 256 * 128_256 * 8
    cap = kv_capacity(m, gpu, 1, 1, BF16, 0.9, 16, 8192, 256, c)
    assert cap.num_blocks == 28_088
    assert cap.tokens == 449_408
    assert cap.kv_gib == pytest.approx(58_905_845_760 / GIB)


def test_kv_capacity_grows_with_tp_and_fp8():
    m, gpu, c = load_model("llama-3.1-70b"), get_gpu("h100"), ServingConstants()
    tp4 = kv_capacity(m, gpu, 4, 1, BF16, 0.9, 16, 8192, 256, c).tokens
    tp8 = kv_capacity(m, gpu, 8, 1, BF16, 0.9, 16, 8192, 256, c).tokens
    fp8 = kv_capacity(m, gpu, 4, 1, Precision("fp8", "fp8"), 0.9, 16, 8192, 256, c).tokens
    assert tp8 > 2 * tp4  # weights per GPU halve too
    assert fp8 > 2 * tp4


def test_model_that_does_not_fit_is_a_clear_error():
    m, gpu = load_model("llama-3.1-70b"), get_gpu("a100-80gb")
    with pytest.raises(ShardwiseError, match="does not fit on A100-80GB with tp=1"):
        kv_capacity(m, gpu, 1, 1, BF16, 0.9, 16, 8192, 256, ServingConstants())
