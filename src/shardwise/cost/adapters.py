"""Fine-tuning with low-rank adapters on a frozen base: LoRA (Hu et al. 2021, arXiv:2106.09685) and
QLoRA (Dettmers et al. 2023, arXiv:2305.14314). Every function takes numbers (or numpy arrays where
said), so the exact estimate and the planner's screen share it.

- Adapter parameters: a target linear layer W (in x out) gets A (in x r) and B (r x out), r(in + out)
  parameters (LoRA Sec. 4.1). Under TP (assumed layout, as Megatron-style adapters shard them): a
  column-parallel layer (q, k, v, gate, up) keeps A whole and splits B's outputs; a row-parallel one
  (o, down) splits A's inputs and keeps B whole. Shapes and TP split come from the layer's description
  (:meth:`shardwise.specs.training.LoraSpec.target_linears`, :mod:`shardwise.specs.layer`).
- Frozen base: no gradients and no optimizer state for it (LoRA Sec. 4.2). Adapter states: weight and
  gradient in the adapter dtype (autograd gradients take the parameter's dtype; no fp32 main-grad
  buffer in PEFT / the Hugging Face Trainer) and Adam's fp32 m and v, 8 B, no master copy — the QLoRA
  reference run (artidoro/qlora qlora.py: LoRA layers cast to bf16, optim paged_adamw_32bit): 12 B
  per adapter parameter; 16 B with fp32 adapters (PEFT's autocast_adapter_dtype).
- Quantized base (QLoRA Sec. 3): NF4 stores 4 bits per weight plus one fp32 absmax per block of 64
  (32/64 = 0.5 bit); double quantization stores those constants as 8-bit floats in blocks of 256 with
  one fp32 constant per block: 8/64 + 32/(64*256) = 0.127 bit, 4.127 bits per weight in all. int8
  (LLM.int8, Dettmers et al. 2022) and fp8 keep 1 B per weight (their per-row / per-tensor scales,
  under 0.1%, are neglected). Only the transformer layers' linear weights are quantized; embeddings,
  LM head and norms stay 16-bit (bitsandbytes replaces nn.Linear but skips lm_head; qlora.py keeps
  embed_tokens and lm_head in bf16).
- Time: base GEMMs run in 16 bits on weights dequantized just before use (bitsandbytes dequantizes a
  4-bit weight to bf16 for every matmul of more than one token): a memory-bound pass reading the packed
  weight and writing the bf16 copy, in the forward, in the input-gradient pass and in each recompute
  (int8 and fp8 bases are timed the same way: their own low-precision GEMMs are not modelled).
  Frozen weights need no weight-gradient GEMMs, so W holds only the adapters' (zero-bubble schedules,
  which fill bubbles with W passes, have almost nothing left to move). Adapter work per target and
  micro-batch of T tokens: x A then (xA) B, 2Tr(in + out) FLOPs, and as much again for the input
  gradient and for the weight gradient (LoRA Sec. 4.2); dropout on the adapter input and the add of
  its output are memory-bound.
- Activations LoRA adds per target (derived from what autograd keeps): xA (T x r) for B's weight
  gradient and, with dropout, the dropped copy of x with its 1-byte mask (PEFT applies a separate
  dropout to each adapted module). Without dropout A's input is the layer input already kept. The base
  layer's own activations are counted as in a full fine-tune (cost/activations.py): an upper bound,
  since autograd need not keep the inputs of a frozen linear layer whose input is not adapted.
- Model FLOPs (the MFU numerator): 4 per frozen weight and token (forward and input gradient, no weight
  gradient), 6 per adapter parameter, attention as for a full fine-tune.
- Memory held outside states and activations: a bf16 copy of the largest dequantized matrix.
- Paged optimizer (QLoRA Sec. 3, NVIDIA unified memory): Adam states are evicted to host memory when
  the GPU runs out and paged back when the update touches them, page by page. So they only take the
  room the rest leaves; what does not fit crosses the host link twice a step (out, then back in).
"""

from __future__ import annotations

import numpy as np

from shardwise.cost.constants import Constants
from shardwise.cost.device import Device
from shardwise.cost.layer import PassCost
from shardwise.cost.memory import ModelStateBytes
from shardwise.cost.numeric import Num
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import LoraSpec, TrainingSpec

