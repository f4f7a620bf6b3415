"""One RL iteration under a placement and a mode: phase times, their overlap, memory per phase, throughput.

Phases (each from the validated component, :mod:`shardwise.rl.phases`): rollout R (serving simulator), rule
reward C (CPU: ceil(N / workers) x seconds per response), forward passes I (old log-probabilities, reference,
reward model, critic values), training T (policy and critic: epochs x mini-batches optimizer steps), weight
sync S and, colocated with offload, the host copies W. The iteration time (period) per mode (derived; the
pipelining of generation and training as in AReaL, Fu et al. 2025 Sec. 4, and verl's one-step-off recipe):

- colocated, sync: R + C + I + T + S + W (the GPUs run one phase at a time; verl's hybrid engine);
- split, sync: R + C + I + T + S (each pool waits for the other);
- split, one_step_off: max(R, C + I + T) + S (batch k+1 is generated while batch k trains; the generator
  pauses to load the new weights);
- split, async with staleness eta: max(R_eta, C + I + T) + S, where R_eta is the simulated makespan of
  (eta + 1) batches sent at once, over eta + 1: the generator keeps eta + 1 batches in flight, so the long
  tail of one batch overlaps the next instead of idling the pool (AReaL's streaming generation; partial
  rollouts that interrupt a response at a weight update are not modelled).

Memory per phase (per GPU, against the cluster's usable memory): colocated without offload every model's
states stay and the engine's KV cache gets what they leave (its gpu_memory_utilization lowered by them);
with offload (verl's param/optimizer offload, vLLM sleep mode) only the running phase's model is resident and
W moves the policy's and critic's weights and optimizer states out and back, and the frozen models' weights
in, each iteration. Split pools hold their own models throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.rl.batch import StepLayout, TrainBatch, draw_batch, train_batch
from shardwise.rl.phases import (
    Rollout,
    cached_estimate,
    forward_s,
    gib,
    host_copy_s,
    nodes_ok,
    pool_cluster,
    rollout_serve_job,
    run_rollout,
    state_bytes,
    train_job,
    weight_sync_s,
)
from shardwise.rl.spec import RLJob
from shardwise.serve.config import ServeJob
from shardwise.serve.memory import weight_bytes_per_gpu
from shardwise.serve.precision import Precision
from shardwise.serve.workload import Requests
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainPlan
from shardwise.train.result import Estimate

#: Below this share of GPU memory left to the engine a colocated rollout is not attempted without offload.
MIN_ENGINE_SHARE = 0.05


@dataclass(frozen=True)
class Segment:
    """One phase on one pool within an iteration (seconds from the iteration's start)."""

    pool: str
    phase: str
    start_s: float
    end_s: float


@dataclass
class RLEstimate:
    """What `rl estimate` reports for one job."""

    name: str
    placement: dict[str, Any]
    samples: int
    period_s: float
    phases_s: dict[str, float]
    rollout: Rollout
    train_batch: TrainBatch
    train_steps: int
    train_estimate: Estimate
    sync: dict[str, float]
    memory: dict[str, Any]
    timeline: list[Segment]
    pools: dict[str, int]
    usd_per_hour: float | None
    notes: list[str] = field(default_factory=list)
    rollout_window: Rollout | None = None  # async: the (eta + 1)-batch window whose makespan sets R_eta
    policy: ModelSpec | None = None
    mini_batches: int = 1
    micro_rows: int = 1  # the job's micro_batch: rows of the batch's budget per micro-batch

    @property
    def fits(self) -> bool:
        return bool(self.memory["fits"])

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.period_s

    @property
    def rows_per_step(self) -> int:
        """Packed rows of one optimizer step (rounded up to micro-batch x data-parallel ranks)."""
        plan = self.train_estimate.plan
        return self.train_estimate.microbatches * plan["micro_batch"] * plan["dp"]

    @property
    def row_len(self) -> int:
        """Tokens per row the optimizer step ran (:meth:`TrainBatch.layout`: the attention span, packed)."""
        return self.layout.row_len

    @property
    def layout(self) -> StepLayout:
        plan = self.train_estimate.plan
        return self.train_batch.layout(self.policy, plan["dp"], self.mini_batches, self.micro_rows, plan["cp"] * plan["tp"])

    @property
    def generated_tokens_per_s(self) -> float:
        return self.rollout.output_tokens / self.period_s

    @property
    def trained_tokens_per_s(self) -> float:
        return self.train_batch.tokens / self.period_s

    @property
    def gpus(self) -> int:
        return sum(self.pools.values()) if self.placement["kind"] == "split" else self.pools["all"]

    @property
    def usd_per_1k_samples(self) -> float | None:
        if self.usd_per_hour is None:
            return None
        return self.usd_per_hour * self.period_s / 3600 / self.samples * 1000

    def idle(self) -> dict[str, float]:
        """Idle share of each pool's GPU time in one iteration (GPU phases only; the rollout's own drain is
        in the rollout's `drain`)."""
        out = {}
        for pool in self.pools:
            busy = sum(s.end_s - s.start_s for s in self.timeline if s.pool == pool and s.phase != "reward (cpu)")
            out[pool] = max(0.0, 1.0 - busy / self.period_s)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "placement": self.placement,
            "pools": self.pools,
            "gpus": self.gpus,
            "samples": self.samples,
            "period_s": self.period_s,
            "samples_per_s": self.samples_per_s,
            "generated_tokens_per_s": self.generated_tokens_per_s,
            "trained_tokens_per_s": self.trained_tokens_per_s,
            "usd_per_hour": self.usd_per_hour,
            "usd_per_1k_samples": self.usd_per_1k_samples,
            "phases_s": self.phases_s,
            "gpu_idle_fraction": self.idle(),
            "rollout": self.rollout.to_dict(),
            "rollout_window": None if self.rollout_window is None else self.rollout_window.to_dict(),
            "train_batch": {"rows": self.train_batch.rows, "seq_len": self.train_batch.seq_len,
                            "tokens": self.train_batch.tokens, "packed": self.train_batch.packed,
                            "fill": self.train_batch.fill, "optimizer_steps": self.train_steps,
                            "rows_per_step": self.rows_per_step, "row_len": self.row_len, "layout": self.layout.to_dict(),
                            "step_time_s": self.train_estimate.step_time_s, "plan": self.train_estimate.plan},
            "weight_sync_s": self.sync,
            "memory": self.memory,
            "fits": self.fits,
            "timeline": [s.__dict__ for s in self.timeline],
            "notes": self.notes,
        }


