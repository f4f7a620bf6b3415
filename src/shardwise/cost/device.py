"""One device model for training and serving: the time of each kind of operation on one GPU.

- GEMM (M x K) @ (K x N) of 2MNK FLOPs (roofline: Williams et al. 2009):
  t = max(2MNK (1 + d0 (1/M + 1/N + 1/K)) / (peak * eta_gemm), bytes / (HBM * eta_mem)) + t_gemm.
  eta_gemm is the fitted asymptote of large GEMMs. A short dimension costs: short output dimensions
  leave the GPU's multiprocessors part-filled with output tiles, a short reduction amortises each tile's
  pipeline fill and epilogue over few steps (NVIDIA Deep Learning Performance Guide, "Matrix
  Multiplication Background": tile and wave quantisation; CUTLASS "Efficient GEMM": each tile loops
  over K). Rather than pick cuBLAS's tile per problem, the GEMM works as if each dimension were d0
  longer (the first order of prod(1 + d0/D)), d0 fitted on the calibration runs; t_gemm is a fitted
  fixed cost per GEMM (launch). Very short reductions become memory-bound through the bytes term.
- fused attention (FlashAttention-2/3, cuDNN), forward or backward: the tile model of
  :mod:`shardwise.cost.attention` (tile-loop overhead, causal prefix, waves over the SMs, head dimension),
  at the kernel's asymptote eta_attn of the 16-bit peak.
- memory-bound kernels (norms, activations, RoPE, residual adds, casts, softmax):
  t = bytes / (HBM * eta_mem) + kernels * t_kernel.

Every function takes numbers or numpy arrays. Constants: :mod:`shardwise.cost.constants`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.cost.attention import AttentionShape, fitted_attention_shapes, fused_attention_s
from shardwise.cost.constants import ComputeConstants
from shardwise.cost.numeric import Num, maximum
from shardwise.memo import cached_hash, dataclass_getstate
from shardwise.specs.hardware import GPU

# FlashAttention-1 reached 25-40% of A100 peak where FlashAttention-2 reaches 50-73% (Dao 2023, Sec. 1):
# its efficiency relative to FA2's, at the top of both ranges (derived).
FA1_RATIO = 40.0 / 73.0
FA3_ARCHS = frozenset({"hopper", "blackwell"})  # FlashAttention-3 / cuDNN fused attention kernels for them


@dataclass(frozen=True)
class Device:
    """What op timing needs of one GPU at one precision (flat and hashable: on the hot path)."""

    __hash__ = cached_hash  # keys the layer, rank and comm caches: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    peak_flops: float  # dense tensor FLOP/s of 16-bit GEMMs (TF32 for fp32 jobs)
    attention_peak_flops: float  # attention runs in 16-bit even in fp8 recipes
    hbm_bytes_s: float
    gemm_efficiency: float
    gemm_overhead_s: float
    gemm_dim_offset: float  # d0 above (elements)
    attention_efficiency: float  # forward asymptote of the attention kernel in use
    memory_efficiency: float
    kernel_overhead_s: float
    lowp_flops: float = 0.0  # achieved FLOP/s of low-precision (FP8/FP4) GEMMs; 0: none (shardwise.cost.lowp)
    lowp_bytes: float = 2.0  # bytes per element of a low-precision GEMM operand
    sms: int = 108  # streaming multiprocessors: the attention kernel's CTAs run in waves over them
    attention_shape: AttentionShape = AttentionShape()  # the attention kernel's tile-loop constants

    @classmethod
    def of(cls, gpu: GPU, precision: str, constants: ComputeConstants, attention_kernel: str = "fa2",
           lowp_flops: float = 0.0, lowp_bytes: float = 2.0) -> Device:
        """`attention_kernel`: "fa3" (FlashAttention-3) or "cudnn" (cuDNN fused attention: Transformer Engine,
        XLA), both Hopper and later (FA2 elsewhere), "fa2"
        or "fa1". fp8/fp4 jobs run their 16-bit GEMMs at the BF16 peak and their block linears at
        `lowp_flops` (:func:`shardwise.cost.lowp.device`)."""
        kernel = attention_kernel if attention_kernel in ("fa3", "cudnn") and gpu.arch in FA3_ARCHS else "fa2"
        attention = {"fa2": constants.attention_efficiency, "fa3": constants.fa3_attention_efficiency,
                     "cudnn": constants.cudnn_attention_efficiency}[kernel]
        shape = fitted_attention_shapes()[kernel]
        if attention_kernel == "fa1":
            attention *= FA1_RATIO
        sixteen = "bf16" if precision in ("fp8", "fp4") else precision
        return cls(
            peak_flops=gpu.peak_flops(sixteen),
            attention_peak_flops=gpu.peak_flops(sixteen),
            hbm_bytes_s=gpu.hbm_bytes_s,
            gemm_efficiency=constants.gemm_efficiency,
            gemm_overhead_s=constants.gemm_overhead_s,
            gemm_dim_offset=constants.gemm_dim_offset,
            attention_efficiency=attention,
            memory_efficiency=constants.memory_efficiency,
            kernel_overhead_s=constants.kernel_overhead_s,
            lowp_flops=lowp_flops,
            lowp_bytes=lowp_bytes,
            sms=gpu.sms,
            attention_shape=shape,
        )

    @property
    def hbm_rate(self) -> float:
        return self.hbm_bytes_s * self.memory_efficiency

    def gemm_s(self, m: Num, n: Num, k: Num, count: Num = 1, bytes_per_element: float = 2.0, lowp: bool = False) -> Num:
        """`count` identical (or one grouped GEMM of `count`) (m x k) @ (k x n) GEMMs; `lowp`: a block
        linear, run in FP8/FP4 when the device has a low-precision rate (16-bit output)."""
        flops = 2.0 * m * n * k * (1.0 + self.gemm_dim_offset * (1.0 / m + 1.0 / n + 1.0 / k))
        if lowp and self.lowp_flops:
            compute = flops / self.lowp_flops
            memory = ((m * k + k * n) * self.lowp_bytes + m * n * 2.0) / self.hbm_rate
        else:
            compute = flops / (self.peak_flops * self.gemm_efficiency)
            memory = (m * k + k * n + m * n) * bytes_per_element / self.hbm_rate
        return count * (maximum(compute, memory) + self.gemm_overhead_s)

    def attention_s(self, bh: float, s_q: float, s_k: float, d: float, causal: bool = True, backward: bool = False,
                    bytes_moved: float = 0.0) -> float:
        """One fused attention kernel over `bh` (batch x heads) pairs of `s_q` queries and `s_k` keys of head
        dimension `d` (:func:`shardwise.cost.attention.fused_attention_s`)."""
        return fused_attention_s(bh, s_q, s_k, d, causal, backward, self.attention_peak_flops, self.attention_efficiency,
                                 self.attention_shape, self.sms, bytes_moved, self.hbm_rate, self.kernel_overhead_s)

    def memory_s(self, bytes_moved, kernels=1):
        """Memory-bound kernels moving `bytes_moved` in total."""
        return bytes_moved / self.hbm_rate + kernels * self.kernel_overhead_s
