"""TrainingSpec (what to train on) and TrainPlan (how the work is split: the parallel degrees and
knobs). The plan owns the rank layout: TP innermost, then CP, DP, PP outermost (Megatron-LM's
default order ``tp-cp-ep-dp-pp``; torchtitan's ``ParallelDims``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shardwise.limits import MAX_CLUSTER_GPUS, MAX_PIPELINE_RANKS, MAX_PIPELINE_STAGES, MAX_SEQUENCE_TOKENS

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
Recompute = Literal["none", "selective", "full"]

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


class TrainingSpec(BaseModel):
    """Sequence length, global batch (sequences), precision and, optionally, tokens to train."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seq_len: int = Field(gt=0, le=MAX_SEQUENCE_TOKENS)
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    precision: Precision = "bf16"
    tokens: float | None = Field(default=None, gt=0, description="tokens to train, for days and dollars")
    grad_dtype: Literal["bf16", "fp32"] = Field(
        default="fp32", description="gradient accumulation/reduction dtype (Megatron main_grad: fp32)"
    )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (fp8 training keeps activations in bf16)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def weight_bytes(self) -> int:
        """Bytes per working weight (fp8 recipes keep bf16 weights and cast per GEMM)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def grad_bytes(self) -> int:
        return 4 if self.grad_dtype == "fp32" or self.precision == "fp32" else 2


class TrainPlan(BaseModel):
    """Parallel degrees and knobs of one training plan. `dp=None` means "derive from the GPU count"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS)
    pp: int = Field(default=1, gt=0, le=MAX_PIPELINE_RANKS)
    vpp: int = Field(default=1, gt=0, le=MAX_PIPELINE_STAGES, description="virtual stages (model chunks) per pipeline rank")
    dp: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS)
    cp: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS)
    ep: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS)
    zero: Literal[0, 1, 2, 3] = 1
    sequence_parallel: bool = False
    recompute: Recompute = "selective"
    micro_batch: int = Field(default=1, gt=0)
    schedule: str = "1f1b"
    flash_attention: bool = True
    overlap_grad_reduce: bool = True

    @property
    def sp(self) -> bool:
        """Sequence parallelism is effective only with tp > 1."""
        return self.sequence_parallel and self.tp > 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def degrees(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp or 0, "pp": self.pp, "vpp": self.vpp, "ep": self.ep}

    # Rank layout (TP innermost, then CP, DP, PP): the stride of each group in the global rank order.
    def stride(self, dim: str) -> int:
        dp = self.dp or 1
        return {"tp": 1, "cp": self.tp, "dp": self.tp * self.cp, "pp": self.tp * self.cp * dp}[dim]
