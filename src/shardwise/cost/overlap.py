"""What communication stays exposed after overlap with compute. The overlap shares are knobs of the
software stack (:mod:`shardwise.cost.stack`). Every function accepts numbers or numpy arrays (one plan
per element).

- TP: exposed by the plan's overlap mode (:func:`shardwise.cost.layer.tp_exposed_s`): without one, forward
  collectives are exposed and a share `tp_comm_overlap` of the backward ones hides under the weight-gradient
  GEMMs (Megatron-LM overlaps the input-gradient all-reduce with the wgrad GEMM; Korthikanti et al. 2022
  Sec. 6.2).
- CP: exposed as the scheme's kernels leave it (:func:`shardwise.cost.layer.attention_pass`: a ring's
  transfers beside its steps, a gather or all-to-all before the attention).
- EP: token all-to-alls are exposed (dispatch and combine sit between the router and the experts).
- DP: states are sharded over groups of `shard` ranks (hybrid sharding / HSDP when `shard` is smaller
  than the data-parallel group; Zhao et al. 2023, PyTorch FSDP Sec. 3.2.2) and replicated across the
  `n / shard` groups. ZeRO-0 all-reduces the gradients; ZeRO-1/2 reduce-scatter them inside the shard
  group, all-reduce the shard across replicas and all-gather the updated parameters (ZeRO-2 reduce-
  scatters every micro-batch, under the rank's next micro-batch but the last); ZeRO-3 also all-gathers the parameters before each forward and backward
  of every micro-batch (Rajbhandari et al. 2020 Sec. 7: 1.5x the data-parallel volume). With overlap,
  gradient reduction hides under `dp_overlap` of the last backward and the parameter all-gather under
  the next forward; ZeRO-3 gathers hide under `fsdp_prefetch_overlap` of each pass.
- ZeRO-1/2 the InternEvo way (stack knob `zero1_comm: all_reduce_broadcast`): every gradient bucket is
  all-reduced over the whole data-parallel group (hidden under `dp_overlap` of the last backward) and,
  after the optimizer step, each of the `shard` owners broadcasts its updated shard to the group: `shard`
  broadcasts, exposed unless the stack overlaps the parameter sync (InternEvo's HybridZeroOptimizer,
  internlm/solver/optimizer/hybrid_zero_optim.py: reduce_tensor with dst_rank=None; broadcast_params).
  A broadcast over n ranks pays n ring steps, so the latency of the parameter sync grows as shard^2.
- Collective count: gradients are reduced in buckets of `bucket_bytes` (PyTorch DDP / Megatron-LM
  bucketed reduction) and ZeRO-3/FSDP gathers one unit (a transformer layer) at a time (Zhao et al.
  2023 Sec. 3.2), so each of `calls` collectives pays its own latency: calls x t(S / calls).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from shardwise.cost.comm import group_collective_s
from shardwise.cost.layer import PassCost
from shardwise.cost.numeric import Num, ceil, maximum, minimum, where
from shardwise.specs.hardware import Cluster


def exposed_layer_comm(cost: PassCost | SimpleNamespace) -> tuple[Num, Num, Num, Num, Num, Num]:
    """(F, I, W, exposed tp, exposed cp, exposed ep) seconds of one micro-batch of a block whose
    :class:`~shardwise.cost.layer.PassCost` (or arrays with the same fields) is `cost`; its TP communication
    is already what the plan's overlap mode leaves exposed (:func:`shardwise.cost.layer.tp_exposed_s`)."""
    tp_bwd = cost.tp_bwd_s
    cp_fwd, cp_bwd = cost.cp_fwd_s, cost.cp_bwd_s
    f = cost.f_s + cost.tp_fwd_s + cp_fwd + cost.ep_fwd_s
    i = cost.i_s + cost.recompute_s + tp_bwd + cp_bwd + cost.ep_bwd_s
    return f, i, cost.w_s, cost.tp_fwd_s + tp_bwd, cp_fwd + cp_bwd, cost.ep_fwd_s + cost.ep_bwd_s


def chunked_s(cluster: Cluster, kind: str, size_bytes: Num, n: Num, stride: Num, calls: Num) -> Num:
    """`calls` equal collectives moving `size_bytes` in total (each pays its latency)."""
    calls = maximum(calls, 1)
    return calls * group_collective_s(cluster, kind, size_bytes / calls, n, stride)


