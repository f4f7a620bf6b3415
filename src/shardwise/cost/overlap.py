"""What communication stays exposed after overlap with compute (named constants in
:mod:`shardwise.cost.constants`). Every function accepts numbers or numpy arrays (one plan per element).

- TP: forward collectives are exposed (each GEMM waits for its input); a fraction
  `tp_backward_overlap` of the backward ones hides under the weight-gradient GEMMs (Megatron-LM overlaps
  the input-gradient all-reduce with the wgrad GEMM; Korthikanti et al. 2022 Sec. 6.2).
- CP: the K/V all-gather hides under the attention of the blocks already received (Liu et al. 2023,
  Ring Attention): exposed = max(0, comm - attention time) (backward: twice the attention time).
- EP: token all-to-alls are exposed (dispatch and combine sit between the router and the experts).
- DP: with overlap_grad_reduce the gradient reduce-scatter/all-reduce hides under the backward of the
  last micro-batch and the parameter all-gather under the forward of the next step, up to `dp_overlap`
  of that window; ZeRO-2 reduce-scatters every micro-batch, ZeRO-3 also all-gathers parameters before
  each forward and backward (Rajbhandari et al. 2020 Sec. 7: 1.5x the data-parallel volume).
"""

from __future__ import annotations

import numpy as np

from shardwise.cost.comm import group_collective_s, where
from shardwise.cost.constants import OverlapConstants
from shardwise.specs.hardware import Cluster


def exposed_layer_comm(cost, tp_overlap: float):
    """(F, I, W, exposed tp, exposed cp, exposed ep) seconds of one micro-batch of a block whose
    :class:`~shardwise.cost.layer.PassCost` (or arrays with the same fields) is `cost`."""
    tp_bwd = cost.tp_bwd_s * (1.0 - tp_overlap)
    cp_fwd = np.maximum(0.0, cost.cp_fwd_s - cost.attention_s)
    cp_bwd = np.maximum(0.0, cost.cp_bwd_s - 2.0 * cost.attention_s)
    f = cost.f_s + cost.tp_fwd_s + cp_fwd + cost.ep_fwd_s
    i = cost.i_s + cost.recompute_s + tp_bwd + cp_bwd + cost.ep_bwd_s
    return f, i, cost.w_s, cost.tp_fwd_s + tp_bwd, cp_fwd + cp_bwd, cost.ep_fwd_s + cost.ep_bwd_s


def dp_exposed_s(cluster: Cluster, zero, overlap_grad_reduce, microbatches, tp, ep,
                 p_dense, p_exp, n_dense, n_exp, weight_bytes, grad_bytes, fwd_s, bwd_s, ov: OverlapConstants):
    """Exposed data-parallel communication of one pipeline rank per step (rules in the module docstring).
    p_dense / p_exp: the rank's dense and expert parameters; n_dense / n_exp: their data-parallel groups
    (strides tp and tp*ep in the rank order); fwd_s / bwd_s: one micro-batch's forward / backward."""

    def both(kind: str, nbytes: float):
        return (group_collective_s(cluster, kind, p_dense * nbytes, n_dense, tp)
                + group_collective_s(cluster, kind, p_exp * nbytes, n_exp, tp * ep))

    window = where(overlap_grad_reduce, ov.dp_overlap, 0.0)
    gather, scatter = both("all_gather", weight_bytes), both("reduce_scatter", grad_bytes)
    hidden_gather = np.maximum(0.0, gather - window * fwd_s)
    zero0 = np.maximum(0.0, both("all_reduce", grad_bytes) - window * bwd_s)
    zero1 = np.maximum(0.0, scatter - window * bwd_s) + hidden_gather
    zero2 = microbatches * np.maximum(0.0, scatter - window * bwd_s) + hidden_gather
    hide = ov.zero3_prefetch_overlap
    zero3 = microbatches * (np.maximum(0.0, gather - hide * fwd_s) + np.maximum(0.0, gather + scatter - hide * bwd_s))
    out = where(zero == 0, zero0, where(zero == 1, zero1, where(zero == 2, zero2, zero3)))
    return float(out) if np.ndim(out) == 0 else out
