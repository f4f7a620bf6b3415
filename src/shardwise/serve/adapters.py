"""Serving many LoRA adapters on one base model (S-LoRA, Sheng et al. 2023, arXiv 2311.03285; Punica, Chen
et al. 2023, arXiv 2310.18547), with vLLM's semantics for the knobs (vllm/config/lora.py, vllm/lora/).

- Requests draw their adapter from a popularity law: uniform, or Zipf with P(k) ~ 1/k^s over the adapters
  k = 1..count (s = 1 by default: Zipf's law). S-LoRA's synthetic traces draw index = floor(count * X)
  with X ~ power(alpha) (github.com/S-LoRA/S-LoRA/blob/main/benchmarks/trace.py); its default alpha = 1 (every Table 3 run) makes
  that uniform. Draws use a seeded generator: the same job gives the same adapters.
- Memory: vLLM reserves ``max_loras`` GPU slots at start-up, each sized for ``--max-lora-rank`` (one of
  1, 8, 16, 32, 64, 128, 256, 320, 512: the smallest that holds ``rank``) in the base model's 16-bit
  dtype, for every targeted module; a packed module (q,k,v as qkv_proj; gate,up as gate_up_proj) holds
  all its slices. A target W (in x out) needs A (in x r) and B (r x out): r(in + out) parameters (LoRA Sec.
  4.1), laid out over TP as vLLM's default (not fully sharded) layers do — column-parallel layers keep A
  whole and split B, row-parallel ones split A and keep B (:func:`shardwise.cost.adapters.adapter_params`);
  pipeline stages hold their layers' share. The slots come out of the memory the KV cache would get
  (vLLM profiles with them allocated; S-LoRA's Unified Paging shares one pool), so the KV cache shrinks by
  exactly ``max_loras`` x slot bytes.
- Time per iteration (Punica SGMV / S-LoRA MBGMV kernels: one shrink x A and one expand (xA) B launch per
  packed module and layer, each adapter's weights gathered once per batch): with T tokens and D distinct
  adapters in the batch, max(2 T P / (peak eta_gemm), D P b / (HBM eta_mem)) + launches x t_kernel, P the
  adapter parameters a GPU multiplies (all layers, as the step timer counts them), on the one device model
  (:mod:`shardwise.cost.device`).
- Loads: two LRU caches as vLLM's LRUCacheWorkerLoRAManager: ``max_loras`` GPU slots and ``max_cpu_loras``
  adapters in host memory (vLLM's default: as many as GPU slots); adapters of running requests are never
  evicted. A GPU miss copies the slot over the host link (PCIe 4.0/5.0 x16 = 31.5/63 GB/s per direction,
  PCI-SIG, times the fitted host-link efficiency); a host miss first reads the adapter from a local NVMe
  drive (PCIe 4.0 x4 = 7.88 GB/s, PCI-SIG; a bound: file parsing is not modelled). vLLM activates the
  adapters of a batch synchronously before its forward (set_active_adapters), so a load adds to the step
  that first needs it; S-LoRA's prefetching, which hides loads, is not modelled.
- Scheduling (vLLM V1 scheduler): a batch holds at most ``max_loras`` distinct adapters; a waiting request
  whose adapter would exceed that is skipped and keeps its place in the queue, and later ones may go first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardwise.cost.adapters import adapter_params
from shardwise.cost.step import host_link_gbyte_s
from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_SERVE_ADAPTERS
from shardwise.serve.timing import StepTimer
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import LoraSpec, LoraTarget

#: vLLM's allowed --max-lora-rank values (vllm/config/lora.py, MaxLoRARanks).
VLLM_SLOT_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Packed modules of vLLM's Llama-style models (packed_modules_mapping): one LoRA buffer per packed module.
PACKED_MODULES = {"qkv_proj": ("q", "k", "v"), "o_proj": ("o",), "gate_up_proj": ("gate", "up"), "down_proj": ("down",)}
ADAPTER_BYTES = 2.0  # adapters run in the base model's 16-bit dtype (vLLM lora_dtype auto), fp8 bases too
NVME_GBYTE_S = 7.88  # PCIe 4.0 x4: 16 GT/s x 4 lanes x 128/130 / 8 (PCI-SIG), one NVMe drive
DEFAULT_MAX_LORAS = 8  # SGLang's --max-loras-per-batch default (vLLM's --max-loras default of 1 serialises adapters)


def slot_rank(rank: int) -> int:
    """The --max-lora-rank a vLLM slot needs for adapters of `rank`: the smallest allowed value >= rank."""
    return next(r for r in VLLM_SLOT_RANKS if r >= rank)


class AdapterSpec(BaseModel):
    """LoRA adapters served on one base model (``deployment.adapters``); every request uses one adapter."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    count: int = Field(gt=0, le=MAX_SERVE_ADAPTERS, description="distinct adapters the requests use")
    rank: int = Field(default=16, gt=0, le=VLLM_SLOT_RANKS[-1], description="adapter rank r (GPU slots are "
                      "sized for the smallest vLLM --max-lora-rank that holds it)")
    targets: list[LoraTarget] | Literal["all"] = Field(
        default=["q", "k", "v", "o"], description="linear layers with adapters, or all; default q, k, v, o (S-LoRA's)")
    popularity: Literal["uniform", "zipf"] = Field(default="uniform", description="how requests pick their "
                                                   "adapter: uniform, or zipf (P(k) ~ 1/k^zipf_exponent)")
    zipf_exponent: float = Field(default=1.0, gt=0, le=10, description="popularity zipf: exponent s (1: Zipf's law)")
    max_loras: int | None = Field(default=None, gt=0, le=MAX_SERVE_ADAPTERS, description="adapters a batch may "
                                  f"use = GPU slots (vLLM --max-loras); default min(count, {DEFAULT_MAX_LORAS})")
    max_cpu_loras: int | None = Field(default=None, gt=0, le=MAX_SERVE_ADAPTERS, description="adapters kept in "
                                      "host memory (vLLM --max-cpu-loras); default max_loras, as vLLM")

    @model_validator(mode="after")
    def _check(self) -> AdapterSpec:
        if isinstance(self.targets, list) and not self.targets:
            raise ValueError("targets must name at least one of q, k, v, o, gate, up, down (or be all)")
        if self.max_loras is not None and self.max_loras > self.count:
            raise ValueError(f"max_loras ({self.max_loras}) exceeds count ({self.count}): a batch cannot use more "
                             "adapters than exist; lower max_loras")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.gpu_slots:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) is below max_loras ({self.gpu_slots}): vLLM "
                             "requires max_cpu_loras >= max_loras; raise it or leave it out")
        return self

    @property
    def gpu_slots(self) -> int:
        return self.max_loras if self.max_loras is not None else min(self.count, DEFAULT_MAX_LORAS)

    @property
    def host_slots(self) -> int:
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.gpu_slots

    @property
    def slot_rank(self) -> int:
        return slot_rank(self.rank)

    def packed_targets(self, model: ModelSpec) -> tuple[str, ...]:
        """The model's layers that get adapter buffers: the targets, widened to whole packed modules."""
        if model.is_moe or model.is_mla:
            raise ShardwiseError(f"deployment.adapters: adapters are modelled for dense, standard-attention models; "
                                 f"{model.name} has {'experts' if model.is_moe else 'MLA'}")
        linear = LoraSpec.linear_shapes(model)
        wanted = tuple(linear) if self.targets == "all" else tuple(self.targets)
        missing = [t for t in wanted if t not in linear]
        if missing:
            raise ShardwiseError(f"deployment.adapters.targets: {model.name} has no {', '.join(missing)} projection "
                                 f"({model.mlp} MLP); use some of {', '.join(linear)}")
        return tuple(t for t in linear if any(t in group and set(group) & set(wanted) for group in PACKED_MODULES.values()))

    def packed_modules(self, model: ModelSpec) -> tuple[str, ...]:
        """vLLM module names (--lora-target-modules) of the adapted layers."""
        targets = set(self.packed_targets(model))
        return tuple(name for name, group in PACKED_MODULES.items() if targets & set(group))

    def draw(self, n: int, seed: int) -> np.ndarray:
        """Adapter index of each of `n` requests (deterministic for a seed)."""
        u = np.random.default_rng([seed, 0x10A]).random(n)
        if self.popularity == "uniform":  # floor(count * u), as S-LoRA's generator with alpha = 1
            return np.minimum((u * self.count).astype(np.int64), self.count - 1)
        cdf = np.cumsum(np.arange(1, self.count + 1, dtype=float) ** -self.zipf_exponent)
        return np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), self.count - 1)


