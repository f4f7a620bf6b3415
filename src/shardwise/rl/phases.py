"""The phases of one RL iteration, each priced by the component the project already validates.

- **rollout**: the serving simulator (:func:`shardwise.serve.simulate`) on the real batch, every request sent
  at t = 0 to the rollout pool's replicas; its time is the makespan (the last response finishing). How the
  batch drains is measured from the per-request timestamps (:func:`drain_profile`).
- **forward passes** (old log-probabilities, reference, reward model, critic values) and the **training
  step** (policy, critic): :func:`shardwise.train.estimate.estimate` of the packed batch on the training
  GPUs' layout. A forward-only pass over m micro-batches through pipeline ranks with forward times F_r per
  micro-batch takes (m - 1) max_r F_r + sum_r F_r (a pipeline of forwards, GPipe's fill and drain: Huang et
  al. 2019 Sec. 2.2; derived).
- **weight sync**: the network model (:func:`shardwise.cost.comm.group_collective_s`): in place (colocated) an
  all-gather of the weights over the training ranks that hold one copy (verl gathers the FSDP shards layer by
  layer and each inference rank keeps its slice); across pools (split) the same gather, a send of each
  inference shard to the first rollout replica over the NICs, and an NCCL broadcast over the replicas
  (OpenRLHF's and NeMo-RL's broadcast from the trainer to the engines).
- **switching** (colocated with offload): model states crossing PCIe to host memory and back
  (:func:`shardwise.cost.step.host_link_gbyte_s` at the fitted copy efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.cost.comm import group_collective_s
from shardwise.cost.constants import default_constants
from shardwise.cost.step import host_link_gbyte_s
from shardwise.errors import ShardwiseError
from shardwise.pipeline import schedule_info
from shardwise.rl.batch import TrainBatch
from shardwise.serve.config import DeploymentSpec, ServeJob
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import SimResult, simulate
from shardwise.serve.workload import Requests, WorkloadSpec
from shardwise.specs.hardware import Cluster, get_gpu
from shardwise.specs.job import TrainJob, check_plan
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.estimate import estimate
from shardwise.train.result import GIB, Estimate

# --- rollout ---------------------------------------------------------------------------------------


def rollout_serve_job(policy: ModelSpec, gpu: str, gpus: int, tp: int, pp: int, precision: str, engine: dict[str, Any],
                      price: float | None, name: str) -> ServeJob:
    """The serve job the rollout phase simulates: `gpus` / (tp pp) replicas of the policy. A GPU without a list
    price is simulated at $0/GPU-h (the rollout's time does not depend on it; the RL cost is then unknown)."""
    if price is None and get_gpu(gpu).price_usd_per_hour is None:
        price = 0.0
    if gpus % (tp * pp):
        raise ShardwiseError(f"rollout: {gpus} GPUs are not a whole number of tp{tp} x pp{pp} replicas; "
                             f"use a rollout tp*pp dividing {gpus}")
    dep = DeploymentSpec(gpu=gpu, tp=tp, pp=pp, replicas=gpus // (tp * pp), engine=engine, price_usd_per_gpu_hour=price)
    workload = WorkloadSpec(arrival="fixed", rate="inf", num_requests=1)  # the batch is passed as requests
    return ServeJob(policy, Precision.parse(precision), dep, workload, None, name)


@dataclass(frozen=True)
class Drain:
    """How a batch sent at once drains (the long tail): running sequences over time, and the idle they leave."""

    makespan_s: float
    finish_s: dict[str, float]  # time at which 50/90/99/100% of the responses are done
    peak_running: int
    batch_idle_fraction: float  # 1 - mean running sequences / peak running, over the makespan
    replica_idle_fraction: float  # GPU time of replicas whose requests are all done, over pool GPU time
    curve: tuple[tuple[float, int], ...]  # (time s, running sequences) at 21 points

    def to_dict(self) -> dict[str, Any]:
        return {"makespan_s": self.makespan_s, "finish_s": self.finish_s, "peak_running": self.peak_running,
                "batch_idle_fraction": self.batch_idle_fraction, "replica_idle_fraction": self.replica_idle_fraction,
                "running_curve": [list(p) for p in self.curve]}


def drain_profile(first_s: np.ndarray, finish_s: np.ndarray, engines: int) -> Drain:
    """Running sequences between each request's first token and its last (derived from the simulator's
    timestamps). Requests go to engines round-robin in order (:func:`shardwise.serve.simulate.run_pool`), so
    request i runs on engine i mod `engines`."""
    makespan = float(np.max(finish_s))
    starts, ends = np.sort(first_s), np.sort(finish_s)
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.argsort(times, kind="stable")
    running = np.cumsum(steps[order])
    peak = int(running.max()) if len(running) else 0
    busy = float(np.sum(finish_s - first_s))  # integral of running(t)
    idle = 1.0 - busy / (peak * makespan) if peak and makespan > 0 else 0.0
    per_engine_end = np.zeros(engines)
    np.maximum.at(per_engine_end, np.arange(len(finish_s)) % engines, finish_s)
    replica_idle = float(np.sum(makespan - per_engine_end) / (engines * makespan)) if makespan > 0 else 0.0
    grid = np.linspace(0.0, makespan, 21)
    curve = tuple((float(t), int(np.sum(first_s <= t) - np.sum(finish_s <= t))) for t in grid)
    pct = {f"p{q}": float(np.percentile(finish_s, q)) for q in (50, 90, 99)}
    pct["max"] = makespan
    return Drain(makespan, pct, peak, max(0.0, idle), max(0.0, replica_idle), curve)


@dataclass(frozen=True)
class Rollout:
    """The generation phase of one batch on one pool."""

    time_s: float
    gpus: int
    replicas: int
    tp: int
    pp: int
    gpu_memory_utilization: float
    kv_capacity_tokens: int
    output_tokens: int
    input_tokens: int
    drain: Drain
    sim: SimResult = field(compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "gpus": self.gpus, "replicas": self.replicas, "tp": self.tp, "pp": self.pp,
                "gpu_memory_utilization": self.gpu_memory_utilization, "kv_capacity_tokens": self.kv_capacity_tokens,
                "output_tokens": self.output_tokens, "input_tokens": self.input_tokens,
                "output_tokens_per_s": self.output_tokens / self.time_s, "drain": self.drain.to_dict()}


def run_rollout(job: ServeJob, requests: Requests) -> Rollout:
    """Simulate the batch on the pool (module docstring)."""
    sim = simulate(job, requests)
    pool = sim.pools[0]
    drain = drain_profile(sim.first_s, sim.finish_s, pool.engines)
    dep = job.deployment
    util = float((dep.engine or {}).get("gpu_memory_utilization", 0.9))
    return Rollout(drain.makespan_s, pool.gpus, pool.replicas, pool.tp, pool.pp, util, sim.kv_capacity_tokens,
                   int(requests.output_len.sum()), int(requests.input_len.sum()), drain, sim)


def rollout_lower_bound_s(job: ServeJob, requests: Requests) -> float | None:
    """A proven lower bound on the rollout's makespan without simulating it (None where it does not apply:
    a deployment the simulator would reject, or an engine this argument does not cover).

    Every simulated iteration of a plain engine (:meth:`shardwise.serve.timing.StepTimer.iteration_s`) costs at
    least its GPU time; a decode iteration (one that samples) at least the weights' and the LM head's read
    floors plus the fixed communication and kernel costs, g = (lin_bytes + head_bytes) / mem_rate + comm fixed +
    kernels, plus C per context token its decoders read
    (C = decode_attn_s_per_token; every other term is non-negative). A response of o tokens needs o - 1 decode
    iterations after its prefill, the j-th reading at least i + j - 1 context tokens (prompt i), so an engine
    runs N >= max(max(o - 1), sum(o - 1) / max_num_seqs) iterations and is busy at least N g + C sum(ctx) over
    its own requests. The makespan is at least the busiest engine's busy time. Requests go to the engines
    round-robin in batch order (:func:`shardwise.serve.simulate.run_pool`: request r on engine r mod E), so
    each engine's share is known; under another router the mean over the E engines of sum g (o - 1) /
    max_num_seqs + C sum(ctx) is used (derived; preemption, scheduling gaps and output lag only add)."""
    from shardwise.serve.constants import serving_constants
    from shardwise.serve.simulate import build_pools
    from shardwise.serve.timing import StepTimer

    if job.deployment.kind != "colocated":
        return None
    try:
        pools = build_pools(job, serving_constants())
        if len(pools) != 1:
            return None
        pools[0].check_requests(requests.input_len, requests.output_len)
    except ShardwiseError:
        return None  # the simulation would fail: let it say why
    pool = pools[0]
    timer = pool.timer
    if type(timer) is not StepTimer or pool.adapters is not None or pool.dp != 1 or pool.pp != 1 or timer.dp != 1:
        return None
    g = (timer.lin_bytes + timer.head_bytes) / timer.mem_rate + timer.comm_coeffs[0] + timer.kernels_s
    c = float(timer.decode_attn_s_per_token)
    seqs, engines = pool.sim_engine.max_num_seqs, pool.engines
    o = np.maximum(requests.output_len.astype(np.float64) - 1.0, 0.0)  # decode iterations per response
    ctx = o * requests.input_len.astype(np.float64) + o * np.maximum(o - 1.0, 0.0) / 2.0
    if not len(o):
        return 0.0
    if engines > 1 and job.deployment.router != "round_robin":
        chain = float(np.max(g * o + c * ctx))
        return max(chain, (g * float(o.sum()) / seqs + c * float(ctx.sum())) / engines)
    busiest = 0.0
    for k in range(min(engines, len(o))):
        mine_o, mine_ctx = o[k::engines], ctx[k::engines]
        n = max(float(mine_o.max()), float(mine_o.sum()) / seqs)
        busiest = max(busiest, n * g + c * float(mine_ctx.sum()))
    return busiest


# --- training-side passes -------------------------------------------------------------------------


def pool_cluster(cluster: Cluster, gpus: int) -> Cluster:
    """The cluster's GPUs and network, `gpus` of them (a pool of a split placement): whole nodes, or the same
    share of every node (verl's split with trainer.nnodes = rollout.nnodes, GPUs per node divided between them)."""
    if gpus == cluster.num_gpus:
        return cluster
    per, nodes = cluster.gpus_per_node, max(1, cluster.num_gpus // cluster.gpus_per_node)
    if gpus % per and nodes > 1:
        return cluster.model_copy(update={"num_gpus": gpus, "gpus_per_node": gpus // nodes})
    return cluster.model_copy(update={"num_gpus": gpus})


def train_job(model: ModelSpec, cluster: Cluster, precision: str, framework: str, compile: bool | None, plan: TrainPlan,
              batch: TrainBatch, mini_batches: int, name: str) -> TrainJob:
    """The training job of one optimizer step (one of `mini_batches`) on the batch: on every data-parallel rank
    the busiest rank's micro-batches, in rows of the batch's attention span (:meth:`TrainBatch.layout`)."""
    resolved = check_plan(model, cluster, TrainingSpec(seq_len=batch.seq_len, global_batch=1, precision=precision,
                                                       framework=framework, compile=compile), plan, check_batch=False)
    dp = resolved.dp or 1
    lay = batch.layout(model, dp, mini_batches, resolved.micro_batch, resolved.cp * resolved.tp)
    resolved = resolved.model_copy(update={"micro_batch": lay.rows})
    training = TrainingSpec(seq_len=lay.row_len, global_batch=lay.rows * lay.micro_batches * dp, precision=precision,
                            framework=framework, compile=compile)
    return TrainJob(model=model, cluster=cluster, training=training, plan=resolved, name=name)


_ESTIMATES: dict[tuple, Estimate] = {}


def cached_estimate(job: TrainJob) -> Estimate:
    """`train estimate` of a job (cached: the planner asks for the same one under several placements)."""
    c = job.cluster
    key = (job.model, c.gpu.name, c.gpu.power_limit_w, c.num_gpus, c.gpus_per_node, c.network, c.memory_headroom,
           job.training, job.plan)
    if key not in _ESTIMATES:
        if len(_ESTIMATES) > 512:
            _ESTIMATES.clear()
        _ESTIMATES[key] = estimate(job)
    return _ESTIMATES[key]


def forward_s(est: Estimate) -> float:
    """Forward-only time of the estimate's batch (module docstring): (m - 1) max_r F_r + sum_r F_r."""
    plan = est.plan
    pp, vpp = int(plan["pp"]), int(plan["vpp"])
    s2r = schedule_info(plan["schedule"]).stage_to_rank(pp, vpp)
    per_rank = [0.0] * pp
    for s, f in enumerate(est.stage_times_s["F"]):
        per_rank[s2r[s]] += f
    return (est.microbatches - 1) * max(per_rank) + sum(per_rank)


def state_bytes(est: Estimate, trained: bool) -> float:
    """Per-GPU bytes a model keeps between phases: weights (and, trained, gradients and optimizer states)."""
    m = est.memory
    return m.params + (m.grads + m.optimizer if trained else 0.0)


# --- weight sync and switching --------------------------------------------------------------------


def holders(plan: TrainPlan) -> int:
    """Training ranks that together hold one copy of the weights: tp x pp, times the ZeRO-3 shard group."""
    shard = (plan.dp_shard or (plan.dp or 1) * plan.cp) if plan.zero == 3 else 1
    return plan.tp * plan.pp * shard


def weight_sync_s(policy: ModelSpec, bytes_per_weight: float, train: Cluster, plan: TrainPlan,
                  rollout: Cluster | None, tp_r: int, pp_r: int, replicas: int) -> dict[str, float]:
    """Seconds to bring the trainer's weights to the generator (module docstring); `rollout` None: in place."""
    size = policy.params_total * bytes_per_weight
    n = holders(plan)
    gather = group_collective_s(train, "all_gather", size, n, 1) if n > 1 else 0.0
    if rollout is None:
        return {"gather_s": gather, "send_s": 0.0, "broadcast_s": 0.0, "total_s": gather}
    shard = size / (tp_r * pp_r)
    domain = train.network.nvlink_domain
    send = group_collective_s(train, "send_recv", shard, 2, domain)  # one NIC hop per shard, all shards at once
    bcast = group_collective_s(rollout, "broadcast", shard, replicas, tp_r * pp_r) if replicas > 1 else 0.0
    return {"gather_s": gather, "send_s": send, "broadcast_s": bcast, "total_s": gather + send + bcast}


def host_copy_s(bytes_per_gpu: float, cluster: Cluster) -> float:
    """One host<->device copy of `bytes_per_gpu` over each GPU's own host link (all GPUs at once; the
    link from the catalog or cluster.host, :func:`shardwise.cost.step.host_link_gbyte_s`)."""
    link = host_link_gbyte_s(cluster) * 1e9 * default_constants().step.pcie_efficiency
    return bytes_per_gpu / link


def gib(x: float) -> float:
    return x / GIB


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def nodes_ok(cluster: Cluster, gpus: int) -> bool:
    """A pool takes whole nodes, part of a single-node cluster, or the same share of every node."""
    per = cluster.gpus_per_node
    nodes = cluster.num_gpus // per
    return gpus % per == 0 or cluster.num_gpus <= per or (gpus % nodes == 0 and (per - gpus // nodes) > 0)

