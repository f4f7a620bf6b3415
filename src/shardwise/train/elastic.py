"""Elastic what-ifs: what a node failure costs when the job keeps going on fewer nodes, against waiting for
the node's repair and against hot spares.

The layouts reachable after losing a node drop whole data-parallel replicas: the replicas that had a GPU on
the failed node (one when a replica spans a node or more, gpus_per_node / replica GPUs otherwise). Two ways
to get there:

- continue without a restart (torchft-style replica groups: the survivors re-form their process groups and
  carry on, the repaired node's replica later copies the states from a healthy peer). Only when every
  replica holds the whole model state: no ZeRO/FSDP sharding across replicas (ZeRO 0, or HSDP with
  ``dp_shard`` below the data-parallel group); then a failure loses the step in flight, not the work since
  the last checkpoint;
- restart on the smaller layout from the last checkpoint (always reachable while replicas remain; a layout
  whose ZeRO shards change reshards at load, :func:`shardwise.cost.checkpoint.reshard_s`), and restart
  again at full size once the node is back.

While shrunk, throughput is the surviving replicas' share, (r - l) / r (each replica keeps its batch; the
global batch shrinks for the repair time, as torchft's per-step quorum does). Failures that need no node
(software, hangs) restart the job as before. The node failures handled by shrinking add their cost as wall
time, first order in their rate (derived); the rest keeps the exact renewal formula
(:mod:`shardwise.cost.goodput`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from shardwise.cost.checkpoint import copy_s, reshard_s
from shardwise.cost.failures import DAY_S, rendezvous_s, restart_default
from shardwise.cost.goodput import RunModel, effective_block_s, ettr, optimal_interval_s
from shardwise.specs.job import TrainJob
from shardwise.train.goodput import Goodput, storage_of
from shardwise.train.result import Estimate


def state_replicas(job: TrainJob) -> int:
    """Copies of the whole model state: the data-parallel replicas under ZeRO 0, the HSDP replica groups
    (data-parallel group / dp_shard) under ZeRO 1-3; 1 when ZeRO shards over the whole group."""
    p = job.plan
    if p.zero == 0:
        return p.dp or 1
    dense = (p.dp or 1) * p.cp
    return dense // min(p.dp_shard or dense, dense)


def replicas_lost(per_replica_gpus: int, gpus_per_node: int) -> int:
    """Replicas a node failure takes down: one when a replica spans a node or more, else those on the node."""
    return max(1, gpus_per_node // per_replica_gpus)


def what_ifs(job: TrainJob, est: Estimate, g: Goodput) -> list[dict[str, Any]]:
    """Expected effective training time, days and dollars under each way of handling node failures."""
    run, tau, step = g.run, g.interval_s, est.step_time_s
    lam = 0.0 if math.isinf(run.mttf_s) else 1.0 / run.mttf_s
    lam_swap = g.rates["node_swaps"] / DAY_S
    share = lam_swap / lam if lam else 0.0
    repair = g.spares["repair_h"] * 3600
    n, gpn = job.cluster.num_gpus, min(job.cluster.gpus_per_node, job.cluster.num_gpus)
    rows = [_row(f"{int(g.spares['nodes'])} hot spare nodes", "full size; the spare takes the failed node's place",
                 g.ettr, est, int(g.spares["nodes"]) * gpn, job)]
    waiting = dataclasses.replace(run, wait_s=share * repair)
    rows.append(_row("no spares: wait for repair", f"stopped {repair / 3600:g} h per node failure", ettr(waiting, tau), est, 0, job))
    if lam_swap <= 0:
        return rows
    others = RunModel(_mttf(lam - lam_swap), run.block_s, run.durable_s, run.restart_s, run.detect_s, 0.0,
                      run.planned_rate_s, run.planned_cost_s)
    tau_o = optimal_interval_s(others, step)
    base = ettr(others, tau_o) if math.isfinite(tau_o) else 1.0
    r = state_replicas(job)
    lost = replicas_lost(n // r, gpn)
    if r - lost >= 1:
        reform = rendezvous_s(n, restart_default("rendezvous_s_per_rank"))
        nic_gpu = job.cluster.network.nics_per_node * job.cluster.network.nic_gbps / 8 * 1e9 / gpn
        loss = 2 * reform + step + repair * lost / r + copy_s(g.size.staged_bytes_gpu, nic_gpu)
        rows.append(_row("shrink, no restart (replica groups)", f"{r - lost} of {r} state replicas for {repair / 3600:g} h; "
                         "the step in flight is redone", base / (1 + lam_swap * loss), est, 0, job))
    else:
        rows.append({"policy": "shrink, no restart (replica groups)", "layout": f"not reachable: ZeRO {job.plan.zero} shards "
                     "the states over every data-parallel rank (set parallel.dp_shard for HSDP replicas)",
                     "ettr": None, "days_to_train": None, "cost_usd": None})
    dp = job.plan.dp or 1
    lost_dp = replicas_lost(n // dp, gpn)
    if dp - lost_dp < 1:
        rows.append({"policy": "shrink: restart smaller from the checkpoint", "layout": f"not reachable: dp {dp}",
                     "ettr": None, "days_to_train": None, "cost_usd": None})
        return rows
    b = effective_block_s(run, tau)
    rework = (tau + b) / 2 + run.durable_s - b
    how = job.resilience.checkpoint.reshard if job.plan.zero > 0 else "load"  # ZeRO 0: no shards to move
    reshard = reshard_s(g.size.total_bytes, job.cluster.nodes, storage_of(job.resilience), how)
    loss = run.detect_s + run.restart_s + reshard + rework + repair * lost_dp / dp + run.restart_s + run.durable_s
    rows.append(_row("shrink: restart smaller from the checkpoint", f"dp {dp - lost_dp} of {dp} for {repair / 3600:g} h; "
                     f"two restarts (reshard {reshard:.0f} s)", base / (1 + lam_swap * loss), est, 0, job))
    return rows


def _mttf(rate: float) -> float:
    return math.inf if rate <= 0 else 1.0 / rate


def _row(policy: str, layout: str, ratio: float, est: Estimate, spare_gpus: int, job: TrainJob) -> dict[str, Any]:
    days = cost = None
    if est.days_to_train is not None:
        days = est.days_to_train / ratio
        price = job.cluster.price_usd_per_gpu_hour
        if price is not None:
            cost = days * 24 * (job.cluster.num_gpus + spare_gpus) * price
    return {"policy": policy, "layout": layout, "ettr": ratio, "days_to_train": days, "cost_usd": cost}
