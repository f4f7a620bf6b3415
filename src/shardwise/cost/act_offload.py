"""Activation offload to host memory (PipeOffload: Wan et al. 2025, "PipeOffload: Improving Scalability of
Pipeline Parallelism with Memory Optimization", arXiv:2503.01328, Sec. 3: a micro-batch's activations are
copied to host memory after its forward and back before its backward; the copy is free when the
micro-batch's activation lifespan on the stage, forward end to backward start, is longer than the
round trip over the host link).

The rule, written once for the estimate (and documented in docs/offload.md):

- memory: a share ``x`` of every micro-batch's saved activations leaves the GPU, but one micro-batch's
  offloaded part stays in flight on the GPU (the one being copied out or fetched back), so the rank's peak
  activation memory ``P`` becomes ``(1 - x) P + x a``, with ``a`` the largest activations one micro-batch
  keeps on one of the rank's stages (capped at ``P``): with one micro-batch in flight nothing is saved;
- host memory: the offloaded bytes at the peak, ``x (P - a)`` per GPU, live in pinned host DRAM;
- time: each offloaded byte crosses the host link twice (out after the forward, in before the
  backward), one direction each at ``link`` GB/s (the achieved rate: the catalog link times
  ``step.pcie_efficiency``, as for the offloaded optimizer's copies), so a micro-batch's copy takes ``2 x a_s / link`` on
  stage ``s``. Offload runs layer by layer (Megatron-LM's --cpu-offloading, PipeOffload's implementation):
  a layer's activations leave while the later layers run their forward and come back while they run their
  backward, so the copy hides in the window ``F_s + gap + B_s`` (the stage's forward, its forward-to-
  backward gap in the schedule, its input-gradient backward); what exceeds it is exposed; and the
  link's throughput bounds the whole step: ``m x sum_s a_s / link`` per direction cannot exceed the
  pipelined step, the excess exposed too; offloaded model states moving over the same link (ZeRO-2/3
  gradient sums, offloaded parameters) count towards that throughput. A rank's exposed time adds to the step (the largest over ranks;
  the delay's knock-on effect on the other ranks is not re-simulated).

Where the share goes (``parallel.offload_activations_policy``):

- ``uniform``: every rank offloads the share of its activations;
- ``selective``: the same bytes in all (the share of every rank's offloadable bytes at its peak, summed over
  the pipeline) are taken from the ranks with the highest peaks first, down to a common level (water
  filling, :func:`selective_shares`). Under 1F1B-like schedules the ranks with the most micro-batches in flight
  are the early stages, whose activations also live longest (the forward-to-backward gap grows with
  ``pp - s``), so their copies hide best. This is PipeOffload's selective criterion (offload the activations
  with the longest lifespan first, Sec. 4) applied across pipeline ranks; as there, the pipeline's peak falls
  faster than the offloaded share (better than linear). Its uniform-memory schedule, which makes the same
  hold within a rank, is not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardwise.memo import quick_init


def offloaded_peak(share, peak_bytes, one_bytes):
    """A rank's peak activation memory with `share` offloaded: ``(1 - x) P + x min(a, P)`` (one micro-batch's
    worth `one_bytes` stays in flight); numbers or arrays (the planner's screen)."""
    return (1.0 - share) * peak_bytes + share * np.minimum(one_bytes, peak_bytes)


def selective_shares(share: float, peaks_bytes: Sequence[float], floors_bytes: Sequence[float]) -> list[float]:
    """Per-rank shares for the selective policy (module docstring): offload ``share`` of the pipeline's
    offloadable bytes, ``sum_r (P_r - f_r)`` (a rank's peak `peaks_bytes[r]` down to its floor
    `floors_bytes[r]`, one micro-batch's worth), from the highest peaks down: every rank above a common level
    ``M`` comes down to ``max(M, f_r)``. ``M`` is found by bisection on the piecewise-linear offloaded total."""
    peaks = np.asarray(peaks_bytes, dtype=float)
    floors = np.minimum(np.asarray(floors_bytes, dtype=float), peaks)
    room = peaks - floors
    target = share * float(room.sum())
    if target <= 0.0:
        return [0.0] * len(peaks)
    lo, hi = float(floors.min()), float(peaks.max())
    for _ in range(100):  # sum(clip(P - M, 0, room)) falls as M rises; 100 halvings reach float precision
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(np.clip(peaks - mid, 0.0, room).sum()) > target else (lo, mid)
    offloaded = np.clip(peaks - hi, 0.0, room)
    return [float(y / r) if r > 0 else 0.0 for y, r in zip(offloaded, room, strict=True)]


@quick_init
@dataclass(frozen=True)
class ActivationOffload:
    """What offloading a share of the activations does to one pipeline rank."""

    peak_bytes: float  # the rank's peak activation memory with the offload
    host_bytes: float  # offloaded bytes the rank keeps in host DRAM at its peak
    exposed_s: float  # seconds per step the copies add to the rank (not hidden behind compute)


def activation_offload(share: float, peak_bytes: float, stage_bytes: Sequence[float],
                       gaps_s: Sequence[Sequence[float]], link_gbyte_s: float, microbatches: int, pipelined_s: float,
                       stage_compute_s: Sequence[float] | None = None, shared_bytes: float = 0.0) -> ActivationOffload:
    """Offloading `share` of the activations of a rank whose peak activation memory is `peak_bytes`;
    `stage_bytes[k]`: one micro-batch's activations on the rank's k-th stage; `gaps_s[k]`: that stage's
    forward-end to backward-start gaps, one per simulated micro-batch (scaled to `microbatches`);
    `link_gbyte_s`: the GPU's host link, one direction, achieved; `pipelined_s`: the pipelined part of the step;
    `stage_compute_s[k]`: the k-th stage's forward plus input-gradient backward of one micro-batch (the
    layer-by-layer copies overlap them; None: 0, the copies hide in the gap only); `shared_bytes`: what the
    rank's offloaded model states move over the same link per step in one direction while the pipeline runs
    (:class:`shardwise.cost.step.HostBytes`): the link carries both, and the activation copies are charged
    what the sum exposes beyond what the states' copies alone would."""
    if share <= 0.0:
        return ActivationOffload(peak_bytes, 0.0, 0.0)
    one = min(max(stage_bytes, default=0.0), peak_bytes)
    rate = link_gbyte_s * 1e9
    exposed = 0.0
    compute = [0.0] * len(stage_bytes) if stage_compute_s is None else stage_compute_s
    for a, gaps, c in zip(stage_bytes, gaps_s, compute, strict=True):
        g = np.asarray(gaps, dtype=float) + c
        if g.size:
            exposed += float(np.maximum(0.0, 2.0 * share * a / rate - g).mean()) * microbatches
    own = microbatches * share * sum(stage_bytes)
    throughput = max(0.0, (own + shared_bytes) / rate - pipelined_s) - max(0.0, shared_bytes / rate - pipelined_s)
    return ActivationOffload(float(offloaded_peak(share, peak_bytes, one)), share * (peak_bytes - one),
                             max(exposed, throughput, 0.0))
