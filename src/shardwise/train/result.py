"""Estimate: what `train estimate` reports for one job (time and memory breakdowns, utilisation)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.memo import quick_init

GIB = 2**30


#: What each utilisation figure counts (the same words in tables, JSON and CSV).
FLOP_CONVENTIONS = {
    "mfu": "model FLOPs: 6 x active parameters + attention over the full sequence (PaLM App. B, the non-causal "
           "convention most papers and Meta report), recompute excluded, over the dense BF16 peak",
    "mfu_causal": "the same with the causal half of the attention (Megatron-LM since 2025, MaxText), recompute excluded",
    "hfu": "FLOPs the GPUs execute: causal attention as computed, recomputed forwards included",
    "model_tflops_per_gpu": "the mfu convention's FLOPs per second per GPU",
}
#: How tables and the web page head each figure: the JSON/CSV key is ``mfu`` (non-causal) or ``mfu_causal``.
MFU_LABELS = {"mfu": "MFU (non-causal)", "mfu_causal": "MFU (causal)", "hfu": "HFU"}


@quick_init
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU at its peak, as the engines report them (:mod:`shardwise.cost.allocator`): tensors
    (states, activations, transient buffers) make the allocated memory; the caching allocator's
    fragmentation adds up to the reserved memory; the CUDA context and NCCL buffers to the device's."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float  # transient tensors: gathered ZeRO-3 layers, gradient buckets, low-precision weight copies
    fragmentation: float = 0.0  # reserved by the caching allocator, not allocated
    runtime: float = 0.0  # outside the allocator: CUDA context and workspaces, NCCL buffers

    @property
    def allocated(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    @property
    def reserved(self) -> float:
        return self.allocated + self.fragmentation

    @property
    def total(self) -> float:
        """What the device holds (nvidia-smi): what `fits` compares with the GPU's memory."""
        return self.reserved + self.runtime

    def gib(self) -> dict[str, float]:
        return {k: v / GIB for k, v in asdict(self).items()}