# Bits per frozen weight by base format (module docstring).
NF4_BITS = 4.0
NF4_BLOCK = 64
DOUBLE_QUANT_BLOCK = 256
FORMAT_BITS = {"int8": 8.0, "fp8": 8.0}
ADAM_MOMENTS_BYTES = 8.0  # fp32 m and v per trainable parameter
ADAPTER_DTYPE_BYTES = {"bf16": 2.0, "fp32": 4.0}
UVM_PAGE_BYTES = 2 * 2**20  # unified memory migrates in pages of up to 2 MiB (CUDA programming guide, UVM)


def base_bits_per_weight(base_format: str | None, double_quant: bool = True, working_bytes: float = 2.0) -> float:
    """Bits one frozen linear weight occupies: NF4 4 + 32/64 (absmax per block), or with double
    quantization 4 + 8/64 + 32/(64*256) = 4.127 (QLoRA Sec. 3); int8/fp8 8; unquantized the working precision."""
    if base_format is None:
        return 8.0 * working_bytes
    if base_format == "nf4":
        constants = 8.0 / NF4_BLOCK + 32.0 / (NF4_BLOCK * DOUBLE_QUANT_BLOCK) if double_quant else 32.0 / NF4_BLOCK
        return NF4_BITS + constants
    return FORMAT_BITS[base_format]


def adapter_params(model: ModelSpec, lora: LoraSpec, tp: int = 1) -> float:
    """Adapter parameters of one layer on one GPU (r(in + out) per target, TP layout in the docstring)."""
    total = 0.0
    for lin in lora.target_linears(model):
        n_in, n_out = lin.in_features, lin.out_features
        total += lora.rank * (n_in + n_out / tp if lin.parallel == "column" else n_in / tp + n_out)
    return total


def quantized_params(model: ModelSpec) -> int:
    """Linear weights of one transformer layer (what a quantized base stores in its format)."""
    return sum(n_in * n_out for n_in, n_out in LoraSpec.linear_shapes(model).values())


def frozen_weight_bytes(model: ModelSpec, lora: LoraSpec, params: Num, layers: Num, tp: int, working_bytes: float) -> Num:
    """Bytes of the frozen base on a GPU holding `params` parameters (after TP) in `layers` layers: the
    layers' linear weights in the base format, the rest (embeddings, LM head, norms) at the working
    precision. Arrays allowed."""
    linear = layers * quantized_params(model) / tp
    bits = base_bits_per_weight(lora.base_format, lora.double_quant, working_bytes)
    return linear * bits / 8.0 + (params - linear) * working_bytes


def adapter_state_bytes(lora: LoraSpec) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per adapter parameter (module docstring)."""
    b = ADAPTER_DTYPE_BYTES[lora.adapter_dtype]
    return b, b, ADAM_MOMENTS_BYTES


def dequant_buffer_bytes(model: ModelSpec, lora: LoraSpec, tp: int) -> float:
    """The bf16 copy of the largest dequantized weight matrix (0 for an unquantized base)."""
    if lora.base_format is None:
        return 0.0
    return 2.0 * max(n_in * n_out for n_in, n_out in LoraSpec.linear_shapes(model).values()) / tp


def adapter_layer_cost(model: ModelSpec, lora: LoraSpec, tokens: float, tp: int, dev: Device,
                       act_bytes: float, recompute: str, selective_share: float) -> PassCost:
    """What adapters and dequantization add to one layer's F/I/W/recompute for one micro-batch; the
    frozen base's weight-gradient GEMMs are removed by the caller (:func:`frozen_layer`)."""
    gemm = elementwise = 0.0
    kernels = 0
    for lin in lora.target_linears(model):
        n_in, n_out = lin.in_features, lin.out_features
        k_in, n_o = (n_in, n_out / tp) if lin.parallel == "column" else (n_in / tp, n_out)
        gemm += float(dev.gemm_s(tokens, lora.rank, k_in) + dev.gemm_s(tokens, n_o, lora.rank))
        moved = 3 * act_bytes * tokens * n_o  # add B's output to the base output
        if lora.dropout > 0:
            moved += tokens * k_in * (2 * act_bytes + 1)  # read x, write the dropped copy and its mask
        elementwise += moved
        kernels += 2 if lora.dropout > 0 else 1
    adapter_f = gemm + float(dev.memory_s(elementwise, kernels))
    dequant = 0.0
    if lora.base_format is not None:
        bits = base_bits_per_weight(lora.base_format, lora.double_quant)
        weights = quantized_params(model) / tp
        dequant = float(dev.memory_s(weights * (bits / 8.0 + 2.0), len(LoraSpec.linear_shapes(model))))
    forward = adapter_f + dequant
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = selective_share * forward
    else:
        again = 0.0
    return PassCost(f_s=forward, i_s=forward, w_s=gemm, recompute_s=again)