@dataclass(frozen=True)
class AdapterCost:
    """Bytes and seconds of `spec`'s adapters on one tp x pp replica (formulas in the module docstring)."""

    spec: AdapterSpec
    model: ModelSpec
    timer: StepTimer

    @cached_property
    def _lora(self) -> LoraSpec:
        """The slots' shape in the training spec's terms (rank, adapted layers), for the shared formula."""
        return LoraSpec(rank=self.spec.slot_rank, targets=self.spec.packed_targets(self.model))

    @cached_property
    def _params_per_layer_per_gpu(self) -> float:
        return adapter_params(self.model, self._lora, self.timer.tp)

    @cached_property
    def slot_bytes_per_gpu(self) -> float:
        """One GPU slot on one GPU (its pipeline stage's layers)."""
        return self._params_per_layer_per_gpu * self.model.layers / self.timer.pp * ADAPTER_BYTES

    @cached_property
    def reserved_bytes_per_gpu(self) -> float:
        """All ``max_loras`` slots: what the KV cache loses on each GPU."""
        return self.spec.gpu_slots * self.slot_bytes_per_gpu

    @cached_property
    def adapter_bytes(self) -> float:
        """One whole adapter (every layer, unsharded), as stored on disk and in host memory."""
        return adapter_params(self.model, self._lora, 1) * self.model.layers * ADAPTER_BYTES

    @cached_property
    def _read_params(self) -> float:
        """Adapter parameters one GPU multiplies per token (all layers: the step timer's convention)."""
        return self._params_per_layer_per_gpu * self.model.layers

    @cached_property
    def _launches_s(self) -> float:
        kernels = 2 * len(self.spec.packed_modules(self.model)) * self.model.layers
        return kernels * self.timer.device.kernel_overhead_s

    def gemm_s(self, tokens: int, distinct: int) -> float:
        """Batched adapter GEMMs of one iteration: `tokens` tokens using `distinct` adapters."""
        if tokens <= 0:
            return 0.0
        t = self.timer
        compute = 2.0 * tokens * self._read_params / t.flop_rate
        memory = distinct * self._read_params * ADAPTER_BYTES / t.mem_rate
        return max(compute, memory) + self._launches_s

    @cached_property
    def _link_efficiency(self) -> float:
        return self.timer.constants.device_constants().step.pcie_efficiency

    @cached_property
    def gpu_load_s(self) -> float:
        """One slot copied from host memory (every GPU of the replica loads its share at once)."""
        link = host_link_gbyte_s(self.timer.gpu) * 1e9 * self._link_efficiency
        return self.slot_bytes_per_gpu / link

    @cached_property
    def host_load_s(self) -> float:
        """One adapter read from local NVMe into host memory."""
        return self.adapter_bytes / (NVME_GBYTE_S * 1e9 * self._link_efficiency)


