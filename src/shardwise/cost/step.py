"""The per-step pieces outside the pipelined layer loop, written once for the exact estimate and the
planner's vectorised screen (every argument may be a number or a numpy array, one plan per element).

- model states per GPU by placement (:mod:`shardwise.cost.memory`), sharded over the ZeRO/FSDP shard
  group; offloaded states live in host memory (Ren et al. 2021, ZeRO-Offload Sec. 4);
- fixed memory: CUDA context, communication buffers, and either the gathered layers of ZeRO-3 (the
  layer in use and the prefetched one) or the gradient-reduce buckets in flight;
- the optimizer step: a memory-bound pass over the GPU's shard (fused Adam), or with the optimizer
  offloaded, the gradients down and the parameters up over PCIe plus CPU Adam (ZeRO-Offload Sec. 4.2);
- the straggler factor of a synchronous step: with per-node jitter of coefficient of variation cv (the
  GPUs of a node share its host, network card and clocks), the expected slowest of N nodes is
  ~ 1 + cv * sqrt(2 ln N) of the mean (the Gaussian extreme-value approximation; Dean & Barroso 2013,
  "The Tail at Scale", for why the tail sets the pace). One node: no straggler.
"""

from __future__ import annotations

import math

import numpy as np

from shardwise.cost.numeric import minimum, where
from shardwise.cost.constants import Constants
from shardwise.cost.memory import ModelStateBytes, model_state_bytes
from shardwise.specs.hardware import DEFAULT_HOST_LINK_GBYTE_S, GPU, Cluster

GIB = 2**30


def host_link_gbyte_s(hw: GPU | Cluster) -> float:
    """Host link of one GPU, one direction, GB/s: the cluster's (catalog system with `cluster.host`
    overrides) or the GPU's catalog entry (data/gpus.yaml `host`: PCI-SIG PCIe figures, NVLink-C2C);
    DEFAULT_HOST_LINK_GBYTE_S (PCIe 4.0 x16) only for a GPU built outside the catalog."""
    if isinstance(hw, Cluster):
        return hw.host.link_gbyte_s
    return hw.host_link_gbyte_s or DEFAULT_HOST_LINK_GBYTE_S


def model_states(p_dense, p_exp, dense_group, expert_group, zero, shard, weight_bytes, grad_bytes,
                 optimizer_bytes, offload: str = "none") -> ModelStateBytes:
    """Bytes of model states on one GPU: dense parameters sharded over `shard` ranks of their
    data-parallel group, expert parameters over their whole (expert) data-parallel group."""
    dense_shard = minimum(shard, dense_group)
    states = (model_state_bytes(p_dense, dense_shard, zero, weight_bytes, grad_bytes, optimizer_bytes)
              + model_state_bytes(p_exp, expert_group, zero, weight_bytes, grad_bytes, optimizer_bytes))
    if offload == "none":
        return states
    weights = 0.0 * states.weights if offload == "optimizer+params" else states.weights
    return ModelStateBytes(weights, states.grads, 0.0 * states.optimizer)


def fixed_memory_bytes(consts: Constants, zero, dense_group, largest_layer_params, weight_bytes):
    """Runtime memory outside states and activations; `largest_layer_params`: of one layer on this GPU."""
    mc = consts.memory
    fixed = (mc.cuda_context_gib + mc.comm_buffers_gib) * GIB
    buckets = where(dense_group > 1, 2 * mc.dp_bucket_mib * 2**20, 0.0)
    return fixed + where(zero >= 3, 2 * largest_layer_params * weight_bytes, buckets)


def optimizer_step_s(consts: Constants, params_local, hbm_rate, offload: str = "none",
                     host_gbyte_s: float = DEFAULT_HOST_LINK_GBYTE_S,
                     weight_bytes: float = 2.0, grad_bytes: float = 4.0, gpus_per_host: int = 1):
    """Seconds of the optimizer step over the `params_local` parameters this GPU updates. Offloaded, the
    step runs on the host's CPUs, which the `gpus_per_host` GPUs of a node share (every one updates its
    shard at once: ZeRO-Offload, Ren et al. 2021 Sec. 4), after the gradients cross the GPU's own host link
    of `host_gbyte_s` (:func:`host_link_gbyte_s`)."""
    if offload == "none":
        return params_local * consts.step.optimizer_bytes_per_param / hbm_rate
    link = host_gbyte_s * 1e9 * consts.step.pcie_efficiency
    transfers = params_local * (grad_bytes + weight_bytes) / link
    return transfers + params_local * gpus_per_host * consts.step.optimizer_bytes_per_param / consts.step.host_adam_bytes_s


def offload_params_s(consts: Constants, params_per_layer_pass, host_gbyte_s: float = DEFAULT_HOST_LINK_GBYTE_S,
                     weight_bytes: float = 2.0):
    """Host-to-device copy of offloaded parameters for one pass over one layer (ZeRO-Infinity style), over
    a host link of `host_gbyte_s` (:func:`host_link_gbyte_s`)."""
    link = host_gbyte_s * 1e9 * consts.step.pcie_efficiency
    return params_per_layer_pass * weight_bytes / link


def host_overhead_s(consts: Constants, host_step_overhead: bool) -> float:
    """The fitted per-step host time (data loading, optimizer launch, logging that waits for the loss),
    where the stack exposes it (StackProfile.host_step_overhead); none where the whole step is one compiled
    program the host queues ahead (JAX/XLA)."""
    return consts.step.step_overhead_s if host_step_overhead else 0.0


def straggler_factor(n_nodes, cv: float):
    """Expected slowest-of-N-nodes over mean for per-node jitter cv (module docstring)."""
    if not isinstance(n_nodes, np.ndarray):
        return 1.0 + cv * math.sqrt(2.0 * math.log(max(n_nodes, 1)))
    n = np.maximum(n_nodes, 1)
    return 1.0 + cv * np.sqrt(2.0 * np.log(n))