@dataclass(frozen=True)
class TrainSide:
    """The training GPUs' phases: times and per-GPU memory of every model they hold."""

    forward_s: dict[str, float]
    train_s: dict[str, float]
    steps: int
    actor: Estimate
    resident: dict[str, float]  # bytes per GPU each model keeps between phases
    peak: dict[str, float]  # bytes per GPU of each trained model's training step
    moved: float  # bytes per GPU an offloading colocated iteration copies over PCIe


def train_side(job: RLJob, cluster: Cluster, batch: TrainBatch) -> TrainSide:
    """Forward passes and training steps on `cluster` with the job's layout (module docstring)."""
    t, a = job.training, job.algorithm
    args = (cluster, t.precision, t.framework, t.compile, job.plan, batch)
    actor = cached_estimate(train_job(job.policy, *args, a.mini_batches, job.name + " (policy update)"))
    steps = a.epochs * a.mini_batches
    fwd, train, resident, peak = {}, {"policy": steps * actor.step_time_s}, {}, {"policy": actor.memory.total}
    resident["policy"] = state_bytes(actor, trained=True)
    moved = 2 * (actor.memory.params + actor.memory.optimizer)

    def forward(model: ModelSpec) -> Estimate:
        return cached_estimate(train_job(model, *args, 1, job.name + " (forward)"))

    if a.recompute_logprobs:
        fwd["old log-probs"] = forward_s(forward(job.policy))
    if job.reference is not None:
        ref = forward(job.reference)
        fwd["reference"] = forward_s(ref)
        resident["reference"] = state_bytes(ref, trained=False)
        moved += resident["reference"]
    if job.reward is not None:
        rm = forward(job.reward)
        fwd["reward model"] = forward_s(rm)
        resident["reward model"] = state_bytes(rm, trained=False)
        moved += resident["reward model"]
    if job.critic is not None:
        fwd["critic values"] = forward_s(forward(job.critic))
        critic = cached_estimate(train_job(job.critic, *args, a.mini_batches, job.name + " (critic update)"))
        train["critic"] = steps * critic.step_time_s
        resident["critic"] = state_bytes(critic, trained=True)
        peak["critic"] = critic.memory.total
        moved += 2 * (critic.memory.params + critic.memory.optimizer)
    return TrainSide(fwd, train, steps, actor, resident, peak, moved)


def _train_memory(side: TrainSide, usable: float, offload: bool, engine_weights: float) -> dict[str, Any]:
    """The training phase's need per GPU: the model being trained at its peak, plus whatever stays resident."""
    worst, need = "", 0.0
    for model, peak in side.peak.items():
        others = 0.0 if offload else sum(v for k, v in side.resident.items() if k != model) + engine_weights
        if peak + others > need:
            worst, need = model, peak + others
    return {"need_gib": gib(need), "usable_gib": gib(usable), "fits": need <= usable, "peak_model": worst,
            "resident_gib": {k: gib(v) for k, v in side.resident.items()} if not offload else {}}


