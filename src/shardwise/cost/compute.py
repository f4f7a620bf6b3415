"""Operation timing on one GPU: a roofline with a size-dependent efficiency.

t(op) = max(F / (peak * eta), bytes / (HBM * eta_mem)) + t_fixed
(roofline: Williams et al. 2009; per-op form as in LLM-Viewer's roofline_model.py). For GEMMs the fixed
time t_fixed = gemm_overhead_s (launch plus wave-quantisation tail) makes the efficiency depend on the
operation's size: a GEMM of F FLOPs reaches F/(F + F_half) of eta, F_half = t_fixed * peak * eta; for
memory-bound kernels t_fixed is the launch cost. Constants: :mod:`shardwise.cost.constants`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.cost.constants import ComputeConstants
from shardwise.specs.hardware import GPU


@dataclass(frozen=True)
class Device:
    """What op timing needs of a GPU at one precision (kept flat: this is on the hot path)."""

    peak_flops: float  # dense tensor FLOP/s at the GEMM precision
    attention_peak_flops: float  # attention runs in 16-bit even in fp8 recipes
    hbm_bytes_s: float
    gemm_efficiency: float
    attention_efficiency: float
    memory_efficiency: float
    kernel_overhead_s: float
    gemm_overhead_s: float

    @classmethod
    def of(cls, gpu: GPU, precision: str, constants: ComputeConstants) -> Device:
        return cls(
            peak_flops=gpu.peak_flops(precision),
            attention_peak_flops=gpu.peak_flops("bf16" if precision == "fp8" else precision),
            hbm_bytes_s=gpu.hbm_bytes_s,
            gemm_efficiency=constants.gemm_efficiency,
            attention_efficiency=constants.attention_efficiency,
            memory_efficiency=constants.memory_efficiency,
            kernel_overhead_s=constants.kernel_overhead_s,
            gemm_overhead_s=constants.gemm_overhead_s,
        )

    def gemm_s(self, flops: float, bytes_moved: float, count: int = 1) -> float:
        """`count` identical GEMMs (or one grouped GEMM of `count` problems) of `flops` each."""
        compute = flops / (self.peak_flops * self.gemm_efficiency)
        memory = bytes_moved / (self.hbm_bytes_s * self.memory_efficiency)
        return count * (max(compute, memory) + self.gemm_overhead_s)

    def attention_s(self, flops: float, bytes_moved: float) -> float:
        """A fused attention kernel (FlashAttention): compute at its own efficiency."""
        compute = flops / (self.attention_peak_flops * self.attention_efficiency)
        memory = bytes_moved / (self.hbm_bytes_s * self.memory_efficiency)
        return max(compute, memory) + self.kernel_overhead_s

    def memory_s(self, bytes_moved: float, kernels: int = 1) -> float:
        """Memory-bound (elementwise, normalisation, softmax) kernels moving `bytes_moved` in total."""
        return bytes_moved / (self.hbm_bytes_s * self.memory_efficiency) + kernels * self.kernel_overhead_s


def gemm_bytes(m: float, n: float, k: float, bytes_per_element: float = 2.0) -> float:
    """Operand and result traffic of an (m x k) @ (k x n) GEMM: (mk + kn + mn) elements."""
    return (m * k + k * n + m * n) * bytes_per_element
