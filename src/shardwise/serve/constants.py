"""Serving's named constants: few, physical, per GPU family, fitted by a script from data in the repo.

``scripts/fit_serving_constants.py`` fits the *fitted* ones on the `fit` rows of
``data/serving_measurements.yaml`` and writes ``data/serving_constants.json``; the values here are
the starting points (BLIS's example roofline uses a bandwidth efficiency, ``BwEffConstant``,
of 0.72). GPUs without measurements use their family's values (``cost.constants.DEFAULT_FAMILIES``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from shardwise.cost.constants import DEFAULT_FAMILIES
from shardwise.specs._loading import data_path

CONSTANTS_FILE = "serving_constants.json"


@dataclass(frozen=True)
class DeviceEfficiency:
    """Roofline efficiencies of one GPU family when serving."""

    memory_efficiency: float = 0.72  # fitted: achieved/peak HBM bandwidth streaming weights + KV in decode
    compute_efficiency: float = 0.60  # fitted: achieved/peak dense FLOP/s of prefill GEMMs
    attention_efficiency: float = 0.45  # flash-attention prefill vs peak (FA2 paper: 50-73% fwd on A100; lower at short lengths)


@dataclass(frozen=True)
class ServingConstants:
    """Engine-level constants (not GPU specific) and per-family efficiencies."""

    step_overhead_s: float = 1.5e-3  # fitted: scheduling, input prep, sampling, launch gaps per iteration
    per_seq_overhead_s: float = 10e-6  # fitted: per running sequence per iteration (sampling, detokenize, bookkeeping)
    frontend_s: float = 15e-3  # fitted: API server + tokenization before a request reaches the scheduler
    allreduce_latency_s: float = 8e-6  # one small TP all-reduce (vLLM custom all-reduce, one-shot, NVLink)
    p2p_latency_s: float = 20e-6  # one pipeline-stage activation send
    link_efficiency: float = 0.8  # achieved/peak NIC bandwidth of the prefill-to-decode KV transfer (TP and PP: cost.comm)
    non_torch_gib: float = 1.25  # CUDA context, cuBLAS workspaces, CUDA graphs, NCCL buffers per GPU (vLLM profiling)
    default: DeviceEfficiency = field(default_factory=DeviceEfficiency)
    per_family: dict[str, DeviceEfficiency] = field(default_factory=dict)

    def device(self, gpu_name: str) -> DeviceEfficiency:
        if gpu_name in self.per_family:
            return self.per_family[gpu_name]
        family = DEFAULT_FAMILIES.get(gpu_name)
        return self.per_family.get(family or "", self.default)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in {"default", "per_family"}}
        out["default"] = asdict(self.default)
        out["per_family"] = {k: asdict(v) for k, v in self.per_family.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServingConstants:
        scalars = {f.name: float(data[f.name]) for f in fields(cls) if f.name in data and f.name not in {"default", "per_family"}}
        default = replace(DeviceEfficiency(), **data.get("default", {}))
        families = {k: replace(default, **v) for k, v in data.get("per_family", {}).items()}
        return cls(**scalars, default=default, per_family=families)

    def with_updates(self, scalars: dict[str, float], families: dict[str, dict[str, float]]) -> ServingConstants:
        """A copy with engine scalars and per-family efficiencies replaced (the fit script's step)."""
        fam = dict(self.per_family)
        for name, values in families.items():
            fam[name] = replace(fam.get(name, self.default), **values)
        return replace(self, **scalars, per_family=fam)


@lru_cache(maxsize=1)
def serving_constants() -> ServingConstants:
    """Defaults overlaid with ``data/serving_constants.json`` when the fit script has written it."""
    path = data_path(CONSTANTS_FILE)
    if not path.exists():
        return ServingConstants()
    data = json.loads(path.read_text())
    return ServingConstants.from_dict(data.get("constants", data))