def frozen_layer(base: PassCost, extra: PassCost) -> PassCost:
    """A layer whose base weights are frozen: no base weight-gradient GEMMs, plus the adapters' work."""
    return PassCost(**{**_fields(base + extra), "w_s": extra.w_s})


def _fields(cost: PassCost) -> dict[str, float]:
    return dict(zip(PassCost.__dataclass_fields__, cost.astuple(), strict=True))


def frozen_block(cost: PassCost) -> PassCost:
    """The embedding or LM head of an adapter job: frozen, so no weight gradient (the LM head still
    passes the input gradient back)."""
    return PassCost(**{**_fields(cost), "w_s": 0.0})


def adapter_activation_bytes(model: ModelSpec, lora: LoraSpec, tokens: float, tp: int, recompute: str,
                             act_bytes: float) -> float:
    """Bytes adapters add to what one layer keeps for the backward, per micro-batch (module docstring);
    nothing under full recompute (only the layer input is kept)."""
    if recompute == "full":
        return 0.0
    return adapter_working_bytes(model, lora, tokens, tp, act_bytes)


def adapter_working_bytes(model: ModelSpec, lora: LoraSpec, tokens: float, tp: int, act_bytes: float) -> float:
    """The adapter tensors of one layer while it runs (xA per target, dropped inputs and masks)."""
    total = 0.0
    for lin in lora.target_linears(model):
        k_in = lin.in_features if lin.parallel == "column" else lin.in_features / tp
        total += act_bytes * tokens * lora.rank
        if lora.dropout > 0:
            total += tokens * k_in * (act_bytes + 1)
    return total


def adapter_model_flops_per_token(model: ModelSpec, lora: LoraSpec, base_flops: float) -> float:
    """Training FLOPs per token of an adapter job from the full fine-tune's `base_flops` (6N + attention):
    the frozen weights (layers and LM head) skip their weight gradients (-2N), the adapters add 6 N_adapter."""
    frozen = model.layers * quantized_params(model) + model.hidden * model.vocab
    return base_flops - 2.0 * frozen + 6.0 * model.layers * adapter_params(model, lora)


def paged_optimizer(states: ModelStateBytes, fixed: Num, activations: Num, usable: Num, consts: Constants,
                    host_gbyte_s: float) -> tuple[Num, Num, Num]:
    """(peak bytes, optimizer bytes resident on the GPU, seconds of paging per step) of a rank whose
    optimizer states are paged (module docstring): the states keep the room the weights, gradients,
    fixed memory and `activations` (with fragmentation) leave of `usable`; the rest lives in host memory
    and crosses the host link (`host_gbyte_s`, :func:`shardwise.cost.step.host_link_gbyte_s`) twice a step
    (evicted for the next forward, paged in for the update).
    Arrays allowed."""
    others = states.weights + states.grads + fixed + activations
    free_pages = np.floor(np.maximum(usable - others, 0.0) / UVM_PAGE_BYTES)  # whole pages, so the peak stays <= usable
    resident = np.minimum(free_pages * UVM_PAGE_BYTES, states.optimizer)
    link = host_gbyte_s * 1e9 * consts.step.pcie_efficiency
    return others + resident, resident, 2.0 * (states.optimizer - resident) / link


def adapter_note(model: ModelSpec, training: TrainingSpec, lora: LoraSpec, paged_gib: float = 0.0) -> str:
    """One line for an estimate: what the adapters and the frozen base are, and what the optimizer pages."""
    targets = ", ".join(lora.shapes(model))
    trainable = model.layers * adapter_params(model, lora)
    bits = base_bits_per_weight(lora.base_format, lora.double_quant, training.weight_bytes)
    base = (f"{lora.base_format}{' + double quantization' if lora.base_format == 'nf4' and lora.double_quant else ''}"
            if lora.base_format else training.precision)
    line = (f"{training.method}: frozen base in {base} ({bits:.3f} bits per linear weight, no gradients or optimizer "
            f"state); {trainable / 1e6:,.1f}M adapter parameters (rank {lora.rank} on {targets})")
    if paged_gib:
        line += f"; {paged_gib:.2f} GiB of optimizer states live in host memory (paged optimizer)"
    return line
