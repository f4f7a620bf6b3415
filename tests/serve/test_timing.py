"""The serving step timer runs on the one device model and the one network model."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.attention import TILE, tile_steps
from shardwise.cost.comm import collective_s
from shardwise.cost.constants import fitted_network_constants
from shardwise.serve.constants import ServingConstants
from shardwise.serve.precision import Precision
from shardwise.serve.timing import HEAD_KERNELS, KERNELS_PER_LAYER, StepTimer, custom_all_reduce_s
from shardwise.specs.hardware import get_gpu, make_cluster
from shardwise.specs.model_ref import load_model


def _timer(model: str, tp: int = 1, kernel_overhead_s: float | None = None) -> StepTimer:
    consts = ServingConstants()
    device = consts.device_constants()
    if kernel_overhead_s is not None:
        device = replace(device, compute=replace(device.compute, kernel_overhead_s=kernel_overhead_s))
    return StepTimer(load_model(model), get_gpu("h100"), tp, 1, Precision(), replace(consts, device=device))


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-3.1-70b"])
def test_each_kernel_of_a_step_pays_the_devices_launch_gap(model):
    """Raising the device model's per-kernel gap by 1 us lengthens a decode step by 1 us per kernel:
    KERNELS_PER_LAYER a layer (32 or 80 layers) plus the head's."""
    base, slower = _timer(model, kernel_overhead_s=4e-6), _timer(model, kernel_overhead_s=5e-6)
    kernels = KERNELS_PER_LAYER * base.model.layers + HEAD_KERNELS
    for batch in (1, 64):
        assert slower.iteration_s(batch, batch, batch) - base.iteration_s(batch, batch, batch) == pytest.approx(kernels * 1e-6)


def test_a_tensor_parallel_step_prices_its_all_reduces_as_vllms_custom_kernel_does():
    """Llama 3.1 70B on 4 H100s: a one-token decode step carries 2 x 80 all-reduces of one token's
    activations (8192 x 2 B), each vLLM's one-shot custom all-reduce (two barriers of the NVLink step
    latency, 3 peers' buffers read at the ring rate), cheaper than NCCL's ring for such a message; past
    8 MiB the network model's NCCL all-reduce takes over."""
    timer = _timer("llama-3.1-70b", tp=4)
    c = fitted_network_constants()
    net = make_cluster(get_gpu("h100"), 4).network
    size = 8192 * 2.0
    one_shot = 2 * c.link_latency_s + size * 3 / (450e9 * c.ring_efficiency("nvlink"))
    assert timer.tp_all_reduces_s(1) == pytest.approx(2 * 80 * one_shot)
    tier = make_cluster(get_gpu("h100"), 4).tier_for(4, 1)
    assert one_shot < collective_s("all_reduce", size, 4, tier)
    big = 1024 * size  # 16 MiB: NCCL
    assert custom_all_reduce_s(big, 4, net) is None
    assert timer.tp_all_reduces_s(1024) == pytest.approx(2 * 80 * collective_s("all_reduce", big, 4, tier))
    assert _timer("llama-3.1-70b", tp=1).tp_all_reduces_s(1) == 0.0




def test_prefill_attention_is_the_training_models_fused_kernel():
    """A whole prompt's prefill attention is the device model's fused-attention tile model (Device.attention_s,
    the kernel the training estimate times) over this GPU's heads, each layer; 33 query tiles x 32 heads of
    Llama-3-8B fill the H100's 132 SMs in exactly 8 waves, so the kernel's wave bound adds nothing."""
    timer = _timer("llama-3-8b")
    prompt = 33 * 128
    dev = timer.device
    kernel_s = dev.attention_s(32, prompt, prompt, 128, causal=True) - dev.kernel_overhead_s  # its launch: kernels_s
    assert timer.prefill_pairs(0, prompt) * timer.prefill_attn_s_per_pair == pytest.approx(32 * kernel_s, rel=1e-12)


@given(done=st.integers(0, 40_000), chunk=st.integers(1, 20_000))
def test_the_kernels_prefill_work_covers_every_causal_pair(done, chunk):
    """Whole tiles and the loop's fixed part: never less work than the (query, key) pairs nor more than every
    query tile over every key tile; on tile boundaries exactly the pairs plus each query tile's c0 and the
    masked half of its diagonal tile."""
    timer = _timer("llama-3-8b")
    c0, t = timer.device.attention_shape.c0_fwd, 128
    pairs = chunk * done + chunk * (chunk + 1) / 2
    n_q, n_k = -(-chunk // t), -(-(done + chunk) // t)
    assert pairs <= timer.prefill_pairs(done, chunk) <= t * t * n_q * (c0 + n_k)
    aligned_q, aligned_done = n_q * t, (done // t) * t
    aligned_pairs = aligned_q * aligned_done + aligned_q * (aligned_q + 1) / 2
    expected = aligned_pairs + n_q * (t * t * (c0 + 0.5) - t / 2)
    assert timer.prefill_pairs(aligned_done, aligned_q) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20_000), st.integers(1, 20_000), st.integers(0, 20_000), st.integers(1, 20_000))
def test_prefill_pairs_kept_per_tile_count_equal_the_tile_model(done_a, chunk_a, done_b, chunk_b):
    """StepTimer.prefill_pairs keeps its answers per (query tiles, key tiles); each must be what the
    tile model (cost.attention.tile_steps) gives for those very tokens, whatever was asked before."""
    timer = _timer("llama-3.1-70b")
    for done, chunk in ((done_a, chunk_a), (done_b, chunk_b), (done_a, chunk_a)):
        steps, _, _ = tile_steps(chunk, done + chunk, True, False, timer.device.attention_shape.c0_fwd)
        assert timer.prefill_pairs(done, chunk) == steps * TILE * TILE
