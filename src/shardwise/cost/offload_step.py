"""The offloaded optimizer step on a timeline (ZeRO-Offload, Ren et al. 2021, USENIX ATC; arXiv 2101.06840).

With the optimizer offloaded to the host, one training step moves three pieces beside the GPU's work:

- **the gradient copy** (device to host, `grad_bytes` per parameter the GPU updates). ZeRO-Offload
  copies gradients as the backward produces them (Sec. 4.1, its single-GPU schedule: the gradient offload
  "overlaps with the backward propagation"), bucket by bucket. DeepSpeed's ZeRO-2 offload does so on every
  micro-batch when gradients accumulate (stage_1_and_2.copy_grads_in_partition: each micro-batch's reduced
  gradients are added into the host copy through the GPU, the running sum up and back down, one copy each
  way, concurrent on a full-duplex link, so one copy's time is counted); only the part of a copy longer
  than the backward it hides in is exposed. ZeRO-1 keeps its gradients on the GPU and reduces them after
  the last backward (DeepSpeed's stage 1; Megatron-LM's CPU optimizer copies them in its step), so its
  copy runs after the backward, whole.
- **CPU Adam** on the node's CPUs, shared by the node's GPUs (every one updates its shard at once). Its rate
  is the host's CPU-Adam rate when the catalog or `cluster.host` gives one (`cpu_adam_gparams_s`:
  ZeRO-Offload Table 4 measured DeepSpeed's vectorised CPU-Adam on a DGX-2's two Xeon Platinum 8168:
  0.22 / 0.51 / 1.03 / 2.41 / 2.57 s for 1 / 2 / 4 / 8 / 10 billion parameters, about 3.9e9 parameters/s;
  PyTorch's CPU Adam took 5.7x longer at 10B), else the fitted `step.host_adam_bytes_s` over the step's
  bytes per parameter.
- **the parameter copy** (host to device, the updated 16-bit weights). ZeRO-Offload copies them tile by tile
  while CPU-Adam updates the next tile (Sec. 5.1, Algorithm 1 line 15), so the pair takes the slower of
  the two (one tile's lag neglected).

Optional: the one-step delayed parameter update (DPU, Sec. 5.2) runs step i's CPU update while the GPU
computes step i+1's forward and backward, so the host step is exposed only beyond `gpu_busy_s`.
"""

from __future__ import annotations

from shardwise.cost.numeric import Num, maximum, where

#: ZeRO-Offload (Ren et al. 2021) Table 4: DeepSpeed CPU-Adam latency (s) by model size on one DGX-2 host
#: (2 x Intel Xeon Platinum 8168, Table 2), and PyTorch's CPU Adam (PT-CPU) on the same host.
ZERO_OFFLOAD_TABLE4_S = {1e9: (0.22, 1.39), 2e9: (0.51, 2.75), 4e9: (1.03, 5.71), 8e9: (2.41, 11.93), 10e9: (2.57, 14.76)}
#: The DGX-2 host's CPU-Adam rate, 10^9 parameters per second: the 10B row of Table 4 (the largest
#: measured, closest to the bandwidth-bound limit; the 1-10B rows give 3.3 to 4.5).
DGX2_CPU_ADAM_GPARAMS_S = 10e9 / ZERO_OFFLOAD_TABLE4_S[10e9][0] / 1e9


def cpu_adam_s(params_per_host: Num, cpu_adam_gparams_s: float | None, host_adam_bytes_s: float,
               bytes_per_param: float) -> Num:
    """Seconds of CPU Adam over `params_per_host` parameters (all the node's GPUs' shards): at the host's
    measured CPU-Adam rate when known (10^9 parameters/s), else at the fitted host byte rate."""
    if cpu_adam_gparams_s:
        return params_per_host / (cpu_adam_gparams_s * 1e9)
    return params_per_host * bytes_per_param / host_adam_bytes_s


def offloaded_step_s(params_local: Num, *, grad_bytes: float, weight_bytes: float, link_bytes_s: float, adam_s: Num,
                     bwd_s: Num | None = None, microbatches: Num = 1, zero: Num = 2,
                     delayed_update: bool = False, gpu_busy_s: Num = 0.0) -> Num:
    """Exposed seconds of an offloaded optimizer step for a GPU updating `params_local` parameters over a host
    link of `link_bytes_s` (one direction, achieved): the gradient copies' part beyond the backward they hide
    in (`bwd_s`, one micro-batch's backward on this GPU; None: not overlapped, the copy runs after the
    backward), then CPU Adam (`adam_s`) overlapped with the parameter copy back (module docstring).
    `delayed_update` (DPU): the host step hides behind the next step's `gpu_busy_s` of GPU work."""
    copy = params_local * grad_bytes / link_bytes_s
    if bwd_s is None:
        grads = copy
    else:  # ZeRO-2/3: into the host copy during every micro-batch's backward; ZeRO-1: once, after the last
        grads = where(zero >= 2, microbatches * maximum(copy - bwd_s, 0.0), copy)
    host = maximum(adam_s, params_local * weight_bytes / link_bytes_s)
    if delayed_update:
        host = maximum(host - gpu_busy_s, 0.0)
    return grads + host
