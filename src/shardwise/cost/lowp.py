"""Low-precision (FP8, FP4) training as the recipes run it: which GEMMs run in low precision, how fast,
what the casts cost, what the all-gathers move and what memory the low-precision copies take.

- Which GEMMs: the linear layers of the transformer blocks (QKV, output projection, MLP and expert
  matrices). Attention (FlashAttention in BF16), the LM head, the router and the embedding stay in
  16-bit: Transformer Engine's fp8_autocast covers the transformer layers only and torchao's
  module filter leaves out the output layer and the router (torchao training docs; NVIDIA Transformer
  Engine user guide, "FP8 training").
- GEMM speed: the low-precision peak (FP8, or FP4 on Blackwell) times a fitted efficiency of the GPU
  family (large FP8 GEMMs with per-tensor scales), times the recipe's ratio to per-tensor scaling
  (:class:`~shardwise.cost.constants.LowPrecisionConstants`: per-row scales run a slower epilogue;
  MXFP8 uses Blackwell's block-scaled tensor cores). MFU stays relative to the 16-bit peak.
- Casts (memory-bound, :data:`CAST_BYTES`): every GEMM operand is quantised into the two layouts the
  forward and backward GEMMs read (row-wise for Y = XW, column-wise for the weight gradient X^T dY).
  Bytes per element of a fused kernel (derived from what each recipe computes): delayed scaling takes
  its scale from the amax history, so one pass reads the 16-bit tensor (2 B) and writes both FP8
  layouts (1 + 1 B) = 4 B; current (tensorwise) scaling needs the tensor's amax first, one more read:
  6 B; row-wise scales for the two layouts are reductions along different axes, two quantisation
  passes, the column one after its own amax pass: (2 + 1) + (2 + 2 + 1) = 8 B; 1x128 / 128x128
  blocks and MX 32-element blocks are local to a tile, one pass writes both layouts and the scales:
  4 B (+ 2/32 B of E8M0 scales for MX; a stack that quantises MX operands in one pass per layout, as
  torchao does, reads the tensor twice: 2 x (2 + 1 + 1/32) B in two kernels, `mx_cast_per_layout`);
  NVFP4 writes 0.5 B per layout plus FP8 scales per 16 elements and applies a random Hadamard transform
  to the weight-gradient operands (a second read and quantisation of those: + 2 + 0.5 B): 5.6 B (NVIDIA, "Pretraining LLMs with NVFP4", 2025,
  Sec. 4). Unfused stacks move `stack.elementwise_traffic` times these bytes, like other elementwise
  kernels. Weights are cast once per step where the stack caches them (Transformer Engine,
  `fp8_weight_cache`) or gathers them already in FP8; otherwise at every forward.
- FSDP/ZeRO-3 all-gathers move FP8 weights (1 B) where the stack casts the shard before gathering
  (torchao's float8 all-gather for tensorwise scaling; `fp8_all_gather` in data/stacks.yaml).
- Memory: cached FP8 weights (both layouts, 2 B per parameter of the local shard) are kept through the
  step; Transformer Engine saves the quantised GEMM inputs for the backward (1 B, or 0.5 B in FP4,
  instead of 2 B; `fp8_saved_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.cost.constants import ComputeConstants, Constants
from shardwise.cost.device import Device
from shardwise.cost.numeric import Num
from shardwise.cost.stack import StackProfile
from shardwise.memo import IdentityMemo, cached_hash, dataclass_getstate
from shardwise.specs.hardware import GPU
from shardwise.specs.training import FP4_RECIPES, RECIPE_ARCHS, TrainingSpec

#: Bytes moved per element of a quantised GEMM operand, both layouts, fused kernels (module docstring).
CAST_BYTES = {"delayed": 4.0, "tensorwise": 6.0, "rowwise": 8.0, "blockwise": 4.0, "mxfp8": 4.0 + 2 / 32,
              "nvfp4": 2.0 + 0.5 + 0.5 + 2 / 16 + 2.0 + 0.5, "mxfp4": 2.0 + 0.5 + 0.5 + 2 / 32}
#: Kernels per quantised operand (an amax pass where the recipe needs one, then the cast).
CAST_KERNELS = {"delayed": 1, "tensorwise": 2, "rowwise": 3, "blockwise": 1, "mxfp8": 1, "nvfp4": 2, "mxfp4": 1}
#: Bytes per element of a low-precision GEMM operand.
OPERAND_BYTES = {"fp8": 1.0, "fp4": 0.5}
#: Recipes with 32-element block scales (OCP MX), whose quantisation a stack may run once per layout.
MX_RECIPES = ("mxfp8", "mxfp4")


@dataclass(frozen=True)
class LowPrecision:
    """What a job's recipe changes in the cost of a layer and a step ("none": 16-bit GEMMs)."""

    __hash__ = cached_hash  # keys the layer, rank and comm caches: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    recipe: str = "none"
    operand_bytes: float = 2.0  # bytes per element of a low-precision GEMM operand
    cast_bytes: float = 0.0  # bytes moved per quantised element (both layouts), elementwise traffic included
    cast_kernels: float = 0.0  # kernels per quantised operand
    weights_per_step: bool = True  # weights are quantised once per step (cached, or before an FP8 all-gather)
    gather_bytes: float = 2.0  # bytes per weight element in ZeRO-3/FSDP all-gathers
    weight_copy_bytes: float = 0.0  # kept low-precision weight copies per parameter of the local shard
    saved_input_bytes: float = 2.0  # bytes per saved GEMM-input element

    @property
    def active(self) -> bool:
        return self.recipe != "none"


