"""The cost model's named constants: few, physically meaningful, in one place.

Each constant is tagged in its comment: *cited* (a number from a paper, datasheet or benchmark, with
its source), *derived* (computed from cited facts) or *assumed* (a stated engineering guess), or
*fitted* (written by ``scripts/fit_constants.py`` into ``data/fitted_constants.json`` from the public
measurements in ``data/calibration``; the value here is the starting point). Software stacks (Megatron,
torchtitan, FSDP, DeepSpeed, Composer, MaxText) and their knobs are described in ``data/stacks.yaml``
(:mod:`shardwise.cost.stack`); their fitted knobs are overlaid the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from shardwise.cost.attention import fitted_attention_efficiency
from shardwise.specs._loading import data_path
from shardwise.specs.hardware import catalog_families

GIB = 2**30
FITTED_FILE = "fitted_constants.json"
FIT_CV_FILE = "fit_cv.json"  # the cross-validation report, apart from the constants


@dataclass(frozen=True)
class ComputeConstants:
    """Device-model constants of one GPU family (:mod:`shardwise.cost.device`)."""

    gemm_efficiency: float = 0.70  # fitted per GPU family: asymptotic achieved/peak of large 16-bit GEMMs
    gemm_overhead_s: float = 5e-6  # fitted: fixed time per GEMM (launch)
    gemm_dim_offset: float = 0.0  # fitted: a GEMM's short-dimension cost, as elements added to each dimension (cost/device.py)
    kernel_overhead_s: float = 4e-6  # fitted: per-kernel launch gap on the GPU (start: a few us, CUDA C Best Practices Guide)
    # the attention kernels' forward asymptote at head dim 128 (cost/attention.py), fitted per GPU family on the
    # kernel benchmarks (scripts/fit_attention.py); the starting values:
    attention_efficiency: float = 0.73  # cited: FlashAttention-2 forward asymptote on A100, 73% of peak (Dao 2023 Sec. 4.1)
    fa3_attention_efficiency: float = 0.75  # cited: FlashAttention-3 bf16 forward on H100, 740 of 989 TFLOP/s (Shah et al. 2024)
    cudnn_attention_efficiency: float = 0.62  # assumed: cuDNN fused attention (Transformer Engine, XLA) near FA3's (Shah et al. 2024 Fig. 5)
    memory_efficiency: float = 0.72  # assumed (the serving fit's start value); fitted per GPU family on the serving runs (decode streams the weights), kept for families without serving runs
    fp8_gemm_efficiency: float = 0.70  # fitted per GPU family: large FP8 GEMMs (per-tensor scales) / FP8 peak
    fp4_gemm_efficiency: float = 0.70  # fitted per GPU family: large NVFP4/MXFP4 GEMMs / FP4 peak


# NCCL's relative NVLS efficiency per GPU architecture (NVIDIA/nccl src/graph/tuning.cc, nvlsEfficiency:
# Hopper 0.85, Blackwell 0.74), keyed by the catalog's scale-up link. The fitted `nvls_efficiency` scales it.
NVLS_ARCH_FACTOR = {"nvlink4": 0.85, "nvlink4-export": 0.85, "nvlink5": 0.74}
NETWORK_CONSTANTS_FILE = "network_constants.json"


@dataclass(frozen=True)
class NetworkConstants:
    """The network model's constants (formulas in :mod:`shardwise.cost.comm`). The defaults are starting
    values; ``scripts/fit_network.py`` fits the ones marked *fitted* on the nccl-tests / DeepEP records
    (``data/calibration/comm-measurements.json``) and writes ``data/network_constants.json``, whose values
    replace the defaults. Latencies of fabrics without measurements fall back as noted."""

    ring_efficiency_nvlink: float = 0.80  # fitted: ring bus bandwidth / NVLink one-direction rate (NCCL maintainer: ~80%, nccl-tests #212)
    ring_efficiency_xgmi: float = 0.70  # fitted: same on AMD Infinity Fabric (per-peer links)
    ring_efficiency_pcie: float = 0.80  # no measurements: taken equal to NVLink's starting value (assumption)
    nvls_efficiency: float = 0.70  # fitted: NVLS all-reduce algorithm bandwidth / (NVLink rate x NVLS_ARCH_FACTOR)
    tree_efficiency: float = 0.30  # fitted: NCCL tree (no NVLS) intra-node chain rate / NVLink rate (per-channel caps)
    nic_efficiency: float = 0.93  # fitted: achieved / line rate of the scale-out NICs
    link_latency_s: float = 2e-6  # fitted: per ring step on the scale-up fabric
    nic_latency_infiniband_s: float = 10e-6  # fitted: per step across domains, InfiniBand (RoCE uses it: no data)
    nic_latency_efa_s: float = 50e-6  # fitted: same on AWS EFA (SRD)
    nic_latency_tcpxo_s: float = 100e-6  # fitted: same on GCP GPUDirect-TCPXO
    nvls_latency_s: float = 30e-6  # fitted: NVLS / NVLSTree fixed cost (NCCL's tuner charges 25 us, tuning.cc)
    chunk_latency_s: float = 8e-6  # fitted: per-chunk handshake h of the pipelined transfer, t = a + b + 2 sqrt(h b)
    ll_bandwidth_fraction: float = 0.25  # cited, not fitted: LL protocol bus bandwidth / the bulk protocol's (tuning.cc's ring LL factor 1/4)
    ll_nic_latency_infiniband_s: float = 5e-6  # fitted where rows take LL (no InfiniBand row does yet): per LL step across domains (RoCE uses it)
    ll_nic_latency_efa_s: float = 30e-6  # fitted: same on AWS EFA
    ll_nic_latency_tcpxo_s: float = 60e-6  # fitted: same on GCP GPUDirect-TCPXO
    # fitted: per remote peer of an all-to-all. NCCL runs an all-to-all as one send and one receive per peer
    # inside a group (nccl-tests' alltoall.cu: ncclSend/ncclRecv to every rank), so each cross-node
    # message pays the network proxy's per-message cost; at many nodes the per-peer messages are small.
    a2a_peer_latency_s: float = 2e-6

    def ring_efficiency(self, link_family: str) -> float:
        return getattr(self, f"ring_efficiency_{link_family}")

    def nic_latency_s(self, fabric: str, protocol: str = "") -> float:
        """Per-step latency across domains on `fabric`; `protocol` "ll_" for NCCL's LL protocol."""
        return getattr(self, f"{protocol}nic_latency_{'infiniband' if fabric == 'roce' else fabric}_s")


