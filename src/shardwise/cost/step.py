"""The per-step pieces outside the pipelined layer loop, written once for the exact estimate and the
planner's vectorised screen (every argument may be a number or a numpy array, one plan per element).

- model states per GPU by placement (:mod:`shardwise.cost.memory`), sharded over the ZeRO/FSDP shard
  group; offloaded states live in host memory (Ren et al. 2021, ZeRO-Offload Sec. 4);
- fixed memory: CUDA context, communication buffers, and either the gathered layers of ZeRO-3 (the
  layer in use and the prefetched one) or the gradient-reduce buckets in flight;
- the optimizer step: a memory-bound pass over the GPU's shard (fused Adam), or with the optimizer
  offloaded, the gradients down and the parameters up over PCIe plus CPU Adam (ZeRO-Offload Sec. 4.2);
  with the states on NVMe (ZeRO-Infinity, Rajbhandari et al. 2021: its infinity offload engine), their
  read and write-back over the node's drives, overlapped with CPU Adam sub-group by sub-group (its
  overlap-centric design);
- the host side of offloading (:func:`host_state_bytes`): what lives in host DRAM and on NVMe per GPU;
- the straggler factor of a synchronous step: with per-node jitter of coefficient of variation cv (the
  GPUs of a node share its host, network card and clocks), the expected slowest of N nodes is
  ~ 1 + cv * sqrt(2 ln N) of the mean (the Gaussian extreme-value approximation; Dean & Barroso 2013,
  "The Tail at Scale", for why the tail sets the pace). One node: no straggler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardwise.cost.constants import Constants
from shardwise.cost.memory import ModelStateBytes, model_state_bytes
from shardwise.cost.numeric import Num, maximum, minimum, where
from shardwise.cost.offload_step import cpu_adam_s, offloaded_step_s
from shardwise.memo import quick_init
from shardwise.specs.hardware import DEFAULT_HOST_LINK_GBYTE_S, GPU, Cluster

GIB = 2**30


def host_link_gbyte_s(hw: GPU | Cluster) -> float:
    """Host link of one GPU, one direction, GB/s: the cluster's (catalog system with `cluster.host`
    overrides) or the GPU's catalog entry (data/gpus.yaml `host`: PCI-SIG PCIe figures, NVLink-C2C);
    DEFAULT_HOST_LINK_GBYTE_S (PCIe 4.0 x16) only for a GPU built outside the catalog."""
    if isinstance(hw, Cluster):
        return hw.host.link_gbyte_s
    return hw.host_link_gbyte_s or DEFAULT_HOST_LINK_GBYTE_S


def model_states(p_dense: Num, p_exp: Num, dense_group: Num, expert_group: Num, zero: int | np.ndarray, shard: Num,
                 weight_bytes: Num, grad_bytes: Num, optimizer_bytes: Num, offload: str = "none") -> ModelStateBytes:
    """Bytes of model states on one GPU: dense parameters sharded over `shard` ranks of their
    data-parallel group, expert parameters over their whole (expert) data-parallel group."""
    dense_shard = minimum(shard, dense_group)
    states = (model_state_bytes(p_dense, dense_shard, zero, weight_bytes, grad_bytes, optimizer_bytes)
              + model_state_bytes(p_exp, expert_group, zero, weight_bytes, grad_bytes, optimizer_bytes))
    if offload == "none":
        return states
    # ZeRO-Offload (Ren et al. 2021, Sec. 4, its offload strategy: fp16 parameters on the GPU): fp32 master weights, Adam moments and, from ZeRO-2
    # on, the reduced 16-bit gradient partition live on the host (copied out bucket by bucket during the
    # backward); ZeRO-1 keeps its gradients on the GPU until the step.
    weights = 0.0 * states.weights if offload == "optimizer+params" else states.weights
    return ModelStateBytes(weights, where(zero >= 2, 0.0 * states.grads, states.grads), 0.0 * states.optimizer)


#: DeepSpeed's pinned host staging for NVMe offload (deepspeed.ai/docs/config-json, defaults):
#: offload_param buffer_count 5 x buffer_size 1e8 elements; the optimizer steps one sub-group of
#: zero_optimization.sub_group_size 1e9 parameters at a time, staged in host memory.
NVME_PARAM_BUFFER_ELEMENTS = 5 * 1e8
NVME_OPTIMIZER_SUB_GROUP = 1e9
#: Share of a node's host DRAM that offloaded states may use; the rest is the OS, the page cache and the
#: data loaders (assumption, a policy like cluster.memory_headroom).
HOST_MEMORY_RESERVE = 0.10


def host_capacity_bytes(dram_gib: float | None, cxl_gib: float | None = None) -> float | None:
    """Bytes a node's offload may use: its DRAM less HOST_MEMORY_RESERVE, plus any CXL-attached memory (the
    expanders hold no OS or page cache: all of it); None where the DRAM is unknown (the check is skipped)."""
    if dram_gib is None:
        return None
    return dram_gib * GIB * (1.0 - HOST_MEMORY_RESERVE) + (cxl_gib or 0.0) * GIB


def cxl_share(node_bytes: Num, dram_gib: float | None, cxl_gib: float | None) -> Num:
    """Share of a node's offloaded bytes that spill into CXL memory: DRAM fills first (Linux's default policy
    allocates on the CPU's local node and falls back to the CPU-less CXL node), then the expanders. 0 without
    CXL memory or a known DRAM size."""
    if not cxl_gib or dram_gib is None:
        return 0.0 * node_bytes
    dram = dram_gib * GIB * (1.0 - HOST_MEMORY_RESERVE)
    return np.clip((node_bytes - dram) / maximum(node_bytes, 1.0), 0.0, 1.0)


@quick_init
@dataclass(frozen=True)
class HostBytes:
    """Bytes one GPU keeps below its HBM: in host DRAM and on the node's NVMe (numbers or arrays), and what
    its offload moves over the GPU's host link per step while the pipeline runs (`link_bytes`, host to
    device, the busier direction): activation copies share that link (:mod:`shardwise.cost.act_offload`)."""

    dram: Num
    nvme: Num
    link_bytes: Num = 0.0


def host_state_bytes(opt_params: Num, weight_shard_params: Num, offload: str, device: str, weight_bytes: Num,
                     grad_bytes: Num, optimizer_bytes: Num) -> HostBytes:
    """What one GPU's offload puts below HBM. `opt_params`: the parameters its optimizer updates (its
    shard); `weight_shard_params`: the 16-bit weights it would hold (its shard under ZeRO-3).
    CPU (ZeRO-Offload, Ren et al. 2021 Sec. 4): fp32 master + Adam moments (`optimizer_bytes`) and the
    gradient partition (`grad_bytes`) in pinned DRAM, plus the 16-bit weights when parameters are offloaded.
    NVMe (ZeRO-Infinity, Rajbhandari et al. 2021, infinity offload engine): the same bytes on the drives; DRAM keeps the
    pinned staging buffers (NVME_PARAM_BUFFER_ELEMENTS, one optimizer sub-group)."""
    if offload == "none":
        return HostBytes(0.0 * opt_params, 0.0 * opt_params)
    states = opt_params * (optimizer_bytes + grad_bytes)
    params = weight_shard_params * weight_bytes if offload == "optimizer+params" else 0.0 * opt_params
    if device != "nvme":
        return HostBytes(states + params, 0.0 * opt_params)
    staging = minimum(NVME_OPTIMIZER_SUB_GROUP, opt_params) * (optimizer_bytes + grad_bytes)
    if offload == "optimizer+params":
        staging = staging + NVME_PARAM_BUFFER_ELEMENTS * weight_bytes
    return HostBytes(staging, states + params)


def fixed_memory_bytes(consts: Constants, zero: int | np.ndarray, dense_group: Num, largest_layer_params: Num,
                       weight_bytes: Num) -> Num:
    """Runtime memory outside states and activations; `largest_layer_params`: of one layer on this GPU."""
    mc = consts.memory
    fixed = (mc.cuda_context_gib + mc.comm_buffers_gib) * GIB
    buckets = where(dense_group > 1, 2 * mc.dp_bucket_mib * 2**20, 0.0)
    return fixed + where(zero >= 3, 2 * largest_layer_params * weight_bytes, buckets)


def optimizer_step_s(consts: Constants, params_local: Num, hbm_rate: float, offload: str = "none",
                     host_gbyte_s: float = DEFAULT_HOST_LINK_GBYTE_S,
                     weight_bytes: float = 2.0, grad_bytes: float = 4.0, gpus_per_host: int = 1,
                     device: str = "cpu", nvme_gbyte_s: tuple[float, float] | None = None, state_bytes: float = 12.0,
                     bwd_s: Num | None = None, microbatches: Num = 1, zero: int | np.ndarray = 2,
                     cpu_adam_gparams_s: float | None = None, cxl: tuple[Num, float] | None = None) -> Num:
    """Seconds of the optimizer step over the `params_local` parameters this GPU updates. Offloaded, the
    step runs on the host's CPUs, which the `gpus_per_host` GPUs of a node share (every one updates its
    shard at once: ZeRO-Offload, Ren et al. 2021 Sec. 4), at the host's CPU-Adam rate `cpu_adam_gparams_s`
    when known; the gradients cross the GPU's own host link of `host_gbyte_s` (:func:`host_link_gbyte_s`)
    during the backward (`bwd_s` per micro-batch), the parameters come back during CPU Adam
    (:func:`shardwise.cost.offload_step.offloaded_step_s`). With `device` nvme the `state_bytes` per parameter are
    read from and written back to the node's drives (`nvme_gbyte_s`: read, write GB/s per node, shared by
    its GPUs), overlapped with CPU Adam (ZeRO-Infinity, overlap-centric design): the slower of the two counts.
    `cxl`: (share of the node's offloaded states in CXL memory, the expanders' GB/s per node): CPU Adam reads
    and writes those states over CXL, so the step takes at least their ``2 x state_bytes`` a parameter at
    that bandwidth (:func:`cxl_share`)."""
    if offload == "none":
        return params_local * consts.step.optimizer_bytes_per_param / hbm_rate
    link = host_gbyte_s * 1e9 * consts.step.pcie_efficiency
    adam = cpu_adam_s(params_local * gpus_per_host, cpu_adam_gparams_s, consts.step.host_adam_bytes_s,
                      consts.step.optimizer_bytes_per_param)
    if device == "nvme" and nvme_gbyte_s is not None:
        read, write = nvme_gbyte_s
        adam = maximum(adam, params_local * gpus_per_host * state_bytes * (1.0 / read + 1.0 / write) / 1e9)
    if cxl is not None:
        share, cxl_gbyte_s = cxl
        adam = maximum(adam, share * params_local * gpus_per_host * 2.0 * state_bytes / (cxl_gbyte_s * 1e9))
    # With the parameters offloaded too, the updated 16-bit weights stay on the host: the next forward fetches
    # them layer by layer (:func:`offload_params_s`), so the step copies none back.
    back = 0.0 if offload == "optimizer+params" else weight_bytes
    return offloaded_step_s(params_local, grad_bytes=grad_bytes, weight_bytes=back, link_bytes_s=link, adam_s=adam,
                            bwd_s=bwd_s, microbatches=microbatches, zero=zero)


def offload_params_s(consts: Constants, params_per_layer_pass: Num, host_gbyte_s: float = DEFAULT_HOST_LINK_GBYTE_S,
                     weight_bytes: float = 2.0, nvme_read_gbyte_s_per_gpu: float | None = None) -> Num:
    """Host-to-device copy of offloaded parameters for one pass over one layer (ZeRO-Infinity style), over
    a host link of `host_gbyte_s` (:func:`host_link_gbyte_s`); from NVMe, streamed through host memory at
    the slower of the link and the GPU's share of the drives' read bandwidth (ZeRO-Infinity, overlap-centric design: prefetched through pinned host buffers)."""
    link = host_gbyte_s * 1e9 * consts.step.pcie_efficiency
    if nvme_read_gbyte_s_per_gpu is not None:
        link = min(link, nvme_read_gbyte_s_per_gpu * 1e9)
    return params_per_layer_pass * weight_bytes / link


def host_overhead_s(consts: Constants, host_step_overhead: bool) -> float:
    """The fitted per-step host time (data loading, optimizer launch, logging that waits for the loss),
    where the stack exposes it (StackProfile.host_step_overhead); none where the whole step is one compiled
    program the host queues ahead (JAX/XLA)."""
    return consts.step.step_overhead_s if host_step_overhead else 0.0


def straggler_factor(n_nodes: int | np.ndarray, cv: float) -> Num:
    """Expected slowest-of-N-nodes over mean for per-node jitter cv (module docstring)."""
    if not isinstance(n_nodes, np.ndarray):
        return 1.0 + cv * math.sqrt(2.0 * math.log(max(n_nodes, 1)))
    n = np.maximum(n_nodes, 1)
    return 1.0 + cv * np.sqrt(2.0 * np.log(n))