NO_LOWP = LowPrecision()


def resolve_recipe(training: TrainingSpec, stack: StackProfile, gpu: GPU) -> str:
    """The recipe a job runs: its own, else its stack's default for fp8 (nvfp4 for fp4); "none" for 16-bit."""
    return recipe_on(training, stack, gpu.arch)


def recipe_on(training: TrainingSpec, stack: StackProfile, arch: str | None) -> str:
    """:func:`resolve_recipe` on a GPU architecture (None: any, the stack's default is kept)."""
    if not training.low_precision:
        return "none"
    if training.fp8_recipe != "auto":
        return training.fp8_recipe
    if training.precision == "fp4":
        return FP4_RECIPES[0]
    recipe = stack.fp8_recipe
    archs = RECIPE_ARCHS.get(recipe)
    return recipe if not archs or arch is None or arch in archs else "tensorwise"


def low_precision(training: TrainingSpec, stack: StackProfile, gpu: GPU, recipe: str | None = None) -> LowPrecision:
    """The :class:`LowPrecision` of a job (`recipe` overrides the job's, for the planner's search)."""
    recipe = recipe or resolve_recipe(training, stack, gpu)
    if recipe == "none":
        return NO_LOWP  # one shared value (its hash is computed once)
    operand = OPERAND_BYTES["fp4" if recipe in FP4_RECIPES else "fp8"]
    fp8_gather = recipe in stack.fp8_all_gather
    cast_bytes, cast_kernels = CAST_BYTES[recipe], CAST_KERNELS[recipe]
    if recipe in MX_RECIPES and stack.mx_cast_per_layout:  # one pass per layout: read, write, scales, twice
        cast_bytes, cast_kernels = 2 * (2.0 + operand + 1 / 32), 2
    return LowPrecision(
        recipe=recipe,
        operand_bytes=operand,
        cast_bytes=cast_bytes * stack.elementwise_traffic,
        cast_kernels=cast_kernels,
        weights_per_step=stack.fp8_weight_cache or fp8_gather,
        gather_bytes=1.0 if fp8_gather else float(training.weight_bytes),
        weight_copy_bytes=2.0 * operand if stack.fp8_weight_cache else 0.0,
        saved_input_bytes=operand if stack.fp8_saved_inputs else float(training.activation_bytes),
    )


def recipe_gemm_ratio(recipe: str, constants: Constants) -> float:
    """Speed of the recipe's GEMMs relative to per-tensor scaling at the same precision."""
    lc = constants.lowp
    return {"rowwise": lc.rowwise_gemm_ratio, "blockwise": lc.blockwise_gemm_ratio, "mxfp8": lc.mx_gemm_ratio,
            "mxfp4": lc.mx_gemm_ratio}.get(recipe, 1.0)


def device(gpu: GPU, training: TrainingSpec, constants: Constants, stack: StackProfile, attention_kernel: str,
           lowp: LowPrecision) -> Device:
    """The device model of a job: 16-bit GEMMs, attention and memory-bound kernels as
    :meth:`Device.of`, plus the achieved rate of the recipe's low-precision GEMMs."""
    compute = _COMPUTE(Constants.compute_for, (constants,), gpu.name)
    if not lowp.active:
        return _DEVICES(_device_of, (gpu, compute), training.precision, attention_kernel, 0.0, 2.0)
    dtype = "fp4" if lowp.recipe in FP4_RECIPES else "fp8"
    eff = compute.fp4_gemm_efficiency if dtype == "fp4" else compute.fp8_gemm_efficiency
    rate = gpu.peak_flops(dtype) * eff * recipe_gemm_ratio(lowp.recipe, constants)
    return _DEVICES(_device_of, (gpu, compute), training.precision, attention_kernel, rate, lowp.operand_bytes)


#: A run's few device models, by (the catalog's GPU object, precision, the constants' object, kernel, low-precision
#: rate and operand bytes), and its per-GPU compute constants (shardwise/memo.py): each is a pure function of those.
_COMPUTE = IdentityMemo(64)
_DEVICES = IdentityMemo(256)


def _device_of(gpu: GPU, compute: ComputeConstants, precision: str, kernel: str, rate: float, operand_bytes: float) -> Device:
    return Device.of(gpu, precision, compute, kernel, lowp_flops=rate, lowp_bytes=operand_bytes)


def job_device(gpu: GPU, training: TrainingSpec, constants: Constants, stack: StackProfile,
               attention_kernel: str) -> tuple[Device, LowPrecision]:
    """The device model and the low-precision recipe of a job (what the estimate and the screen share)."""
    lowp = low_precision(training, stack, gpu)
    return device(gpu, training, constants, stack, attention_kernel, lowp), lowp


def cast_s(dev: Device, lowp: LowPrecision, elements: Num, tensors: Num) -> Num:
    """Quantising `elements` GEMM-operand elements held in `tensors` tensors into both layouts
    (memory-bound kernels; bytes per element :data:`CAST_BYTES`); 0 for 16-bit jobs."""
    if not lowp.active:
        return 0.0
    return dev.memory_s(elements * lowp.cast_bytes, tensors * lowp.cast_kernels)
