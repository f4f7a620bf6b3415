"""Goodput of a training plan: its checkpoints, the interruptions a cluster of its size sees, the restarts,
and what they leave of the failure-free throughput, days and dollars.

Assembly (each formula cited in its module): checkpoint bytes per rank from the plan's own state placement
(the stages each pipeline rank holds, split by TP/EP, sharded or replicated over the data-parallel group:
:func:`shardwise.cost.step.model_states`); save and load times through the storage tier
(:mod:`shardwise.cost.checkpoint`); interruption rates, restart time and hot spares
(:mod:`shardwise.cost.failures`); the effective training time ratio at the best checkpoint interval
(:mod:`shardwise.cost.goodput`). Computed on request (``train estimate``, the web API, ``train plan
--objective goodput``), never inside :func:`shardwise.train.estimate.estimate`: the step time is unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from shardwise.cost import adapters
from shardwise.cost.checkpoint import EXTRA_STATE_BYTES, CheckpointTimes, StorageTier, checkpoint_times, storage_tier
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.failures import (
    DAY_S,
    FailureRates,
    fleet_rates,
    mttf_s,
    reliability_data,
    rendezvous_s,
    restart_default,
    scaled_rates,
    spare_candidates,
    waits_by_spares,
)
from shardwise.cost.goodput import (
    RunModel,
    daly_interval_s,
    ettr,
    expected_interruptions,
    optimal_interval_s,
    young_interval_s,
)
from shardwise.cost.memory import optimizer_bytes_per_param
from shardwise.cost.step import host_link_gbyte_s, model_states
from shardwise.pipeline import schedule_info
from shardwise.specs.job import TrainJob
from shardwise.specs.reliability import Resilience
from shardwise.train.pipeline_timing import plan_stages_per_rank
from shardwise.train.result import GIB, Estimate
from shardwise.train.stages import stage_contents, stage_params

TINY = 1e-300  # an ETTR of 0 (a run that never finishes) ranks last instead of dividing by zero


@dataclass(frozen=True)
class CheckpointSize:
    """Bytes of one checkpoint: in total, written by the busiest GPU and node (replicas de-duplicated), and
    held on the busiest GPU (what an asynchronous save copies to host memory, and a restart loads back)."""

    total_bytes: float
    write_bytes_gpu: float
    write_bytes_node: float
    staged_bytes_gpu: float
    resident_bytes_gpu: float


def checkpoint_size(job: TrainJob) -> CheckpointSize:
    """The plan's checkpoint, rank by rank (module docstring)."""
    model, cluster, training, plan = job.model, job.cluster, job.training, job.plan
    tp, pp, cp, ep, dp = plan.tp, plan.pp, plan.cp, plan.ep, plan.dp or 1
    vpp = plan_stages_per_rank(plan)
    stages = stage_contents(model, pp * vpp)
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    dense_group = dp * cp
    etp = plan.expert_tp
    expert_group = max(1, dense_group * tp // (ep * etp))
    shard = min(plan.dp_shard or dense_group, dense_group)
    wb, opt = training.weight_bytes, optimizer_bytes_per_param(training.precision)
    lora = training.adapter
    if lora is not None:
        wb, _, opt = adapters.adapter_state_bytes(lora)
    write, staged, resident = [], [], []
    for r in range(pp):
        mine = [stages[s] for s in range(pp * vpp) if s2r[s] == r]
        p_dense = p_exp = 0.0
        for st in mine:
            d, e = stage_params(model, st, tp, ep)
            p_dense, p_exp = p_dense + d, p_exp + e
        p_exp *= tp / etp  # MoE Parallel Folding: experts split over etp x ep (assembly.rank_tail)
        frozen = 0.0
        if lora is not None:  # the adapters are saved; the frozen base is read back from its files on restart
            layers = sum(st.layers for st in mine)
            frozen = adapters.frozen_weight_bytes(model, lora, p_dense, layers, tp, training.weight_bytes)
            p_dense, p_exp = layers * adapters.adapter_params(model, lora, tp), 0.0
        unique = model_states(p_dense, p_exp, dense_group, expert_group, 3, dense_group, wb, 0.0, opt)
        held = model_states(p_dense, p_exp, dense_group, expert_group, plan.zero, shard, wb, 0.0, opt, plan.offload)
        write.append(float(unique.weights + unique.optimizer) + EXTRA_STATE_BYTES)
        staged.append(float(held.weights + held.optimizer))
        resident.append(float(held.weights + held.optimizer) + frozen)
    per_gpu = max(write)
    return CheckpointSize(sum(write) * cluster.num_gpus / pp, per_gpu, per_gpu * min(cluster.gpus_per_node, cluster.num_gpus),
                          max(staged), max(resident))


def storage_of(res: Resilience) -> StorageTier:
    s = res.storage
    return storage_tier(s.tier, reliability_data()["storage"], write_gbyte_s_per_node=s.write_gbyte_s_per_node,
                        read_gbyte_s_per_node=s.read_gbyte_s_per_node, write_gbyte_s=s.write_gbyte_s,
                        read_gbyte_s=s.read_gbyte_s, latency_s=s.latency_s)


def rates_of(res: Resilience) -> FailureRates:
    r = res.reliability
    return scaled_rates(fleet_rates(r.fleet), r.gpu_failures_per_1k_gpu_days, r.node_failures_per_1k_node_days,
                        r.link_failures_per_1k_link_days, r.planned_per_1k_node_days)


def _or(value: float | None, key: str) -> float:
    return restart_default(key) if value is None else float(value)


@dataclass(frozen=True)
class Goodput:
    """What failures, checkpoints and restarts leave of a plan's throughput (to_dict: the JSON)."""

    ettr: float
    goodput_tokens_per_s: float
    interval_s: float
    interval_steps: int
    young_s: float
    daly_s: float
    run: RunModel
    size: CheckpointSize
    times: CheckpointTimes
    mode: str
    tier: str
    rates: dict[str, float]
    restart: dict[str, float]
    spares: dict[str, float]
    losses: dict[str, float]
    days_to_train: float | None
    cost_usd: float | None
    spare_cost_usd: float | None
    interruptions: dict[str, float] | None
    failure_free: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return _finite(self._dict())

    def _dict(self) -> dict[str, Any]:
        s, t = self.size, self.times
        return {
            "ettr": self.ettr,
            "goodput_tokens_per_s": self.goodput_tokens_per_s,
            "days_to_train": self.days_to_train,
            "cost_usd": self.cost_usd,
            "spare_cost_usd": self.spare_cost_usd,
            "failure_free": self.failure_free,
            "interruptions": self.interruptions,
            "mttf_h": self.run.mttf_s / 3600,
            "rates_per_day": self.rates,
            "checkpoint": {
                "mode": self.mode, "tier": self.tier, "interval_s": self.interval_s, "interval_steps": self.interval_steps,
                "young_interval_s": self.young_s, "daly_interval_s": self.daly_s,
                "total_gb": s.total_bytes / 1e9, "write_gib_per_gpu": s.write_bytes_gpu / GIB,
                "write_gib_per_node": s.write_bytes_node / GIB, "staged_gib_per_gpu": s.staged_bytes_gpu / GIB,
                "blocking_s": t.blocking_s, "durable_s": t.durable_s, "stage_s": t.stage_s, "persist_s": t.persist_s,
                "load_s": t.load_s,
            },
            "restart_s": self.restart,
            "spares": self.spares,
            "lost_share": self.losses,
        }


def _finite(value: Any) -> Any:
    """JSON has no infinity: an interval or MTTF without failures is null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def goodput(job: TrainJob, est: Estimate, res: Resilience | None = None, constants: Constants | None = None) -> Goodput | None:
    """The goodput of `job`'s plan, whose failure-free estimate is `est` (None when the job's
    cluster.reliability.failures is false)."""
    res = res or job.resilience
    rel, ck = res.reliability, res.checkpoint
    if not rel.failures:
        return None
    consts = constants or default_constants()
    cluster = job.cluster
    n, nodes, gpn = cluster.num_gpus, cluster.nodes, min(cluster.gpus_per_node, cluster.num_gpus)
    links = nodes * cluster.network.nics_per_node
    tier = storage_of(res)
    replicas = ck.replicas if ck.replicas is not None else (0 if tier.survives_node_loss else 1)
    size = checkpoint_size(job)
    host = host_link_gbyte_s(cluster) * 1e9 * consts.step.pcie_efficiency
    nic = cluster.network.nics_per_node * cluster.network.nic_gbps / 8 * 1e9
    times = checkpoint_times(ck.mode, tier, write_bytes_node=size.write_bytes_node, staged_bytes_gpu=size.staged_bytes_gpu,
                             resident_bytes_node=size.resident_bytes_gpu * gpn, gpus_per_node=gpn, nodes=nodes,
                             host_link_bytes_s=host, nic_bytes_s_node=nic, replicas=replicas if nodes > 1 else 0)
    rates = rates_of(res)
    lam, lam_swap = rates.per_job_s(n, nodes, links), rates.swap_per_job_s(n, nodes, links)
    repair = _or(rel.repair_hours, "repair_h") * 3600
    rho = lam_swap * repair
    relaunch = _or(rel.relaunch_s, "relaunch_s")
    rendezvous = rendezvous_s(n, _or(rel.rendezvous_s_per_rank, "rendezvous_s_per_rank"))
    detect = _or(rel.detect_s, "detect_s")
    restart = relaunch + rendezvous + times.load_s
    fixed = rel.spare_nodes != "auto"
    base = RunModel(mttf_s(lam), times.blocking_s, times.durable_s, restart, detect, 0.0, rates.planned_per_job_s(nodes),
                    restart + times.durable_s)
    step = est.step_time_s
    tau = ck.every_steps * step if ck.every_steps else optimal_interval_s(base, step)  # the wait does not move it
    # spares: as given, or the count that spends the fewest GPU-hours per unit of work (spares are paid for;
    # the cost falls, then rises with the count: the scan stops three counts past the best)
    best: tuple[float, int, RunModel, float] | None = None
    for s in [int(rel.spare_nodes)] if fixed else range(spare_candidates(rho) + 1):
        run = dataclasses.replace(base, wait_s=float(waits_by_spares(lam, lam_swap, repair, base.downtime_s, [s])[0]))
        ratio = ettr(run, tau) if math.isfinite(tau) else 1.0
        spent = (n + s * gpn) / max(ratio, TINY)
        if best is None or spent < best[0]:
            best = (spent, s, run, ratio)
        elif s > best[1] + 2:
            break
    assert best is not None
    _, spares, run, ratio = best
    wait = run.wait_s
    finite_m = math.isfinite(run.mttf_s)
    days = cost = spare_cost = interruptions = None
    if est.days_to_train is not None:
        wall = est.days_to_train * DAY_S / ratio if ratio > 0 else math.inf  # inf: never finishes (null in JSON)
        days = wall / DAY_S
        price = cluster.price_usd_per_gpu_hour
        if price is not None:
            spare_cost = spares * gpn * price * wall / 3600
            cost = wall / 3600 * n * price + spare_cost
        u, p = expected_interruptions(run, wall)
        interruptions = {"unexpected": u, "planned": p}
    return Goodput(
        ettr=ratio, goodput_tokens_per_s=est.tokens_per_s_per_gpu * n * ratio, interval_s=tau,
        interval_steps=round(tau / step) if math.isfinite(tau) else 0,
        young_s=young_interval_s(run.block_s, run.mttf_s) if finite_m else math.inf,
        daly_s=daly_interval_s(run.block_s, run.mttf_s) if finite_m else math.inf,
        run=run, size=size, times=times, mode=ck.mode, tier=tier.name,
        rates={"unexpected": lam * DAY_S, "node_swaps": lam_swap * DAY_S, "planned": run.planned_rate_s * DAY_S},
        restart={"detect": detect, "relaunch": relaunch, "rendezvous": rendezvous, "load": times.load_s, "total": detect + restart},
        spares={"nodes": spares, "repair_h": repair / 3600, "wait_s_per_interruption": wait,
                "in_repair_mean": rho * run.mttf_s / (run.mttf_s + run.downtime_s) if finite_m else 0.0},
        losses=lost_shares(run, tau, ratio), days_to_train=days, cost_usd=cost, spare_cost_usd=spare_cost,
        interruptions=interruptions, failure_free={"days_to_train": est.days_to_train, "cost_usd": est.cost_usd},
    )


def lost_shares(run: RunModel, tau: float, ratio: float) -> dict[str, float]:
    """Where the wall time that is not useful goes, split in proportion to each cause's first-order share
    (checkpoint blocking b/P; per interruption, on average, half a period plus the persistence lag of
    rework, the detection, the wait and the restart; planned restarts)."""
    if not math.isfinite(tau):
        return {}
    b = max(run.block_s, run.durable_s - tau)
    period = tau + b
    lam = 0.0 if math.isinf(run.mttf_s) else 1.0 / run.mttf_s
    parts = {"checkpoint": b / period, "rework": lam * (period / 2 + run.durable_s - b), "detect": lam * run.detect_s,
             "wait_for_node": lam * run.wait_s, "restart": lam * (run.downtime_s - run.detect_s - run.wait_s),
             "planned": run.planned_rate_s * run.planned_cost_s}
    total = sum(parts.values())
    return {k: (1 - ratio) * v / total if total else 0.0 for k, v in parts.items()}


def with_goodput(job: Any, est: Any) -> Any:
    """`est` with its goodput attached (estimates of clusters with groups are returned as they are)."""
    if not isinstance(job, TrainJob) or not isinstance(est, Estimate):
        return est
    g = goodput(job, est)
    return dataclasses.replace(est, goodput=None if g is None else g.to_dict())


def estimate_with_goodput(job: Any) -> Any:
    """What `train estimate` reports for a job: the estimate (:func:`shardwise.train.estimate.estimate`, or
    the heterogeneous one) with its goodput."""
    from shardwise.specs.hetero import HeteroJob
    from shardwise.train.estimate import estimate
    from shardwise.train.hetero.estimate import hetero_estimate

    if isinstance(job, HeteroJob):
        return hetero_estimate(job)
    return with_goodput(job, estimate(job))


def ettr_of(e: Estimate) -> float:
    """The estimate's effective training time ratio (1 without goodput attached or failures off)."""
    return e.goodput["ettr"] if e.goodput else 1.0


