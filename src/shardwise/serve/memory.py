"""GPU memory of a serving replica and the paged KV cache it leaves room for (vLLM semantics).

KV bytes per GPU = total * gpu_memory_utilization - weights - activation peak - non-torch memory
- LoRA adapter slots (vllm/worker/worker.py::determine_num_available_blocks; the slots, when adapters are
served, are allocated before the profile: :mod:`shardwise.serve.adapters`); blocks =
KV bytes / (block_size * KV bytes per token per GPU) (:func:`~shardwise.serve.timing.kv_bytes_per_token_per_gpu`).
Weights per GPU: the block linears in the weight format, the rest (embedding, LM head, router, norms) in
16-bit (:mod:`shardwise.serve.precision`), split over tp (vocab-parallel embedding and head) and pp;
routed experts over the ep GPUs of an expert-parallel replica instead. Each of dp data-parallel attention
ranks holds the KV cache of its own requests, so a replica has dp times one rank's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ShardwiseError
from shardwise.serve.constants import ServingConstants
from shardwise.serve.precision import Precision
from shardwise.serve.timing import ACT_BYTES, kv_bytes_per_token_per_gpu
from shardwise.specs.hardware import GPU
from shardwise.specs.layer import DENSE_BLOCKS
from shardwise.specs.model import ModelSpec

GIB = 2**30


def weight_bytes_per_gpu(model: ModelSpec, tp: int, pp: int, precision: Precision, ep: int = 1) -> float:
    """Weights on one GPU (module docstring), the linears' from the layer's description
    (:meth:`~shardwise.specs.model.ModelSpec.linears`: every copy of each)."""
    def held(moe: bool, *blocks: str) -> int:
        return sum(lin.count * lin.weights for lin in model.linears(moe) if lin.block in blocks)

    routed = model.moe_layers * held(True, "experts")
    linears = (model.layers - model.moe_layers) * held(False, *DENSE_BLOCKS) + model.moe_layers * held(True, *DENSE_BLOCKS)
    rest = model.params_total - linears - routed  # embedding, LM head, router, norms, biases: 16-bit
    w = precision.weight_bytes
    experts = routed * w / (ep if ep > 1 else tp)
    return ((linears * w + rest * ACT_BYTES) / tp + experts) / pp


def activation_peak_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak of vLLM's profiling forward pass with the full token budget (derived): the MLP's gate+up
    output (2*ffn/tp per token) plus a few hidden-size buffers, and fp32 logits for max_num_seqs rows
    (held twice while sampling). Activations stay 16-bit whatever the weights' format."""
    ffn = model.d_expert * max(1, model.top_k) if model.is_moe else model.ffn
    per_token = (2 * ffn / tp + 4 * model.hidden) * ACT_BYTES
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
    num_blocks: int  # per replica (each GPU of a rank holds its shard of every block of the rank)
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
    precision: Precision,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    constants: ServingConstants,
    adapter_bytes: float = 0.0,
    dp: int = 1,
    ep: int = 1,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
) -> KVCapacity:
    """KV blocks a replica gets; raises ShardwiseError when the weights do not leave room for any.
    `adapter_bytes`: LoRA adapter slots per GPU, carved out of the KV cache's memory; `max_num_batched_tokens`
    and `max_num_seqs` are one rank's; `extra_weight_bytes` / `extra_kv_bytes_per_token`: a speculative
    decoder's draft weights and KV cache per GPU."""
    weights = weight_bytes_per_gpu(model, tp, pp, precision, ep) + extra_weight_bytes
    act = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    overhead = constants.non_torch_gib * GIB
    budget = gpu.memory_bytes * gpu_memory_utilization
    free = budget - weights - act - overhead
    if adapter_bytes:
        free -= adapter_bytes
    per_token = kv_bytes_per_token_per_gpu(model, tp, pp, precision.kv_bytes) + extra_kv_bytes_per_token
    blocks = int(free // (per_token * block_size)) if free > 0 else 0
    if blocks <= 0:
        slots = f" + LoRA slots {adapter_bytes / GIB:.2f} GiB" if adapter_bytes else ""
        fix = "lower adapters.max_loras, " if adapter_bytes else ""
        more = "raise tp, pp or (MoE) expert-parallel GPUs" if model.is_moe else "raise tp or pp"
        raise ShardwiseError(
            f"{model.name} does not fit on {gpu.name} with tp={tp}, pp={pp}" + (f", ep={ep}" if ep > 1 else "")
            + f": weights {weights / GIB:.1f} GiB + activations {act / GIB:.1f} GiB + overhead {overhead / GIB:.2f} GiB{slots} "
            f"exceed {budget / GIB:.1f} GiB ({gpu.memory_gib:g} GiB x gpu_memory_utilization {gpu_memory_utilization}); "
            f"{fix}{more}, quantise the weights (precision fp8 or int4), or lower max_num_batched_tokens"
        )
    return KVCapacity(weights / GIB, act / GIB, overhead / GIB, free / GIB, per_token, blocks * dp, block_size, adapter_bytes / GIB)
