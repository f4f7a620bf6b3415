"""A pool of identical replicas, resolved: GPU, layout, engine knobs, step timer, KV capacity, price.

A replica with pp > 1 runs pp virtual engines (vLLM v0's pipeline-parallel scheduling), each with
1/pp of the replica's KV blocks and its own scheduler; the router treats them as separate targets.
A replica with dp_attention data-parallel attention ranks (MoE) is simulated as one engine whose budget
(max_num_seqs, max_num_batched_tokens, KV blocks) is dp times one rank's: the ranks step in lockstep
(:mod:`shardwise.serve.timing`) and vLLM's and SGLang's DP coordinators balance requests over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.serve.adapters import AdapterCost, AdapterSpec
from shardwise.serve.config import EngineSpec, LengthClass
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import KVCapacity, kv_capacity
from shardwise.serve.precision import Precision
from shardwise.serve.timing import StepTimer
from shardwise.specs.hardware import GPU, get_gpu
from shardwise.specs.model import ModelSpec


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, 64) + 1) if n % d == 0)


def check_layout(model: ModelSpec, gpu: GPU, tp: int, pp: int, where: str, dp: int = 1, expert_parallel: bool = False) -> None:
    """TP must divide the attention heads and stay inside a node; PP must not exceed the layers; data-parallel
    attention needs an MoE model with expert parallelism, and the EP GPUs must divide the experts."""
    if dp > 1 and not (model.is_moe and expert_parallel):
        fix = "set expert_parallel: true" if model.is_moe else f"{model.name} is dense: use replicas"
        raise ShardwiseError(f"{where}.dp_attention: {dp} data-parallel attention ranks run the MoE layers expert-parallel; {fix}")
    if expert_parallel:
        if not model.is_moe:
            raise ShardwiseError(f"{where}.expert_parallel: {model.name} has no experts; drop expert_parallel")
        if model.experts % (tp * dp):
            raise ShardwiseError(f"{where}: {tp * dp} expert-parallel GPUs (tp x dp_attention) do not divide the {model.experts} "
                                 f"experts of {model.name}; use a divisor of {model.experts}")
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
    dp: int = 1  # data-parallel attention ranks per replica (MoE)
    expert_parallel: bool = False

    @property
    def gpus(self) -> int:
        return self.replica_gpus * self.replicas

    @property
    def replica_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @cached_property
    def sim_engine(self) -> EngineSpec:
        """The knobs the simulated engine runs with: one rank's, times the dp ranks it stands for."""
        e = self.engine
        if self.dp == 1:
            return e
        return e.model_copy(update={"max_num_seqs": e.max_num_seqs * self.dp, "max_num_batched_tokens": e.max_num_batched_tokens * self.dp})

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
        mode = ("chunked" if e.chunked_prefill else "prefill-first") + ("" if e.policy() == "vllm-v1" else f", {e.policy()}")
        lora = ""
        if self.adapters is not None:
            a = self.adapters.spec
            lora = f", {a.count} adapters r{a.rank} in {a.gpu_slots} slots"
        layout = f"tp{self.tp} pp{self.pp}" + (f" dp{self.dp}" if self.dp > 1 else "") + (f" ep{self.timer.ep}" if self.expert_parallel else "")
        return f"{self.replicas}x {self.gpu.name} {layout} ({mode}, seqs {e.max_num_seqs}, tokens {e.max_num_batched_tokens}{lora})"

    def check_requests(self, input_len: np.ndarray, output_len: np.ndarray) -> None:
        """Every request must fit in one engine's KV cache (and, prefill-first, in the token budget)."""
        per_engine = self.blocks_per_engine // self.dp * self.engine.block_size  # one rank holds a request
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
    precision: Precision,
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
    dp: int = 1,
    expert_parallel: bool = False,
    expert_imbalance: float = 1.0,
    acceptance_rate: float | None = None,
) -> Pool:
    """`adapters`: LoRA adapters served on the pool; their GPU slots come out of the KV cache. `dp`,
    `expert_parallel`, `expert_imbalance`: an MoE replica's data-parallel attention ranks and experts.
    `acceptance_rate`: the workload's, for the engine's speculative decoding."""
    g = get_gpu(gpu)
    check_layout(model, g, tp, pp, name, dp, expert_parallel)
    g.peak_flops(precision.activations)  # raises a clear error for a precision the GPU lacks
    ep = tp * dp if expert_parallel else 1
    timer = StepTimer(model, g, tp, pp, precision, constants, dp, ep, expert_imbalance, engine.overlap_scheduling())
    draft_weights = draft_kv = 0.0
    if engine.speculative is not None:
        from shardwise.serve.speculative import make_spec_timer

        timer, draft_weights, draft_kv = make_spec_timer(timer, engine.speculative, acceptance_rate)
    cost = AdapterCost(adapters, model, timer) if adapters is not None else None
    cap = kv_capacity(model, g, tp, pp, precision, engine.gpu_memory_utilization, engine.block_size,
                      engine.max_num_batched_tokens, engine.max_num_seqs, constants,
                      cost.reserved_bytes_per_gpu if cost is not None else 0.0, dp, ep, draft_weights, draft_kv)
    price = price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else g.price_usd_per_hour
    if price is None:
        raise ShardwiseError(f"{g.name} has no list price in the catalog; set price_usd_per_gpu_hour in the pool")
    return Pool(name, g, tp, pp, replicas, engine, timer, cap, float(price), tuple(classes) if classes else None, cost, adapter_seed,
                dp, expert_parallel)
