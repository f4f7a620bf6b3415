"""The smallest GPU count that fits a job ("will it fit?"), and the smallest that trains it by a deadline.

The counts a cluster can have are every count up to one node and then whole nodes (:func:`candidate_counts`).
They are tried in increasing order; at each, every runnable plan is enumerated and screened (the planner's
first two stages) and the leanest plan by screened peak memory decides (:func:`count_verdict`); a count that
does not fit is explained by the exact estimate of its leanest plan. Fitting is not monotone in the count
(a count of 3 nodes may leave no batch split that 2 nodes had), so no count is skipped on a guess: a count is
skipped only where a bound proves no plan can fit or finish in time -

- memory: the model states alone, sharded over every GPU (ZeRO-3 over data x tensor x pipeline x context
  ranks: each GPU holds at least 1/n of them), plus the runtime's fixed memory, exceed the usable memory
  (:func:`memory_floor_bytes`; ZeRO, Rajbhandari et al. 2020 Sec. 5, Psi (2 + 2 + K) / N_d);
- time: the step's model FLOPs (causal attention, no recompute) over n GPUs at their dense peak take longer
  than the deadline allows (:func:`step_floor_s`; MFU <= 1).

`exhaustive=True` skips nothing (the brute force the tests compare with). The deadline search estimates
the fastest plan at each count the bounds leave, so above 16 nodes it steps through node counts with at
most four significant bits (16, 18, ..., 30, 32, 36, ...: at most 12.5% apart), which it says it does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.cost.adapters import adapter_model_flops_per_token, frozen_weight_bytes
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.flops import model_flops_per_token
from shardwise.cost.memory import optimizer_bytes_per_param
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import Cluster, HostSpec, make_cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.plan_label import plan_label
from shardwise.train.planner import job_from_plan, plan_search
from shardwise.train.result import GIB, Estimate
from shardwise.train.screen import ScreenOptions, screen
from shardwise.train.search_space import enumerate_plans

MAX_SMALLEST_GPUS = 65536
#: Node counts above this are stepped through at most four significant bits apart by the deadline search.
EVERY_NODE_UP_TO = 16


@dataclass(frozen=True)
class CountVerdict:
    """Whether `gpus` GPUs fit the job (and, with a deadline, finish in time), and why not when they do
    not; `first`: the smallest count of a range of counts skipped for the same reason."""

    gpus: int
    fits: bool
    reason: str
    leanest_plan: str | None = None
    leanest_gib: float | None = None
    first: int | None = None
    days: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"gpus": self.gpus, "fits": self.fits, "reason": self.reason, "leanest_plan": self.leanest_plan,
                "leanest_peak_gib": self.leanest_gib, "from_gpus": self.first, "days_to_train": self.days}

    @property
    def label(self) -> str:
        if self.first is not None and self.first != self.gpus:
            return f"{self.first}-{self.gpus} GPUs"
        return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}"


def candidate_counts(gpus_per_node: int, max_gpus: int, coarse: bool = False) -> list[int]:
    """Every GPU count a cluster can have up to `max_gpus`: 1 .. gpus_per_node, then whole nodes; `coarse`:
    above EVERY_NODE_UP_TO nodes, only node counts with at most four significant bits."""
    out = list(range(1, min(gpus_per_node, max_gpus) + 1))
    k = 2
    while k * gpus_per_node <= max_gpus:
        shift = max(k.bit_length() - 4, 0)
        if not coarse or k <= EVERY_NODE_UP_TO or (k >> shift) << shift == k:
            out.append(k * gpus_per_node)
        k += 1
    return out


def memory_floor_bytes(model: ModelSpec, training: TrainingSpec, n: int, offload: str = "none",
                       constants: Constants | None = None) -> float:
    """A lower bound on any plan's peak memory per GPU on `n` GPUs (module docstring): every state sharded
    over all n GPUs, nothing else but the CUDA context and communication buffers."""
    consts = constants or default_constants()
    runtime = (consts.memory.cuda_context_gib + consts.memory.comm_buffers_gib) * GIB
    p = float(model.params_total)
    lora = training.adapter
    if lora is not None:  # the frozen base (weights only; adapters and their states add more)
        per_param = 0.0 if offload == "optimizer+params" else frozen_weight_bytes(model, lora, p, model.layers, 1,
                                                                                     training.weight_bytes) / p
    else:
        kept = {"none": training.weight_bytes + training.grad_bytes + optimizer_bytes_per_param(training.precision),
                "optimizer": training.weight_bytes + training.grad_bytes,
                "optimizer+params": training.grad_bytes}
        per_param = kept[offload]
    return p * per_param / n + runtime


def step_floor_s(model: ModelSpec, training: TrainingSpec, cluster: Cluster) -> float:
    """A lower bound on the step time on `cluster`: the step's model FLOPs (causal attention, no recompute)
    at the GPUs' dense peak for the training precision (MFU <= 1)."""
    per_token = model_flops_per_token(model, training.seq_len, causal=True)
    if training.adapter is not None:
        per_token = adapter_model_flops_per_token(model, training.adapter, per_token)
    return per_token * training.tokens_per_step / (cluster.num_gpus * cluster.gpu.peak_flops(training.precision))