@quick_init
@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds of one step on the critical pipeline rank; the parts sum to the step time."""

    compute: float
    tp_comm: float
    pp_comm: float
    dp_comm: float
    cp_comm: float
    ep_comm: float
    bubble: float
    optimizer: float
    overhead: float
    straggler: float = 0.0  # waiting for the slowest rank of a synchronous step
    act_offload: float = 0.0  # activation offload copies not hidden behind compute (cost/act_offload.py)

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))


#: the parts :meth:`Estimate.__post_init__` checks, named once (dataclasses.fields is slow on the hot path)
_TIME_FIELDS = tuple(f.name for f in fields(TimeBreakdown))
_MEMORY_FIELDS = tuple(f.name for f in fields(MemoryBreakdown))
_TIME_VALUES, _MEMORY_VALUES = attrgetter(*_TIME_FIELDS), attrgetter(*_MEMORY_FIELDS)  # one call reads them all


@quick_init
@dataclass(frozen=True)
class Estimate:
    name: str
    model: str
    gpu: str
    num_gpus: int
    plan: dict[str, Any]
    microbatches: int
    step_time_s: float
    time_s: TimeBreakdown
    memory: MemoryBreakdown  # of the rank with the peak
    peak_memory_rank: int
    memory_per_rank_gib: tuple[float, ...]
    gpu_memory_gib: float
    usable_memory_gib: float  # HBM less the cluster's memory headroom: what `fits` compares with
    tokens_per_s_per_gpu: float
    samples_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    mfu_causal: float
    hfu: float  # hardware FLOPs (recompute included, causal attention counted as done) / peak
    bubble_definition: str
    bubble_fraction: float  # idle share of the global makespan (all ranks)
    stage_bubble_ratio: float  # idle share of the longest per-rank span
    stage_times_s: dict[str, tuple[float, ...]]
    days_to_train: float | None = None
    cost_usd: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    stack: dict[str, Any] = field(default_factory=dict)  # the software-stack knobs used
    error_band: dict[str, Any] | None = None  # held-out error of comparable runs (train/error_band.py)
    memory_per_rank: tuple[MemoryBreakdown, ...] = ()  # every pipeline rank's breakdown (bytes)
    #: the pipeline simulation's inputs (``PipelineTiming.inputs``), to redraw its timeline as a trace
    pipeline_inputs: tuple = field(default=(), compare=False, repr=False)
    #: the most MFU can be: the GEMM precision's peak over the peak MFU is reported against (fp8/fp4 runs
    #: report MFU against the BF16 peak, so their MFU may exceed 1)
    mfu_limit: float = 1.0
    #: the low-precision recipe the block GEMMs ran (None: 16-bit GEMMs)
    fp8_recipe: str | None = None
    #: the MoE token dispatcher (None: a dense model)
    moe_dispatcher: str | None = None
    #: failures, checkpoints and restarts (train/goodput.py), attached on request; None: not asked or failures off
    goodput: dict[str, Any] | None = None
    #: what offloading uses per node below HBM (train/estimate.py host_memory); None: nothing offloaded
    host_memory: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Refuse an estimate that cannot be true rather than print it: a utilisation above 1, a negative
        or non-finite time or memory (each would be a case the cost model does not cover)."""
        # Causal MFU and HFU count work the GPUs do, so neither can pass 1 (mfu_limit for fp8/fp4 runs, whose
        # MFU is against the BF16 peak); the full-attention (PaLM) MFU counts causal attention twice over
        # and may, at sequences of millions of tokens.
        limit, time_s, memory = self.mfu_limit, self.time_s, self.memory
        values = (self.mfu_causal, self.hfu, self.mfu, self.step_time_s, *_TIME_VALUES(time_s), *_MEMORY_VALUES(memory))
        if 0.0 <= values[0] <= limit and 0.0 <= values[1] <= limit and all(0.0 <= v < math.inf for v in values[2:]) \
                and self.step_time_s > 0:  # the common case, checked without building the message
            return
        bad = [f"{k} {v:.3g}" for k, v in (("causal MFU", self.mfu_causal), ("HFU", self.hfu)) if not 0.0 <= v <= limit]
        bad += [f"MFU {self.mfu:.3g}"] if not (math.isfinite(self.mfu) and self.mfu >= 0.0) else []
        parts = [("step time", self.step_time_s), *((f"time {n}", getattr(time_s, n)) for n in _TIME_FIELDS),
                 *((f"memory {n}", getattr(memory, n)) for n in _MEMORY_FIELDS)]
        bad += [f"{k} {v:.3g}" for k, v in parts if not (math.isfinite(v) and v >= 0)]
        if bad or not self.step_time_s > 0:
            raise ShardwiseError(
                f"the estimate of {self.model} with this plan is not physical ({', '.join(bad) or 'zero step time'}): "
                "the cost model does not cover this job (sizes far outside real models?); please report it"
            )

    @property
    def peak_memory_gib(self) -> float:
        """Device memory of the peak rank (reserved + runtime): what `fits` judges."""
        return self.memory.total / GIB

    @property
    def peak_allocated_gib(self) -> float:
        """torch.cuda.max_memory_allocated of the peak rank."""
        return self.memory.allocated / GIB

    @property
    def peak_reserved_gib(self) -> float:
        """torch.cuda.max_memory_reserved of the peak rank (torchtitan's and nanotron's printed peak)."""
        return self.memory.reserved / GIB

    @property
    def misfit(self) -> str | None:
        """Why the plan does not fit (GPU memory, host DRAM, NVMe), or None when it fits."""
        if self.peak_memory_gib > self.usable_memory_gib:
            return f"GPU memory: {self.peak_memory_gib:.1f} GiB of {self.usable_memory_gib:.1f} GiB usable per GPU"
        h = self.host_memory or {}
        if h.get("dram_available_gib") is not None and h["dram_used_gib"] > h["dram_available_gib"]:
            what = "offloaded states and pinned buffers" if not h.get("activations_gib") else (
                "offloaded activations" if h["dram_used_gib"] <= h["activations_gib"] else "offloaded states, activations and pinned buffers")
            return (f"host memory: {what} need {h['dram_used_gib']:,.0f} GiB per node, "
                    f"{h['dram_available_gib']:,.0f} GiB available{' with CXL' if h.get('cxl_gib') else ''} (offload to NVMe, "
                    "add nodes or set cluster.host.dram_gib or cxl_gib)")
        if h.get("nvme_available_tb") is not None and h["nvme_used_tb"] > h["nvme_available_tb"]:
            return (f"NVMe: offloaded states need {h['nvme_used_tb']:,.1f} TB per node, {h['nvme_available_tb']:,.1f} TB "
                    "available (add nodes or set cluster.host.nvme_tb)")
        return None

    @property
    def fits(self) -> bool:
        return self.misfit is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "gpu": self.gpu,
            "num_gpus": self.num_gpus,
            "plan": self.plan,
            "fp8_recipe": self.fp8_recipe,
            "moe_dispatcher": self.moe_dispatcher,
            "microbatches": self.microbatches,
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "samples_per_s_per_gpu": self.samples_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_causal": self.mfu_causal,
            "hfu": self.hfu,
            "flop_conventions": FLOP_CONVENTIONS,
            "peak_memory_gib": self.peak_memory_gib,
            "peak_allocated_gib": self.peak_allocated_gib,
            "peak_reserved_gib": self.peak_reserved_gib,
            "gpu_memory_gib": self.gpu_memory_gib,
            "usable_memory_gib": self.usable_memory_gib,
            "fits": self.fits,
            "misfit": self.misfit,
            "host_memory": self.host_memory,
            "peak_memory_rank": self.peak_memory_rank,
            "memory_gib": self.memory.gib(),
            "memory_per_rank_gib": list(self.memory_per_rank_gib),
            "memory_per_rank_parts_gib": [m.gib() for m in self.memory_per_rank],
            "time_s": asdict(self.time_s),
            "bubble_definition": self.bubble_definition,
            "bubble_fraction": self.bubble_fraction,
            "stage_bubble_ratio": self.stage_bubble_ratio,
            "stage_times_s": {k: list(v) for k, v in self.stage_times_s.items()},
            "days_to_train": self.days_to_train,
            "cost_usd": self.cost_usd,
            "notes": list(self.notes),
            "stack": dict(self.stack),
            "error_band": self.error_band,
            "goodput": self.goodput,
        }