def effective_step_s(e: Estimate) -> float:
    """Wall seconds per step once failures, checkpoints and restarts are paid: step / ETTR (what the
    planner's goodput objective minimises)."""
    return e.step_time_s / max(ettr_of(e), TINY)


def ettr_bound(cluster: Any, res: Resilience) -> float:
    """The most ETTR any plan on `cluster` reaches: free, instant checkpoints (tau -> 0 in the renewal formula:
    M / (M + D)) and a restart without a checkpoint load; bounds the planner's search."""
    rel = res.reliability
    if not rel.failures:
        return 1.0
    nodes = cluster.nodes
    rates = rates_of(res)
    lam = rates.per_job_s(cluster.num_gpus, nodes, nodes * cluster.network.nics_per_node)
    restart = _or(rel.relaunch_s, "relaunch_s") + rendezvous_s(cluster.num_gpus, _or(rel.rendezvous_s_per_rank, "rendezvous_s_per_rank"))
    run = RunModel(mttf_s(lam), 0.0, 0.0, restart, _or(rel.detect_s, "detect_s"), 0.0, rates.planned_per_job_s(nodes), restart)
    if math.isinf(run.mttf_s):
        return 1.0 / (1.0 + run.planned_rate_s * run.planned_cost_s)
    return run.mttf_s / (run.mttf_s + run.downtime_s) / (1.0 + run.planned_rate_s * run.planned_cost_s)