class AdapterCache:
    """One engine's LRU caches of adapters: GPU slots and host memory (vLLM's two LRU levels)."""

    def __init__(self, cost: AdapterCost):
        self.cost = cost
        self.gpu: OrderedDict[int, None] = OrderedDict()
        self.host: OrderedDict[int, None] = OrderedDict()
        self.gpu_loads = 0
        self.host_loads = 0

    @staticmethod
    def _insert(cache: OrderedDict[int, None], adapter: int, capacity: int, busy: dict[int, int]) -> None:
        if len(cache) >= capacity:
            victim = next((a for a in cache if not busy.get(a)), None)  # least recently used, not running
            if victim is not None:
                del cache[victim]
        cache[adapter] = None

    def activate(self, adapter: int, busy: dict[int, int]) -> float:
        """Make `adapter` resident on the GPU; returns the seconds the load adds to the step."""
        if adapter in self.gpu:
            self.gpu.move_to_end(adapter)
            return 0.0
        spec, seconds = self.cost.spec, self.cost.gpu_load_s
        if adapter in self.host:
            self.host.move_to_end(adapter)
        else:
            self._insert(self.host, adapter, spec.host_slots, busy)
            self.host_loads += 1
            seconds += self.cost.host_load_s
        self._insert(self.gpu, adapter, spec.gpu_slots, busy)
        self.gpu_loads += 1
        return seconds
