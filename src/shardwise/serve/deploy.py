"""A pool of identical replicas, resolved: GPU, layout, engine knobs, step timer, KV capacity, price.

A replica with pp > 1 runs pp virtual engines (vLLM v0's pipeline-parallel scheduling), each with
1/pp of the replica's KV blocks and its own scheduler; the router treats them as separate targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.serve.adapters import AdapterCost, AdapterSpec
from shardwise.serve.config import EngineSpec, LengthClass
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import KVCapacity, kv_capacity
from shardwise.serve.timing import StepTimer
from shardwise.specs.hardware import GPU, get_gpu
from shardwise.specs.model import ModelSpec


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, 64) + 1) if n % d == 0)


def check_layout(model: ModelSpec, gpu: GPU, tp: int, pp: int, where: str) -> None:
    """TP must divide the attention heads and stay inside a node; PP must not exceed the layers."""
    if model.heads % tp:
        raise ShardwiseError(f"{where}.tp: {tp} does not divide the {model.heads} attention heads of {model.name}; use one of {_divisors(model.heads)}")
    if tp > gpu.gpus_per_node:
        raise ShardwiseError(f"{where}.tp: {tp} exceeds the {gpu.gpus_per_node} GPUs of a {gpu.name} node; keep tp within a node and use pp or replicas")
    if pp > model.layers:
        raise ShardwiseError(f"{where}.pp: {pp} exceeds the {model.layers} layers of {model.name}")


@dataclass(frozen=True)
class Pool:
    """`replicas` copies of a tp x pp replica of `gpu`."""

    name: str
    gpu: GPU
    tp: int
    pp: int
    replicas: int
    engine: EngineSpec
    timer: StepTimer
    capacity: KVCapacity
    price_usd_per_gpu_hour: float
    classes: tuple[LengthClass, ...] | None = None
    adapters: AdapterCost | None = None  # LoRA adapters served on this pool
    adapter_seed: int = 0  # seed of the requests' adapter draws (the workload's)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def usd_per_hour(self) -> float:
        return self.gpus * self.price_usd_per_gpu_hour

    @property
    def engines(self) -> int:
        return self.replicas * self.pp

    @property
    def blocks_per_engine(self) -> int:
        return self.capacity.num_blocks // self.pp

    def describe(self) -> str:
        e = self.engine
        mode = "chunked" if e.chunked_prefill else "prefill-first"
        lora = ""
        if self.adapters is not None:
            a = self.adapters.spec
            lora = f", {a.count} adapters r{a.rank} in {a.gpu_slots} slots"
        return f"{self.replicas}x {self.gpu.name} tp{self.tp} pp{self.pp} ({mode}, seqs {e.max_num_seqs}, tokens {e.max_num_batched_tokens}{lora})"

    def check_requests(self, input_len: np.ndarray, output_len: np.ndarray) -> None:
        """Every request must fit in one engine's KV cache (and, prefill-first, in the token budget)."""
        per_engine = self.blocks_per_engine * self.engine.block_size
        worst = int(np.max(input_len + output_len))
        if worst + self.engine.block_size > per_engine:
            raise ShardwiseError(
                f"{self.name}: a request needs {worst} tokens of KV cache but a {self.gpu.name} tp{self.tp} pp{self.pp} engine holds "
                f"{per_engine}; raise tp, lower pp, or cap lengths with engine.max_model_len"
            )
        if not self.engine.chunked_prefill and int(np.max(input_len)) > self.engine.max_num_batched_tokens:
            raise ShardwiseError(
                f"{self.name}: prompts up to {int(np.max(input_len))} tokens exceed max_num_batched_tokens "
                f"({self.engine.max_num_batched_tokens}) with chunked_prefill false; raise the budget or enable chunked_prefill"
            )


def make_pool(
    name: str,
    model: ModelSpec,
    precision: str,
    bytes_per_element: float,
    gpu: str | GPU,
    tp: int,
    pp: int,
    replicas: int,
    engine: EngineSpec,
    constants: ServingConstants,
    price_usd_per_gpu_hour: float | None = None,
    classes: list[LengthClass] | None = None,
    adapters: AdapterSpec | None = None,
    adapter_seed: int = 0,
) -> Pool:
    """`adapters`: LoRA adapters served on the pool; their GPU slots come out of the KV cache."""
    g = get_gpu(gpu)
    check_layout(model, g, tp, pp, name)
    g.peak_flops(precision)  # raises a clear error for a precision the GPU lacks
    timer = StepTimer(model, g, tp, pp, precision, bytes_per_element, constants)
    cost = AdapterCost(adapters, model, timer) if adapters is not None else None
    cap = kv_capacity(model, g, tp, pp, bytes_per_element, engine.gpu_memory_utilization, engine.block_size,
                      engine.max_num_batched_tokens, engine.max_num_seqs, constants,
                      cost.reserved_bytes_per_gpu if cost is not None else 0.0)
    price = price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else g.price_usd_per_hour
    if price is None:
        raise ShardwiseError(f"{g.name} has no list price in the catalog; set price_usd_per_gpu_hour in the pool")
    return Pool(name, g, tp, pp, replicas, engine, timer, cap, float(price), tuple(classes) if classes else None, cost, adapter_seed)
