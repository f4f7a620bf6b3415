"""TrainingSpec (what to train on, with MoeSpec: how MoE tokens are routed) and TrainPlan (how the work is
split: the parallel degrees and knobs). The plan owns the rank layout: TP innermost, then CP, DP, PP
outermost (Megatron-LM's default order ``tp-cp-ep-dp-pp``; torchtitan's ``ParallelDims``); the expert
layers re-split each stage's tp*cp*dp ranks as etp x ep x expert-dp (MoE Parallel Folding)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_CLUSTER_GPUS, MAX_PIPELINE_RANKS, MAX_PIPELINE_STAGES, MAX_SEQUENCE_TOKENS
from shardwise.specs.layer import Linear
from shardwise.specs.layout import Layout
from shardwise.specs.model import ModelSpec

Precision = Literal["bf16", "fp16", "fp8", "fp4", "fp32"]
Recompute = Literal["none", "selective", "full"]
Framework = Literal["megatron", "torchtitan", "fsdp", "deepspeed", "composer", "maxtext", "internevo"]
Offload = Literal["none", "optimizer", "optimizer+params"]
#: Low-precision scaling recipes (:mod:`shardwise.cost.lowp`): FP8 ones for precision fp8, FP4 ones for fp4.
FP8_RECIPES = ("tensorwise", "rowwise", "blockwise", "mxfp8", "delayed")
FP4_RECIPES = ("nvfp4", "mxfp4")
Recipe = Literal["auto", "tensorwise", "rowwise", "blockwise", "mxfp8", "delayed", "nvfp4", "mxfp4"]
#: GPU generations whose tensor cores run each recipe natively: MX and NVFP4 block scaling are Blackwell
#: features (NVIDIA Blackwell architecture technical brief; Transformer Engine's MXFP8/NVFP4 recipes need
#: sm100); 1x128/128x128 blockwise FP8 runs on Hopper and later (Transformer Engine Float8BlockScaling,
#: DeepSeek-V3 report Sec. 3.3). Recipes not listed run wherever the GPU has FP8.
RECIPE_ARCHS = {"mxfp8": frozenset({"blackwell"}), "nvfp4": frozenset({"blackwell"}), "mxfp4": frozenset({"blackwell"}),
                "blockwise": frozenset({"hopper", "blackwell"})}
CpComm = Literal["p2p", "allgather", "a2a", "a2a+p2p"]
Dispatcher = Literal["alltoall", "allgather", "deepep"]

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5, "fp32": 4}
Method = Literal["full", "lora", "qlora"]
LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]


class LoraSpec(BaseModel):
    """Low-rank adapters (Hu et al. 2021, LoRA) on a frozen base, optionally quantized (Dettmers et al.
    2023, QLoRA). Defaults: the QLoRA paper's setting (artidoro/qlora scripts: r 64, alpha 16, every
    linear layer, dropout 0.05, NF4 with double quantization, paged AdamW, bf16 adapters)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    rank: int = Field(default=64, gt=0, le=65536, description="adapter rank r")
    alpha: float = Field(default=16.0, gt=0, description="adapter scale alpha (alpha / r scales the update; no cost effect)")
    targets: tuple[LoraTarget, ...] | None = Field(
        default=None, min_length=1, description="linear layers that get adapters; default: every linear layer of the model")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="dropout on the adapter input (0: no extra activations)")
    base_format: Literal["nf4", "int8", "fp8"] | None = Field(
        default=None, description="qlora: frozen base weights format; default nf4 (lora keeps the training precision)")
    double_quant: bool = Field(default=True, description="nf4: quantize the block constants too (QLoRA Sec. 3)")
    paged_optimizer: bool | None = Field(
        default=None, description="optimizer states page to host memory under pressure; default: true for qlora")
    adapter_dtype: Literal["bf16", "fp32"] = Field(
        default="bf16", description="adapter weights and gradients (PEFT upcasts to fp32; QLoRA casts to bf16)")

    @staticmethod
    def linears(model: ModelSpec) -> dict[str, Linear]:
        """The linear layers adapters can target, by name: a dense layer's attention and MLP linears from
        the layer's description (:meth:`ModelSpec.linears`; Hugging Face module names q/k/v/o_proj,
        gate/up/down_proj; a GeLU MLP has up and down only)."""
        return {lin.name: lin for lin in model.linears() if lin.block in ("attention", "mlp")}

    @staticmethod
    def linear_shapes(model: ModelSpec) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer adapters can target (:meth:`linears`)."""
        return {name: (lin.in_features, lin.out_features) for name, lin in LoraSpec.linears(model).items()}

    def target_linears(self, model: ModelSpec) -> tuple[Linear, ...]:
        """The adapted linear layers; ShardwiseError when the model has no such layer."""
        if model.is_moe or model.is_mla:
            raise ShardwiseError(f"training.method: adapters are modelled for dense, standard-attention models; "
                                 f"{model.name} has {'experts' if model.is_moe else 'MLA'} (use method: full)")
        linear = self.linears(model)
        missing = [t for t in self.targets or () if t not in linear]
        if missing:
            raise ShardwiseError(f"training.lora.targets: {model.name} has no {', '.join(missing)} projection "
                                 f"({model.mlp} MLP); use some of {', '.join(linear)}")
        return tuple(linear[t] for t in (self.targets or tuple(linear)))

    def shapes(self, model: ModelSpec) -> dict[str, tuple[int, int]]:
        """(in, out) of each adapted layer; ShardwiseError when the model has no such layer."""
        return {lin.name: (lin.in_features, lin.out_features) for lin in self.target_linears(model)}


class MoeSpec(BaseModel):
    """How a mixture-of-experts model routes its tokens at run time (the job file's `moe:` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    capacity_factor: float | None = Field(
        default=None, gt=0, le=64, description="expert capacity as a multiple of the mean tokens per expert; tokens "
        "beyond it are dropped and each expert's input is padded to it; None = dropless")
    imbalance: float = Field(
        default=1.2, ge=1, le=64, description="dropless routing: tokens of the busiest expert-parallel rank over the "
        "mean (sets the slowest rank's expert GEMMs and all-to-all); assumed 1.2 when not measured")
    dispatcher: Dispatcher = Field(
        default="alltoall", description="token dispatcher: alltoall (Megatron-Core), allgather (tokens gathered over "
        "the expert group) or deepep (DeepEP: one copy per destination node, fp8 dispatch in fp8 recipes)")
    grouped_gemm: bool = Field(
        default=True, description="the local experts' GEMMs as one grouped GEMM (Megatron-Core --moe-grouped-gemm, "
        "torchtitan's grouped_mm); false: one GEMM per expert in a loop (Megatron-Core's SequentialMLP)")
    overlap_a2a: bool | None = Field(
        default=None, description="the expert-parallel all-to-alls hidden under another micro-batch's compute "
        "(Megatron-Core --overlap-moe-expert-parallel-comm; DualPipe does it by design); None = the stack's share")

    @property
    def load_factor(self) -> float:
        """Tokens the busiest expert-parallel rank processes over the mean: the capacity when tokens are
        padded to it, else the imbalance ratio."""
        return self.capacity_factor if self.capacity_factor is not None else self.imbalance

    def assumption(self) -> str:
        """The load-balance assumption in words (printed with an estimate)."""
        if self.capacity_factor is not None:
            return f"capacity factor {self.capacity_factor:g}: tokens over capacity dropped, inputs padded to it"
        return f"dropless, busiest expert rank at {self.imbalance:g}x the mean tokens"