def estimate_rl(job: RLJob) -> RLEstimate:
    """Estimate one iteration of `job` under its placement and mode (module docstring)."""
    cluster, p, a, r = job.cluster, job.placement, job.algorithm, job.rollout
    n_all = cluster.num_gpus
    if p.kind == "split":
        g_r = int(p.rollout_gpus or 0)
        g_t = n_all - g_r
        for what, g in (("rollout_gpus", g_r), ("training GPUs", g_t)):
            if not nodes_ok(cluster, g):
                raise ShardwiseError(f"placement.{what if what == 'rollout_gpus' else 'rollout_gpus'}: {what} {g} is not a "
                                     f"whole number of {cluster.gpus_per_node}-GPU nodes nor the same share of each node; pools take whole nodes or "
                                     "an equal share of every node")
        train_cluster, rollout_cluster = pool_cluster(cluster, g_t), pool_cluster(cluster, g_r)
        pools = {"rollout": g_r, "train": g_t}
    else:
        g_r = g_t = n_all
        train_cluster, rollout_cluster = cluster, None
        pools = {"all": n_all}
    requests = draw_batch(r.input_len, r.output_len, a.prompts_per_step, a.group_size, r.seed, job.engine.max_model_len)
    batch = train_batch(requests, job.training.packing, job.training.pack_len)
    side = train_side(job, train_cluster, batch)
    usable = cluster.usable_memory_bytes
    hbm = cluster.gpu.memory_bytes
    engine_knobs = dict(r.engine or {})
    util = float(job.engine.gpu_memory_utilization)
    notes: list[str] = []
    engine_w = weight_bytes_per_gpu(job.policy, r.tp, r.pp, Precision.parse(r.precision))
    memory: dict[str, Any] = {}
    offload = False
    price = cluster.price_usd_per_gpu_hour
    choices = [False, True] if p.kind == "colocated" and p.offload == "auto" else [p.kind == "colocated" and p.offload == "all"]
    for k, offload in enumerate(choices):
        knobs = dict(engine_knobs)
        if p.kind == "colocated":
            resident = sum(side.resident.values())
            share = util - resident / hbm
            if not offload and share < MIN_ENGINE_SHARE and len(choices) == 1:
                raise ShardwiseError(f"placement.offload none: the training states ({gib(resident):.1f} GiB per GPU) leave "
                                     f"the engine {share:.0%} of GPU memory; use offload: all or auto")
            if not offload:
                knobs["gpu_memory_utilization"] = round(share, 6)
            memory["rollout"] = {"resident_gib": 0.0 if offload else gib(resident), "engine_share": knobs.get("gpu_memory_utilization", util)}
            memory["train"] = _train_memory(side, usable, offload, 0.0 if offload else engine_w)
            if k + 1 < len(choices) and (share < MIN_ENGINE_SHARE or not memory["train"]["fits"]):
                continue  # auto: keeping the states does not fit; offload
        else:
            memory["rollout"] = {"resident_gib": 0.0, "engine_share": util}
            memory["train"] = _train_memory(side, usable, False, 0.0)
        serve = rollout_serve_job(job.policy, cluster.gpu.name, g_r, r.tp, r.pp, r.precision, knobs, price, job.name)
        key = (job.policy, cluster.gpu.name, g_r, r.tp, r.pp, r.precision, tuple(sorted(knobs.items())), price,
               r.input_len.model_dump_json(), r.output_len.model_dump_json(), r.seed, a.prompts_per_step, a.group_size)
        try:
            rollout = _rollout(key, serve, requests)
        except ShardwiseError:
            if k + 1 < len(choices):
                continue  # auto: the engine does not fit beside the kept states; offload
            raise
        break
    memory["offload"] = offload
    memory["fits"] = memory["train"]["fits"]
    memory["rollout"].update({"kv_capacity_tokens": rollout.kv_capacity_tokens,
                              "kv_gib_per_gpu": float(rollout.sim.pools[0].capacity.kv_gib)})
    window = None
    rollout_s = rollout.time_s
    if p.kind == "split" and p.mode == "async":
        eta = p.staleness
        more = draw_batch(r.input_len, r.output_len, a.prompts_per_step * (eta + 1), a.group_size, r.seed, job.engine.max_model_len)
        window = _rollout((*key, "window", eta), serve, more)
        rollout_s = min(rollout_s, window.time_s / (eta + 1))
    sync = weight_sync_s(job.policy, 2.0, train_cluster, _plan(side), rollout_cluster, r.tp, r.pp, rollout.replicas)
    reward_cpu = math.ceil(requests.output_len.size / job.spec.reward.cpu_workers) * job.spec.reward.cpu_s_per_sample
    switch = host_copy_s(side.moved, cluster) if offload else 0.0
    s = sync["total_s"]
    phases = {"rollout": rollout_s, "reward (cpu)": reward_cpu, **{f"forward: {k}": v for k, v in side.forward_s.items()},
              **{f"train: {k}": v for k, v in side.train_s.items()}, "weight sync": s}
    if offload:
        phases["offload/onload"] = switch
    timeline: list[Segment] = []
    if p.kind == "colocated" or p.mode == "sync":
        rp, tp_ = ("all", "all") if p.kind == "colocated" else ("rollout", "train")
        t = 0.0
        order = [(rp, "rollout", rollout_s), (tp_, "reward (cpu)", reward_cpu)]
        order += [(tp_, f"forward: {k}", v) for k, v in side.forward_s.items()]
        order += [(tp_, f"train: {k}", v) for k, v in side.train_s.items()]
        if offload:
            order.append((tp_, "offload/onload", switch))
        for pool, name, dt in order:
            if dt > 0:
                timeline.append(Segment(pool, name, t, t + dt))
            t += dt
        for pool in dict.fromkeys((rp, tp_)):
            timeline.append(Segment(pool, "weight sync", t, t + s))
        period = t + s
    else:
        timeline.append(Segment("rollout", "rollout", 0.0, rollout_s))
        t = 0.0
        for name, dt in [("reward (cpu)", reward_cpu), *[(f"forward: {k}", v) for k, v in side.forward_s.items()],
                         *[(f"train: {k}", v) for k, v in side.train_s.items()]]:
            if dt > 0:
                timeline.append(Segment("train", name, t, t + dt))
            t += dt
        body = max(rollout_s, t)
        for pool in ("rollout", "train"):
            timeline.append(Segment(pool, "weight sync", body, body + s))
        period = body + s
    if job.training.pack_len is not None and job.training.pack_len < batch.seq_len:
        notes.append(f"training.pack_len {job.training.pack_len} is shorter than the longest sequence; rows of {batch.seq_len} tokens used")
    if batch.packed:
        plan = side.actor.plan
        lay = batch.layout(job.policy, plan["dp"], job.algorithm.mini_batches, job.plan.micro_batch, plan["cp"] * plan["tp"])
        notes.append(f"packed: micro-batches of up to {batch.seq_len * job.plan.micro_batch:,} tokens per data-parallel rank, costed "
                     f"as rows of {lay.row_len:,} tokens (the batch's attention span: attention within each sequence); "
                     f"each optimizer step waits for its busiest rank, {lay.imbalance - 1:.0%} more work than the mean")
    if not memory["fits"]:
        notes.append(f"training phase needs {memory['train']['need_gib']:.1f} GiB per GPU of {memory['train']['usable_gib']:.1f} usable")
    placement = {"kind": p.kind, "mode": p.mode if p.kind == "split" else "sync", "rollout_tp": r.tp, "rollout_pp": r.pp,
                 "offload": offload if p.kind == "colocated" else None, "staleness": p.staleness if p.mode == "async" else
                 (1 if p.mode == "one_step_off" else 0), "train_plan": _plan_text(side.actor.plan)}
    return RLEstimate(job.name, placement, requests.output_len.size, period, phases, rollout, batch, side.steps, side.actor,
                      sync, memory, timeline, pools, None if price is None else price * n_all, notes, window, job.policy,
                      job.algorithm.mini_batches, job.plan.micro_batch)


_ROLLOUTS: dict[tuple, Rollout] = {}


def _rollout(key: tuple, serve: ServeJob, requests: Requests) -> Rollout:
    """The rollout phase, simulated once per pool, engine and batch (the planner asks again under other modes)."""
    if key not in _ROLLOUTS:
        if len(_ROLLOUTS) > 256:
            _ROLLOUTS.clear()
        try:
            _ROLLOUTS[key] = run_rollout(serve, requests)
        except ShardwiseError as exc:
            raise ShardwiseError(f"rollout phase: {exc}") from None
    return _ROLLOUTS[key]


def _plan(side: TrainSide) -> TrainPlan:
    plan = dict(side.actor.plan)
    return TrainPlan(**{k: v for k, v in plan.items() if k in TrainPlan.model_fields})


def _plan_text(plan: dict[str, Any]) -> str:
    return (f"tp{plan['tp']} pp{plan['pp']} dp{plan['dp']} zero{plan['zero']} rc={plan['recompute']}"
            + (f" cp{plan['cp']}" if plan.get("cp", 1) > 1 else ""))
