"""Serving precision: the weights' format and the KV cache's, what each costs in memory and how fast its
kernels run on a GPU.

Weights (the linear layers of the transformer blocks: QKV, output, MLP and expert matrices; the
embedding, LM head, router and norms stay 16-bit, as the FP8/INT4/NVFP4 checkpoints of llm-compressor,
AutoAWQ, ModelOpt and AMD Quark leave them):

- ``bf16`` / ``fp16``: 2 B per weight; GEMMs at the 16-bit peak x the GPU family's GEMM efficiency.
- ``fp8`` (W8A8, dynamic per-token activation scales): 1 B; GEMMs at the FP8 peak x the family's FP8 GEMM
  efficiency (the training fit's, :mod:`shardwise.cost.lowp`). On a GPU without FP8 tensor cores (A100)
  vLLM runs FP8 checkpoints weight-only through its FP8 Marlin kernel: 1 B read, 16-bit math.
- ``int8`` / ``int4`` (weight-only W8A16 / W4A16, GPTQ or AWQ with 128-element groups): 1 B and
  0.5 + 2/128 B (an fp16 scale per group); the Marlin kernels dequantise inside the tensor-core main
  loop, so a weight-only GEMM reads the small weights and computes at the 16-bit rate (Frantar et al.
  2024, "MARLIN": near-ideal 4x speedups up to batch 16-32, i.e. memory-bound on the 4-bit bytes).
- ``fp4`` (W4A4 NVFP4: an FP8 scale per 16 elements): 0.5 + 1/16 B; GEMMs at the FP4 peak x the family's
  FP4 GEMM efficiency where the GPU has FP4 tensor cores (Blackwell, MI355X), weight-only elsewhere.

KV cache: ``bf16``/``fp16`` 2 B per element, ``fp8`` 1 B. Decode attention reads the cache (memory-bound):
its bytes halve in FP8. Prefill attention with an FP8 cache runs FlashAttention-3's FP8 path on Hopper
and Blackwell (queries quantised too): FA3 reaches ~1.2 PFLOP/s in FP8 against 740 TFLOP/s in BF16 on
H100 (Shah et al. 2024, Abstract), a speed-up of 1.2/0.74 over the 16-bit kernel; other GPUs dequantise
the cache in the kernel and keep the 16-bit rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

WEIGHT_FORMATS = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")
KV_FORMATS = ("bf16", "fp16", "fp8")
#: Bytes per weight of a block linear (module docstring).
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.0 / 128, "fp4": 0.5 + 1.0 / 16}
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
#: Tensor-core dtype a weight format computes in when the GPU has it (W8A8 / W4A4); the rest are weight-only.
COMPUTE_DTYPE = {"fp8": "fp8", "fp4": "fp4"}
#: FlashAttention-3 FP8 forward over BF16 on H100: ~1.2 PFLOP/s vs 740 TFLOP/s (Shah et al. 2024, Abstract).
FA3_FP8_SPEEDUP = 1200.0 / 740.0
FP8_ATTENTION_ARCHS = frozenset({"hopper", "blackwell"})
#: The shorthand names of `precision:` (a string) -> (weights, KV cache). "fp8" keeps its earlier meaning:
#: FP8 weights and an FP8 KV cache (vLLM --quantization fp8 --kv-cache-dtype fp8).
SHORTHANDS = {"bf16": ("bf16", "bf16"), "fp16": ("fp16", "fp16"), "fp8": ("fp8", "fp8"), "int8": ("int8", "bf16"),
              "int4": ("int4", "bf16"), "fp4": ("fp4", "bf16")}


class PrecisionSpec(BaseModel):
    """`precision:` as a mapping: the weights' format and the KV cache's."""

    model_config = ConfigDict(extra="forbid")

    weights: Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"] = Field(
        default="bf16", description="format of the block linears: bf16, fp16, fp8 (W8A8), int8 / int4 (weight-only, "
                                    "GPTQ/AWQ), fp4 (NVFP4 W4A4)")
    kv_cache: Literal["auto", "bf16", "fp16", "fp8"] = Field(default="auto", description="KV-cache format; auto: the "
                                                             "16-bit activation type (fp16 with fp16 weights, else bf16)")


@dataclass(frozen=True)
class Precision:
    """A deployment's weight and KV-cache formats."""

    weights: str = "bf16"
    kv_cache: str = "bf16"

    @classmethod
    def parse(cls, value: str | dict[str, Any] | PrecisionSpec | Precision) -> Precision:
        """A shorthand string (bf16, fp16, fp8, int8, int4, fp4) or a {weights, kv_cache} mapping."""
        if isinstance(value, Precision):
            return value
        if isinstance(value, str):
            if value not in SHORTHANDS:
                raise ValueError(f"precision must be one of {', '.join(SHORTHANDS)} or {{weights, kv_cache}}, got {value!r}")
            return cls(*SHORTHANDS[value])
        spec = value if isinstance(value, PrecisionSpec) else PrecisionSpec(**value)
        kv = spec.kv_cache if spec.kv_cache != "auto" else ("fp16" if spec.weights == "fp16" else "bf16")
        return cls(spec.weights, kv)

    @property
    def activations(self) -> str:
        """The 16-bit type of activations, the LM head and the unquantised weights."""
        return "fp16" if "fp16" in (self.weights, self.kv_cache) else "bf16"

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_BYTES[self.weights]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv_cache]

    @property
    def label(self) -> str:
        """'bf16', 'fp8' (weights and KV), or 'int4 weights, fp8 KV'."""
        for name, pair in SHORTHANDS.items():
            if pair == (self.weights, self.kv_cache):
                return name
        return f"{self.weights} weights, {self.kv_cache} KV"

    def to_job(self) -> str | dict[str, str]:
        """The `precision:` value of a job file that gives this precision."""
        for name, pair in SHORTHANDS.items():
            if pair == (self.weights, self.kv_cache):
                return name
        return {"weights": self.weights, "kv_cache": self.kv_cache}

    def compute_dtype(self, has_dtype: Callable[[str], bool]) -> str | None:
        """The low-precision tensor-core type the block linears compute in on a GPU whose catalog entry
        `has_dtype(dtype)` says has it; None: 16-bit math (weight-only or 16-bit weights)."""
        dtype = COMPUTE_DTYPE.get(self.weights)
        return dtype if dtype is not None and has_dtype(dtype) else None

    def attention_speedup(self, arch: str) -> float:
        """Prefill attention rate over the 16-bit kernel's (FP8 cache on Hopper/Blackwell: FA3 FP8)."""
        return FA3_FP8_SPEEDUP if self.kv_cache == "fp8" and arch in FP8_ATTENTION_ARCHS else 1.0