def _breakdown(e: Estimate) -> str:
    m = e.memory
    parts = [("weights", m.params), ("gradients", m.grads), ("optimizer", m.optimizer),
             ("activations", m.activations), ("buffers", m.buffers), ("fragmentation", m.fragmentation),
             ("runtime", m.runtime)]
    return ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts if value > 0)


def count_verdict(model: ModelSpec, cluster: Cluster, training: TrainingSpec, schedules: tuple[str, ...] | None = None,
                  constants: Constants | None = None, fixed: dict[str, Any] | None = None) -> CountVerdict:
    """Whether some plan of the job fits on `cluster`: the leanest plan by the screen decides (the screen's
    peak is an upper bound; where it is over, the exact estimate of the leanest plan decides)."""
    n = cluster.num_gpus
    fixed = fixed or {}
    cands = enumerate_plans(model, cluster, training, schedules, fixed)
    if not len(cands):
        why = "; ".join(f"{reason} ({count:,})" for reason, count in cands.rejected.most_common(2))
        return CountVerdict(n, False, f"no plan can run: {why}")
    screened = screen(cands, model, cluster, training, constants, options=ScreenOptions.of(fixed))
    # A plan whose offloaded bytes overflow the node's host DRAM (or NVMe) cannot run, however lean on the GPU:
    # the leanest is taken among those the host can hold (the estimate's host-memory check, docs/offload.md).
    host_ok = screened["host_ok"]
    if not host_ok.any():
        tiers = cluster.host
        cxl = f" + {tiers.cxl_gib:,.0f} GiB CXL" if tiers.cxl_gib else ""
        return CountVerdict(n, False, f"every plan offloads more than a node's host memory holds ({tiers.dram_gib:,.0f} GiB "
                                      f"DRAM{cxl} per node; cluster.host)")
    mem = np.where(host_ok, screened["memory_bytes"], np.inf)
    i = int(np.argmin(mem))
    usable = cluster.usable_memory_bytes / GIB
    extra = {k: v for k, v in fixed.items() if k in ("offload", "offload_device", "offload_activations")}
    job = job_from_plan(model, cluster, training, cands.plan_dict(i), extra)
    if mem[i] <= cluster.usable_memory_bytes:
        label = plan_label(job.plan.model_dump())
        return CountVerdict(n, True, f"fits: {label} needs {mem[i] / GIB:.1f} GiB of {usable:.1f} usable", label, float(mem[i] / GIB))
    e = estimate(job, constants)
    label = plan_label(e.plan)
    if e.fits:
        return CountVerdict(n, True, f"fits: {label} needs {e.peak_memory_gib:.1f} GiB of {usable:.1f} usable", label,
                            e.peak_memory_gib)
    return CountVerdict(n, False, f"the leanest plan ({label}) needs {e.peak_memory_gib:.1f} GiB > {usable:.1f} usable "
                                  f"({_breakdown(e)} GiB)", label, e.peak_memory_gib)


def _cluster(gpu: str, n: int, memory_headroom: float | None, host: HostSpec | None = None) -> Cluster:
    return make_cluster(gpu, n, memory_headroom=memory_headroom, host=host)


def _check_max(max_gpus: int) -> None:
    if not 1 <= max_gpus <= MAX_SMALLEST_GPUS:
        raise ShardwiseError(f"--max-gpus must be in 1..{MAX_SMALLEST_GPUS:,}, got {max_gpus}")


def _skipped(verdicts: list[CountVerdict], n: int, reason: str) -> None:
    """Record count `n` as skipped for `reason`, merged with the previous verdict when it was skipped alike."""
    if verdicts and not verdicts[-1].fits and verdicts[-1].reason == reason and verdicts[-1].leanest_plan is None:
        verdicts[-1] = CountVerdict(n, False, reason, first=verdicts[-1].first or verdicts[-1].gpus)
    else:
        verdicts.append(CountVerdict(n, False, reason, first=n))


def smallest_fit(model: ModelSpec, gpu: str, training: TrainingSpec, max_gpus: int = 1024,
                 memory_headroom: float | None = None, schedules: tuple[str, ...] | None = None,
                 constants: Constants | None = None, fixed: dict[str, Any] | None = None,
                 exhaustive: bool = False, host: HostSpec | None = None) -> tuple[int | None, list[CountVerdict]]:
    """(smallest GPU count up to `max_gpus` with a plan that fits, GPU and host memory both, or None; a verdict
    per count tried, the counts the memory bound rules out merged into ranges). `host`: the job's
    `cluster.host` overrides of the catalog's memory tiers."""
    _check_max(max_gpus)
    probe = _cluster(gpu, 1, memory_headroom)
    offload = (fixed or {}).get("offload", "none")
    verdicts: list[CountVerdict] = []
    for n in candidate_counts(probe.gpus_per_node, max_gpus):
        floor = memory_floor_bytes(model, training, n, offload, constants)
        if not exhaustive and floor > probe.usable_memory_bytes:
            _skipped(verdicts, n, f"the model states alone, sharded over every GPU, need more than "
                                  f"{probe.usable_memory_bytes / GIB:.1f} GiB usable per GPU")
            continue
        v = count_verdict(model, _cluster(gpu, n, memory_headroom, host), training, schedules, constants, fixed)
        verdicts.append(v)
        if v.fits:
            return n, verdicts
    return None, verdicts