class TrainingSpec(BaseModel):
    """Sequence length, global batch (sequences), precision and, optionally, tokens to train."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seq_len: int = Field(gt=0, le=MAX_SEQUENCE_TOKENS, description="tokens per sequence")
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    precision: Precision = Field(default="bf16", description="GEMM precision; fp8 and fp4 keep bf16 weights and "
                                 "activations and cast the GEMM inputs (fp8_recipe)")
    fp8_recipe: Recipe = Field(
        default="auto", description="low-precision scaling: tensorwise, rowwise, blockwise, mxfp8 or delayed (fp8); "
        "nvfp4 or mxfp4 (fp4, Blackwell); auto = the stack's default recipe")
    tokens: float | None = Field(default=None, gt=0, description="tokens to train, for days and dollars; write "
                                 "15.0e+12 (a dot and a signed exponent): YAML 1.1 readers take 15e12 as a string")
    grad_dtype: Literal["bf16", "fp32"] = Field(
        default="fp32", description="gradient accumulation/reduction dtype (Megatron main_grad: fp32)"
    )
    framework: Framework = Field(
        default="megatron",
        description="software stack that runs the job: its kernels, fusion and overlap (data/stacks.yaml)",
    )
    compile: bool | None = Field(default=None, description="torch.compile / XLA fusion; None = the stack's default")
    attention_kernel: Literal["auto", "fa1", "fa2", "fa3", "cudnn"] = Field(
        default="auto", description="fused attention kernel (FlashAttention 1/2/3); auto = the stack's choice for the GPU"
    )
    moe: MoeSpec = Field(default_factory=MoeSpec, description="MoE routing knobs (also written as the job file's top-level moe: section)")
    expandable_segments: bool | None = Field(
        default=None, description="PyTorch caching allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True): less reserved-but-unused memory; None = the stack's default")

    @model_validator(mode="after")
    def _check_recipe(self) -> TrainingSpec:
        r = self.fp8_recipe
        if r == "auto":
            return self
        if self.precision == "fp8" and r not in FP8_RECIPES:
            raise ValueError(f"fp8_recipe {r!r} is an fp4 recipe; with precision fp8 use one of {', '.join(FP8_RECIPES)}")
        if self.precision == "fp4" and r not in FP4_RECIPES:
            raise ValueError(f"fp8_recipe {r!r} is an fp8 recipe; with precision fp4 use one of {', '.join(FP4_RECIPES)}")
        if self.precision not in ("fp8", "fp4"):
            raise ValueError(f"fp8_recipe {r!r} needs precision fp8 or fp4 (precision is {self.precision}); leave it auto")
        return self

    @property
    def low_precision(self) -> bool:
        """GEMMs run in fp8 or fp4 (the rest of the model in bf16)."""
        return self.precision in ("fp8", "fp4")

    method: Method = Field(default="full", description="full fine-tune / pre-training, lora (frozen base, adapters) or "
                           "qlora (quantized frozen base, adapters)")
    lora: LoraSpec | None = Field(default=None, description="adapter settings for method lora / qlora")

    @model_validator(mode="after")
    def _check_method(self) -> TrainingSpec:
        if self.method == "full" and self.lora is not None:
            raise ValueError("lora: adapter settings need method: lora or qlora (method is full); set the method or drop lora")
        if self.method == "lora" and self.lora is not None and self.lora.base_format is not None:
            raise ValueError("lora.base_format: a quantized base needs method: qlora; set method: qlora or drop base_format")
        return self

    @property
    def adapter(self) -> LoraSpec | None:
        """The resolved adapter settings (method defaults filled in), or None for a full fine-tune."""
        if self.method == "full":
            return None
        spec = self.lora or LoraSpec()
        qlora = self.method == "qlora"
        return spec.model_copy(update={
            "base_format": (spec.base_format or "nf4") if qlora else None,
            "paged_optimizer": qlora if spec.paged_optimizer is None else spec.paged_optimizer,
        })

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (fp8/fp4 training keeps activations in bf16)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def weight_bytes(self) -> int:
        """Bytes per working weight (fp8/fp4 recipes keep bf16 weights and cast per GEMM)."""
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
    cp_comm: CpComm = Field(default="p2p", description="context-parallel attention: p2p (ring, K/V passed under the "
                            "attention), allgather (K/V gathered first), a2a (Ulysses all-to-all over heads) or a2a+p2p "
                            "(Ulysses inside, ring across)")
    ulysses: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS, description="cp_comm a2a+p2p: the all-to-all part "
                                "of cp; None = the cp ranks in one NVLink domain")
    ep: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS, description="expert-parallel degree (MoE): ranks sharing the "
                    "experts; ep * etp divides tp * cp * dp (MoE Parallel Folding)")
    etp: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS, description="expert tensor-parallel degree: ranks "
                            "splitting each expert; None = tp (Megatron-Core's default)")
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
    offload_device: Literal["cpu", "nvme"] = Field(
        default="cpu", description="where offloaded states live: cpu (host DRAM, ZeRO-Offload) or nvme (the node's "
        "NVMe drives behind pinned host buffers, ZeRO-Infinity; needs zero 3); docs/offload.md")
    offload_activations: float = Field(
        default=0.0, ge=0.0, le=1.0, description="share (0 to 1) of each micro-batch's saved activations copied to "
        "host memory after its forward and fetched back before its backward (PipeOffload, Wan et al. 2025); the "
        "peak activation memory falls by that share but one micro-batch's worth stays in flight; the copies hide "
        "behind the schedule's forward-to-backward gap, the rest adds to the step (cost/act_offload.py, docs/offload.md)")
    offload_activations_policy: Literal["uniform", "selective"] = Field(
        default="uniform", description="where offload_activations goes: uniform (every pipeline rank offloads the "
        "share) or selective (the same bytes taken from the ranks with the highest activation peaks first, the "
        "early stages whose activations live longest; PipeOffload's selective offload across ranks: the peak "
        "falls faster than the share); cost/act_offload.py")
    reshard_after_forward: bool | None = Field(
        default=None, description="zero 3: free each layer's gathered parameters after its forward (true: gathered "
        "again for the backward and every micro-batch) or keep them for the step (false: FSDP2 "
        "reshard_after_forward=False; under pipeline parallelism the gradients then accumulate unsharded until the "
        "last micro-batch); None = the stack's rule (torchtitan: false with pp > 1)")
    tp_overlap: Literal["auto", "none", "bulk", "pipelined", "async"] = Field(
        default="auto", description="tensor-parallel communication overlap: none (the backward's default share only), "
        "bulk (backward collectives beside the independent GEMMs), pipelined (also the forward, split in tp chunks: "
        "Megatron-LM --tp-comm-overlap), async (forward and backward split: torchtitan async TP); auto = the stack's "
        "default (data/stacks.yaml)")
    microbatch_group: int | None = Field(
        default=None, gt=0, description="interleaved schedules: micro-batches run through one model chunk before the "
        "next (N; Megatron-LM --microbatch-group-size-per-virtual-pipeline-stage, Llama 3's tunable N); fewer keeps "
        "fewer activations in flight, more hides the point-to-point waits; None = pp (Megatron-LM's default)")

    @property
    def sp(self) -> bool:
        """Sequence parallelism is effective only with tp > 1."""
        return self.sequence_parallel and self.tp > 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree (etp, else tp)."""
        return self.etp or self.tp

    @property
    def cp_a2a(self) -> int:
        """Ranks of cp that exchange heads by all-to-all (Ulysses): cp for a2a, ulysses for a2a+p2p, else 1."""
        if self.cp_comm == "a2a":
            return self.cp
        return (self.ulysses or 1) if self.cp_comm == "a2a+p2p" else 1

    def degrees(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp or 0, "pp": self.pp, "vpp": self.vpp, "ep": self.ep}

    def stride(self, dim: str) -> int:
        """Stride of a `dim` group in the global rank order (:meth:`shardwise.specs.layout.Layout.stride`:
        TP innermost, then CP, DP, PP; the expert layers re-split a stage's ranks as etp, ep, expert-dp)."""
        return int(Layout.of(self).stride(dim))