@lru_cache(maxsize=1)
def fitted_network_constants() -> NetworkConstants:
    """Defaults overlaid with ``data/network_constants.json`` (written by scripts/fit_network.py)."""
    path = data_path(NETWORK_CONSTANTS_FILE)
    if not path.exists():
        return NetworkConstants()
    values = json.loads(path.read_text())["constants"]
    known = {f.name for f in fields(NetworkConstants)}
    return NetworkConstants(**{k: float(v) for k, v in values.items() if k in known})


@dataclass(frozen=True)
class FusionConstants:
    """Elementwise work of a transformer layer by how a stack fuses its kernels. `traffic` multiplies
    the bytes of :mod:`shardwise.cost.layer`'s fused accounting (1 = Megatron-LM's fused kernels)."""

    eager_traffic: float = 2.5  # fitted: eager PyTorch runs RMSNorm, RoPE, SwiGLU, residuals as separate ops
    compiled_traffic: float = 1.2  # fitted: torch.compile (Inductor) fuses most pointwise chains
    fused_kernels_per_layer: float = 14.0  # derived: Megatron layer forward, one kernel per fused block
    eager_kernels_per_layer: float = 40.0  # derived: eager Llama block forward (norms ~6 ops each, RoPE ~8, SwiGLU 3, ...)
    compiled_kernels_per_layer: float = 18.0  # assumed: Inductor leaves GEMMs and attention, fuses the rest


@dataclass(frozen=True)
class LowPrecisionConstants:
    """FP8/FP4 GEMMs of each scaling recipe relative to per-tensor scaling (:mod:`shardwise.cost.lowp`)."""

    rowwise_gemm_ratio: float = 0.85  # fitted: FP8 GEMMs with per-row scales (scaled-mm epilogue) / per-tensor
    blockwise_gemm_ratio: float = 0.85  # assumed: 1x128 / 128x128 block scales promoted in the main loop (DeepSeek-V3 Sec. 3.3.2)
    mx_gemm_ratio: float = 1.0  # fitted: MXFP8 block-scaled GEMMs (Blackwell tensor cores) / per-tensor


@dataclass(frozen=True)
class MoeConstants:
    """Mixture-of-experts layers (:func:`shardwise.cost.layer.transformer_layer`)."""

    grouped_gemm_tile: float = 128.0  # cited: CUTLASS grouped-GEMM threadblock tiles of 128 rows (each expert's rows padded to it)
    dispatch_overhead_s: float = 50e-6  # fitted: fixed cost of one token dispatch or combine (routing metadata, splits, sync)
    grouped_gemm_ratio: float = 1.0  # fitted: expert grouped-GEMM speed / dense GEMM speed at the same shape


@dataclass(frozen=True)
class MemoryConstants:
    """Runtime memory outside the model states and activations (named assumptions)."""

    cuda_context_gib: float = 0.75  # assumed: CUDA context + cuBLAS/cuDNN workspaces (PyTorch CUDA semantics notes)
    comm_buffers_gib: float = 0.5  # assumed: NCCL channel buffers per process (NCCL_BUFFSIZE 4 MiB x channels x peers)
    # The caching allocator's reserved-but-unallocated memory at the peak, as a share of the dynamic memory
    # (activations: the tensors that live and die within a step): GMLake (Guo et al. 2024, ASPLOS) measures
    # 15% average (up to 33%) fragmentation of PyTorch's caching allocator over eight LLM trainings on
    # A100-80GB, which virtual-memory stitching removes; expandable segments are PyTorch's own use of the
    # same CUDA virtual-memory mapping (PyTorch "CUDA semantics": expandable_segments).
    fragmentation: float = 0.15  # assumed from GMLake's average; fitted where memory rows report reserved memory
    fragmentation_expandable: float = 0.02  # assumed: near zero with expandable segments (GMLake: stitching)
    dp_bucket_mib: float = 40.0  # cited: gradient-reduce bucket (Megatron-LM / PyTorch DDP default ~40 MB)