def smallest_in_time(model: ModelSpec, gpu: str, training: TrainingSpec, days: float, max_gpus: int = 65536,
                     memory_headroom: float | None = None, schedules: tuple[str, ...] | None = None,
                     constants: Constants | None = None, fixed: dict[str, Any] | None = None,
                     exhaustive: bool = False, max_exact: int = 16,
                     search: Callable[..., Any] = plan_search,
                     host: HostSpec | None = None) -> tuple[int | None, Estimate | None, list[CountVerdict]]:
    """(smallest GPU count whose fastest plan trains `training.tokens` within `days`, that plan's estimate,
    a verdict per count tried) over :func:`candidate_counts` (coarse above EVERY_NODE_UP_TO nodes unless
    `exhaustive`); counts the bounds rule out are merged into ranges."""
    _check_max(max_gpus)
    if training.tokens is None:
        raise ShardwiseError("--days needs --tokens (the tokens to train by the deadline)")
    if not days > 0:
        raise ShardwiseError(f"--days must be a positive number of days, got {days}")
    probe = _cluster(gpu, 1, memory_headroom)
    offload = (fixed or {}).get("offload", "none")
    steps = training.tokens / training.tokens_per_step
    deadline_step_s = days * 86400 / steps
    verdicts: list[CountVerdict] = []
    for n in candidate_counts(probe.gpus_per_node, max_gpus, coarse=not exhaustive):
        if not exhaustive and memory_floor_bytes(model, training, n, offload, constants) > probe.usable_memory_bytes:
            _skipped(verdicts, n, "the model states alone, sharded over every GPU, exceed the usable memory")
            continue
        cluster = _cluster(gpu, n, memory_headroom, host)
        floor_days = step_floor_s(model, training, cluster) * steps / 86400
        if not exhaustive and floor_days > days:
            _skipped(verdicts, n, f"even at 100% MFU training takes more than {days:g} days")
            continue
        try:
            res = search(model, cluster, training, top_k=1, max_exact=max_exact, schedules=schedules, constants=constants,
                         fixed=fixed)
        except ShardwiseError as exc:
            verdicts.append(CountVerdict(n, False, str(exc).split(". ")[0]))
            continue
        best = res.top[0]
        took = best.step_time_s * steps / 86400
        label = plan_label(best.plan)
        if best.step_time_s <= deadline_step_s:
            verdicts.append(CountVerdict(n, True, f"in time: {label} trains in {took:.1f} days", label, best.peak_memory_gib,
                                         days=took))
            return n, best, verdicts
        verdicts.append(CountVerdict(n, False, f"too slow: the fastest plan ({label}) takes {took:.1f} days > {days:g}",
                                     label, best.peak_memory_gib, days=took))
    return None, None, verdicts


@dataclass
class SizedCluster:
    """The smallest count of one GPU type for a job (None: none up to the limit), why smaller counts fail,
    and with a deadline the estimate of the fastest plan at that count."""

    gpu: str
    gpus: int | None
    verdicts: list[CountVerdict]
    best: Estimate | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "gpus": self.gpus, "counts": [v.to_dict() for v in self.verdicts],
                "days_to_train": None if self.best is None else self.best.days_to_train}


def smallest_clusters(model: ModelSpec, gpus: list[str], training: TrainingSpec, days: float | None = None,
                      max_gpus: int = 1024, memory_headroom: float | None = None, schedules: tuple[str, ...] | None = None,
                      constants: Constants | None = None, fixed: dict[str, Any] | None = None,
                      host: HostSpec | None = None) -> list[SizedCluster]:
    """For each GPU type, the smallest count that fits (:func:`smallest_fit`), or with `days` the smallest
    that trains `training.tokens` in time (:func:`smallest_in_time`)."""
    out = []
    for gpu in gpus:
        name = _cluster(gpu, 1, memory_headroom).gpu.name
        if days is None:
            n, verdicts = smallest_fit(model, gpu, training, max_gpus, memory_headroom, schedules, constants, fixed, host=host)
            out.append(SizedCluster(name, n, verdicts))
        else:
            n, best, verdicts = smallest_in_time(model, gpu, training, days, max_gpus, memory_headroom, schedules, constants,
                                                 fixed, host=host)
            out.append(SizedCluster(name, n, verdicts, best))
    return out
