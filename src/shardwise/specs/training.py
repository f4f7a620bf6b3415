"""TrainingSpec (what to train on) and TrainPlan (how the work is split: the parallel degrees and
knobs). The plan owns the rank layout: TP innermost, then CP, DP, PP outermost (Megatron-LM's
default order ``tp-cp-ep-dp-pp``; torchtitan's ``ParallelDims``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shardwise.limits import MAX_CLUSTER_GPUS, MAX_PIPELINE_RANKS, MAX_PIPELINE_STAGES, MAX_SEQUENCE_TOKENS

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
Recompute = Literal["none", "selective", "full"]
Framework = Literal["megatron", "torchtitan", "fsdp", "deepspeed", "composer", "maxtext"]
Offload = Literal["none", "optimizer", "optimizer+params"]

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


class TrainingSpec(BaseModel):
    """Sequence length, global batch (sequences), precision and, optionally, tokens to train."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seq_len: int = Field(gt=0, le=MAX_SEQUENCE_TOKENS, description="tokens per sequence")
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    precision: Precision = Field(default="bf16", description="GEMM precision; fp8 keeps bf16 weights and activations")
    tokens: float | None = Field(default=None, gt=0, description="tokens to train, for days and dollars")
    grad_dtype: Literal["bf16", "fp32"] = Field(
        default="fp32", description="gradient accumulation/reduction dtype (Megatron main_grad: fp32)"
    )
    framework: Framework = Field(
        default="megatron",
        description="software stack that runs the job: its kernels, fusion and overlap (data/stacks.yaml)",
    )
    compile: bool | None = Field(default=None, description="torch.compile / XLA fusion; None = the stack's default")
    attention_kernel: Literal["auto", "fa1", "fa2", "fa3"] = Field(
        default="auto", description="fused attention kernel (FlashAttention 1/2/3); auto = the stack's choice for the GPU"
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

    tp: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS, description="tensor-parallel degree (Megatron-LM); divides the attention heads")
    pp: int = Field(default=1, gt=0, le=MAX_PIPELINE_RANKS, description="pipeline-parallel degree: pipeline ranks")
    vpp: int = Field(default=1, gt=0, le=MAX_PIPELINE_STAGES, description="virtual stages (model chunks) per pipeline rank")
    dp: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS, description="data-parallel degree; auto or left out: GPUs / (tp * pp * cp)")
    cp: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS, description="context-parallel degree: ranks sharing one sequence; divides seq_len")
    ep: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS, description="expert-parallel degree (MoE): ranks sharing the experts; divides dp * cp")
    zero: Literal[0, 1, 2, 3] = Field(default=1, description="ZeRO stage over the data-parallel group: 0 replicates "
                                      "the model states, 1 shards the optimizer states, 2 also the gradients, 3 also "
                                      "the parameters")
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism (needs tp > 1)")
    recompute: Recompute = Field(default="selective", description="activation recomputation: none, selective "
                                 "(attention core, Korthikanti et al. 2022) or full (every layer)")
    micro_batch: int = Field(default=1, gt=0, description="sequences per micro-batch")
    schedule: str = Field(default="1f1b", description="pipeline schedule (`shardwise schedule list`)")
    flash_attention: bool = Field(default=True, description="fused attention kernel: no attention scores kept "
                                  "for the backward")
    overlap_grad_reduce: bool = Field(default=True, description="overlap the data-parallel gradient reduction "
                                      "with the backward pass")
    dp_shard: int | None = Field(
        default=None,
        gt=0,
        description="ranks of the data-parallel group that shard ZeRO/FSDP states (hybrid sharding, HSDP); None = all",
    )
    offload: Offload = Field(default="none", description="model states kept in host memory (ZeRO-Offload)")

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
