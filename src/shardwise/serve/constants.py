"""Serving's engine constants. The GPU itself is the one device model of training and serving
(:mod:`shardwise.cost.device`, constants in :mod:`shardwise.cost.constants`): GEMM and attention
efficiency per GPU family are fitted on the training runs, the HBM streaming efficiency per GPU family
on the serving runs (decode streams the weights), in one fit, ``scripts/fit_constants.py``
(:mod:`shardwise.calibration.serving_fit`), which writes both into ``data/fitted_constants.json``.
The values here are the starting points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

from shardwise.cost.constants import Constants, default_constants, fitted_data


@dataclass(frozen=True)
class ServingConstants:
    """Engine-level constants (not GPU specific) and the device constants they run on."""

    step_overhead_s: float = 1.5e-3  # fitted: scheduling, input prep, sampling, launch gaps per iteration
    per_seq_overhead_s: float = 10e-6  # fitted: per running sequence per iteration (sampling, detokenize, bookkeeping)
    frontend_s: float = 15e-3  # fitted: vLLM's API server + tokenization before a request reaches the scheduler
    sglang_frontend_s: float = 15e-3  # fitted: the same for SGLang (its own server and tokenizer manager)
    link_efficiency: float = 0.8  # assumed: achieved/peak of the link carrying a disaggregated KV transfer
    non_torch_gib: float = 1.25  # assumed: CUDA context, cuBLAS workspaces, CUDA graphs, NCCL buffers per GPU (vLLM profiling)
    attention_kernel: str = "fa3"  # cited: vLLM/SGLang run FlashAttention-3 (or FlashInfer) on Hopper, FlashAttention-2 before
    device: Constants | None = None  # the device model's constants (None: the shipped ones)

    def frontend_for(self, engine: str) -> float:
        """Seconds from a request's arrival at the API server to the scheduler, for "vllm" or "sglang"."""
        return self.sglang_frontend_s if engine == "sglang" else self.frontend_s

    def device_constants(self) -> Constants:
        return self.device if self.device is not None else default_constants()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "device"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServingConstants:
        known = {f.name for f in fields(cls)} - {"device"}
        return cls(**{k: v for k, v in data.items() if k in known})


@lru_cache(maxsize=1)
def serving_constants() -> ServingConstants:
    """Defaults overlaid with the fitted engine constants in ``data/fitted_constants.json``."""
    data = fitted_data().get("serving", {}).get("constants")
    return ServingConstants.from_dict(data) if data else ServingConstants()