def dp_exposed_s(cluster: Cluster, zero: int | np.ndarray, overlap_grad_reduce: bool | np.ndarray, microbatches: Num,
                 tp: Num, expert_stride: Num, p_dense: Num, p_exp: Num, n_dense: Num, n_exp: Num,
                 shard: Num, weight_bytes: Num, grad_bytes: Num, fwd_s: Num, bwd_s: Num, dp_overlap: float,
                 fsdp_overlap: float, layers: Num = 1, bucket_bytes: float = 40 * 2**20, frozen_bytes: Num = 0.0,
                 zero1_broadcast: bool = False, param_sync_overlap: bool = True,
                 keep_unsharded: bool | np.ndarray = False, unsharded_grads: bool | np.ndarray = False) -> Num:
    """Exposed data-parallel communication of one pipeline rank per step (rules in the module docstring).
    p_dense / p_exp: the rank's dense and expert parameters; n_dense / n_exp: their data-parallel groups
    (strides tp and `expert_stride` = etp*ep in the rank order); shard: ranks that shard the dense states (<= n_dense);
    fwd_s / bwd_s: one micro-batch's forward / backward; frozen_bytes: the rank's frozen (adapter-job)
    base weights, which ZeRO-3 gathers like the others but which have no gradients to reduce;
    zero1_broadcast / param_sync_overlap: the stack's ZeRO-1/2 collectives (module docstring);
    keep_unsharded: ZeRO-3 that keeps each gathered layer for the step (FSDP reshard_after_forward off: one
    gather per layer and step, under the first forward); unsharded_grads: its gradients accumulate unsharded
    over the micro-batches and are reduce-scattered once, under the last backward (pipelining's no-sync)."""
    shard = minimum(shard, n_dense)
    replicas = n_dense // shard

    no_experts = not isinstance(p_exp, np.ndarray) and p_exp == 0

    def buckets(nbytes: Num) -> Num:
        return ceil(nbytes / bucket_bytes)

    def both(kind: str, nbytes: Num, n_d: Num, stride_d: Num, per_layer: bool) -> Num:
        dense, expert = p_dense * nbytes, p_exp * nbytes
        calls_d, calls_e = (layers, layers) if per_layer else (buckets(dense), buckets(expert))
        on_dense = chunked_s(cluster, kind, dense, n_d, stride_d, calls_d)
        if no_experts:  # a dense model: the expert term is 0.0, which adds nothing
            return on_dense
        return on_dense + chunked_s(cluster, kind, expert, n_exp, expert_stride, calls_e)

    across_bytes = p_dense * grad_bytes / shard
    window = where(overlap_grad_reduce, dp_overlap, 0.0)
    scalar = not isinstance(zero, np.ndarray) or zero.ndim == 0
    stages = {int(zero)} if scalar else set(np.unique(zero).tolist())  # only the rules in use run

    # Terms several stages share, computed once.
    across = (chunked_s(cluster, "all_reduce", across_bytes, replicas, tp * shard, buckets(across_bytes))
              if stages & {3} or (stages & {1, 2} and not zero1_broadcast) else 0.0)
    if stages & {1, 2} and zero1_broadcast:
        owners = (chunked_s(cluster, "broadcast", p_dense * weight_bytes, shard, tp, shard)
                  + chunked_s(cluster, "broadcast", p_exp * weight_bytes, n_exp, expert_stride, n_exp))
        hidden_gather = maximum(0.0, owners - where(param_sync_overlap, window * fwd_s, 0.0))
        scatter, across_12 = both("all_reduce", grad_bytes, n_dense, tp, False), 0.0
    elif stages & {1, 2}:
        hidden_gather = maximum(0.0, both("all_gather", weight_bytes, shard, tp, False)
                                - where(param_sync_overlap, window * fwd_s, 0.0))
        scatter, across_12 = both("reduce_scatter", grad_bytes, shard, tp, False), across
    rules = {}
    if 0 in stages:
        rules[0] = maximum(0.0, both("all_reduce", grad_bytes, n_dense, tp, False) - window * bwd_s)
    if 1 in stages:
        rules[1] = maximum(0.0, scatter + across_12 - window * bwd_s) + hidden_gather
    if 2 in stages:
        # Each micro-batch's reduce-scatter starts under its own backward (the share `window` of it, as the
        # buckets fill) and runs on its own stream through the next micro-batch's forward; only the last one
        # waits at the end of the step under its backward alone.
        rules[2] = ((microbatches - 1) * maximum(0.0, scatter - window * bwd_s - where(overlap_grad_reduce, fwd_s, 0.0))
                    + maximum(0.0, scatter + across_12 - window * bwd_s) + hidden_gather)
    if 3 in stages:
        layer_gather = both("all_gather", weight_bytes, shard, tp, True)
        frozen = np.any(frozen_bytes > 0) if isinstance(frozen_bytes, np.ndarray) else frozen_bytes > 0
        if frozen:  # an adapter job's frozen base: gathered, never reduced
            layer_gather = layer_gather + chunked_s(cluster, "all_gather", frozen_bytes, shard, tp, layers)
        layer_scatter = both("reduce_scatter", grad_bytes, shard, tp, True)
        per_microbatch = microbatches * (maximum(0.0, layer_gather - fsdp_overlap * fwd_s)
                                         + maximum(0.0, layer_gather + layer_scatter - fsdp_overlap * bwd_s))
        kept = (maximum(0.0, layer_gather - fsdp_overlap * fwd_s)
                + where(unsharded_grads, maximum(0.0, layer_scatter - window * bwd_s),
                        microbatches * maximum(0.0, layer_scatter - fsdp_overlap * bwd_s)))
        rules[3] = where(keep_unsharded, kept, per_microbatch) + maximum(0.0, across - window * bwd_s)
    if scalar:
        out = rules[int(zero)]
    else:
        out = 0.0
        for stage, value in rules.items():
            out = where(zero == stage, value, out)
    return out if isinstance(out, np.ndarray) and out.ndim else float(out)