@dataclass(frozen=True)
class StepConstants:
    """Per-step costs outside the layer loop."""

    optimizer_bytes_per_param: float = 34.0  # derived: Adam reads w32,m,v,g32 + grad-norm read, writes w32,m,v,w16
    step_overhead_s: float = 0.02  # fitted: data loading, loss scaling, logging, launch gaps per step
    straggler_cv: float = 0.0  # fitted: per-rank time jitter; a synchronous step waits for the slowest rank
    host_adam_bytes_s: float = 40e9  # fitted (prior assumed): CPU Adam (DeepSpeed CPUAdam) bytes/s of one host, shared by its GPUs
    pcie_efficiency: float = 0.8  # assumed: achieved/peak host<->device copy bandwidth


@dataclass(frozen=True)
class Constants:
    compute: ComputeConstants = field(default_factory=ComputeConstants)
    network: NetworkConstants = field(default_factory=fitted_network_constants)
    fusion: FusionConstants = field(default_factory=FusionConstants)
    memory: MemoryConstants = field(default_factory=MemoryConstants)
    step: StepConstants = field(default_factory=StepConstants)
    lowp: LowPrecisionConstants = field(default_factory=LowPrecisionConstants)
    moe: MoeConstants = field(default_factory=MoeConstants)
    # Per GPU-family overrides of ComputeConstants fields, e.g. {"H100-SXM": {"gemm_efficiency": 0.62}}.
    per_gpu: dict[str, dict[str, float]] = field(default_factory=dict)
    # GPU families: GPUs without their own measurements use their family's values.
    families: dict[str, str] = field(default_factory=dict)
    # Per software stack overrides of the knobs in data/stacks.yaml (fitted ones).
    stacks: dict[str, dict[str, float]] = field(default_factory=dict)

    def family(self, gpu_name: str) -> str:
        return gpu_name if gpu_name in self.per_gpu else self.families.get(gpu_name, gpu_name)

    def compute_for(self, gpu_name: str) -> ComputeConstants:
        over = self.per_gpu.get(self.family(gpu_name), {})
        return replace(self.compute, **over) if over else self.compute

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value if isinstance(value, dict) else {g.name: getattr(value, g.name) for g in fields(value)}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Constants:
        base = cls()
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            current = getattr(base, f.name)
            kwargs[f.name] = dict(data[f.name]) if isinstance(current, dict) else replace(current, **data[f.name])
        return replace(base, **kwargs)


# Cited per-family starting values (fitted ones are overlaid from data/fitted_constants.json).
CITED_PER_GPU: dict[str, dict[str, float]] = {
    # FlashAttention-2 reaches ~35% of H100 peak (Shah et al. 2024, FlashAttention-3 Sec. 1).
    "H100-SXM": {"attention_efficiency": 0.35},
    # Assumed until measured: cuDNN fused attention on B200 like FA3 on H100; FA2 as on H100.
    "B200": {"attention_efficiency": 0.35},
    # Assumed: Composable Kernel flash attention on MI300X ~40% of peak (ROCm blog figures are for inference).
    "MI300X": {"attention_efficiency": 0.40, "fa3_attention_efficiency": 0.40, "cudnn_attention_efficiency": 0.40},
}


def _merge_per_gpu(base: dict[str, dict[str, float]], over: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {k: dict(v) for k, v in base.items()}
    for k, v in over.items():
        out.setdefault(k, {}).update(v)
    return out


def fit_cv_data() -> dict[str, Any]:
    """The training fit's cross-validation (data/fit_cv.json: ``cv``, each held-out source's rows, and the
    ``error_bands`` drawn from them; {} before the fit script has written it)."""
    path = data_path(FIT_CV_FILE)
    return json.loads(path.read_text()) if path.exists() else {}


def fitted_data() -> dict[str, Any]:
    """The raw content of data/fitted_constants.json ({} when the fit script has not written it)."""
    path = data_path(FITTED_FILE)
    return json.loads(path.read_text()) if path.exists() else {}


@lru_cache(maxsize=1)
def default_constants() -> Constants:
    """Cited defaults overlaid with the fitted values in ``data/fitted_constants.json`` when present."""
    data = fitted_data()
    # The network's constants have their own fit and file (fitted_network_constants); a "network"
    # section here is ignored.
    fitted = Constants.from_dict({k: v for k, v in data.items() if k in {f.name for f in fields(Constants)} - {"network"}})
    # The attention kernels' asymptotes come from their own fit on kernel benchmarks (scripts/fit_attention.py).
    per_gpu = _merge_per_gpu(_merge_per_gpu(CITED_PER_GPU, fitted.per_gpu), fitted_attention_efficiency())
    return replace(fitted, per_gpu=per_gpu, families=catalog_families())  # the catalog names each GPU's family


def network_constants(constants: Constants | None = None) -> NetworkConstants:
    return constants.network if constants is not None else fitted_network_constants()
