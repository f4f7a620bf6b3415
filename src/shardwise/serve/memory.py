"""GPU memory of a serving replica and the paged KV cache it leaves room for (vLLM semantics).

KV bytes per rank = total * gpu_memory_utilization - weights - activation peak - non-torch memory
- LoRA adapter slots (vllm/worker/worker.py::determine_num_available_blocks; the slots, when adapters are
served, are allocated before the profile: :mod:`shardwise.serve.adapters`); blocks =
KV bytes / (block_size * KV bytes per token per rank); KV per token = 2*L*H_kv*d_h*b
(vllm/worker/cache_engine.py::get_cache_block_size), divided over TP by KV heads (replicated when
tp > H_kv, as vLLM does) and over PP by layers. MLA caches one latent per token, replicated over TP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardwise.errors import ShardwiseError
from shardwise.serve.constants import ServingConstants
from shardwise.specs.hardware import GPU
from shardwise.specs.model import ModelSpec

GIB = 2**30


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, pp: int, bytes_per_element: float) -> float:
    """KV-cache bytes one token occupies on each GPU of a tp x pp replica."""
    total = model.kv_cache_bytes_per_token(bytes_per_element)
    if model.is_mla:
        head_share = 1.0
    else:
        head_share = math.ceil(model.n_kv_heads / tp) / model.n_kv_heads
    return total * head_share / pp


def weight_bytes_per_gpu(model: ModelSpec, tp: int, pp: int, bytes_per_element: float) -> float:
    """All weights split evenly over tp x pp (embedding and LM head are vocab-parallel in vLLM)."""
    return model.params_total * bytes_per_element / (tp * pp)


def activation_peak_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int, bytes_per_element: float) -> float:
    """Peak of vLLM's profiling forward pass with the full token budget (derived): the MLP's gate+up
    output (2*ffn/tp per token) plus a few hidden-size buffers, and fp32 logits for max_num_seqs rows
    (held twice while sampling)."""
    b = max(bytes_per_element, 2.0)  # activations stay 16-bit under fp8 weights
    ffn = model.d_expert * max(1, model.top_k) if model.is_moe else model.ffn
    per_token = (2 * ffn / tp + 4 * model.hidden) * b
    logits = max_num_seqs * model.vocab / tp * 4 * 2
    return max_num_batched_tokens * per_token + logits


@dataclass(frozen=True)
class KVCapacity:
    """Memory budget of one replica and its KV cache in blocks."""

    weights_gib: float
    activation_gib: float
    overhead_gib: float
    kv_gib: float  # per GPU
    kv_bytes_per_token: float  # per GPU
    num_blocks: int  # per replica (each GPU holds its shard of every block)
    block_size: int
    adapters_gib: float = 0.0  # per GPU: LoRA adapter slots, taken from the KV cache's share

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size


def kv_capacity(
    model: ModelSpec,
    gpu: GPU,
    tp: int,
    pp: int,
    bytes_per_element: float,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    constants: ServingConstants,
    adapter_bytes: float = 0.0,
) -> KVCapacity:
    """KV blocks a replica gets; raises ShardwiseError when the weights do not leave room for any.
    `adapter_bytes`: LoRA adapter slots per GPU, carved out of the KV cache's memory."""
    weights = weight_bytes_per_gpu(model, tp, pp, bytes_per_element)
    act = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs, bytes_per_element)
    overhead = constants.non_torch_gib * GIB
    budget = gpu.memory_bytes * gpu_memory_utilization
    free = budget - weights - act - overhead
    if adapter_bytes:
        free -= adapter_bytes
    per_token = kv_bytes_per_token_per_gpu(model, tp, pp, bytes_per_element)
    blocks = int(free // (per_token * block_size)) if free > 0 else 0
    if blocks <= 0:
        slots = f" + LoRA slots {adapter_bytes / GIB:.2f} GiB" if adapter_bytes else ""
        fix = "lower adapters.max_loras, " if adapter_bytes else ""
        raise ShardwiseError(
            f"{model.name} does not fit on {gpu.name} with tp={tp}, pp={pp}: weights {weights / GIB:.1f} GiB + activations "
            f"{act / GIB:.1f} GiB + overhead {overhead / GIB:.2f} GiB{slots} exceed {budget / GIB:.1f} GiB "
            f"({gpu.memory_gib:g} GiB x gpu_memory_utilization {gpu_memory_utilization}); {fix}raise tp or pp, use fp8, or lower max_num_batched_tokens"
        )
    return KVCapacity(weights / GIB, act / GIB, overhead / GIB, free / GIB, per_token, blocks, block_size, adapter_bytes / GIB)
