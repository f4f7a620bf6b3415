"""`rl plan`: search the placement (colocated, or split with the rollout pool's size), the rollout replicas' TP,
the training GPUs' parallel plan and the mode; rank by samples/s (and $ per 1k samples); say why the rest
were rejected.

For each training pool size the training plan is the training planner's pick
(:func:`shardwise.train.planner.plan_search`) for the policy update on the packed batch, under a memory cap
that leaves room for what the phase keeps beside it (colocated without offload: the engine's weights and the
frozen models' weights, taken as sharded over the pool); every candidate is then estimated whole
(:func:`shardwise.rl.step.estimate_rl`), which checks the memory of each phase exactly. Split pools take whole
nodes, on a grid of eighths of the cluster (every node count on clusters of up to 16 nodes). Async runs at the
job's staleness limit (the largest window the algorithm accepts), simulated for the MAX_ASYNC_WINDOWS pool
sizes whose one-step-off period is shortest (each at its best rollout TP) unless a bound shows it cannot win;
one-step-off needs a limit of at least 1.
On one cluster every candidate uses every GPU, so samples/s and $ per sample rank alike. The candidates are
those of the modes the job allows (``algorithm.max_staleness``: 0 is on-policy, colocated or split sync; >= 1
adds one-step-off and async): the price of stale responses (AReaL, Fu et al. 2025 Sec. 5, needs a decoupled
PPO objective to learn from them) is the user's, set by that limit, and the ranking within it is samples/s alone.
The notes give what the fastest off-policy candidate gains over the best on-policy one.

Pruning (exact): every candidate is first priced without its rollout, with a proven lower bound on the rollout's
makespan (:func:`shardwise.rl.phases.rollout_lower_bound_s`) in each mode's period formula (non-decreasing in R:
:func:`shardwise.rl.step.estimate_rl` with ``bound_only``); the serving simulator then runs only for the candidates
whose bound leaves them a chance to change a reported figure (the `top` ranked, the best on-policy one, the async
windows' pool sizes and their best rollout TP), ties included. The report equals the unpruned search's
(``prune=False``); the unsimulated feasible candidates are counted in ``bounded``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.rl.phases import pool_cluster
from shardwise.rl.spec import PlacementSpec, RLJob
from shardwise.rl.step import PeriodBound, RLEstimate, estimate_rl, iteration_batches
from shardwise.serve.memory import weight_bytes_per_gpu
from shardwise.serve.precision import Precision
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.planner import plan_search
from shardwise.train.result import GIB

Progress = Callable[[str, float], None]
PLAN_FIELDS = tuple(TrainPlan.model_fields)
#: Async windows simulated per search: the pool sizes whose one-step-off period is shortest, each at its best TP.
MAX_ASYNC_WINDOWS = 4


@dataclass
class RLPlanResult:
    """Ranked candidates and the rejected ones, by reason."""

    ranked: list[RLEstimate]
    rejected: list[tuple[str, str]]  # (candidate, reason)
    considered: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    #: feasible candidates left unsimulated: a lower bound on their period shows they miss every figure reported
    bounded: int = 0
    #: the ranked candidates the search made exact (its `top`); a report of more would miss bounded ones
    top: int | None = None

    @property
    def feasible(self) -> int:
        """Candidates that run (simulated, and bounded without simulating)."""
        return len(self.ranked) + self.bounded

    @property
    def best(self) -> RLEstimate:
        return self.ranked[0]

    def rejected_by_reason(self) -> dict[str, int]:
        return dict(Counter(_reason_kind(r) for _, r in self.rejected).most_common())

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        if self.bounded and self.top is not None and top > self.top:
            raise ShardwiseError(f"the plan searched for the top {self.top} candidates; plan again with top >= {top} to report {top}")
        return {
            "chosen": self.best.to_dict() if self.ranked else None,
            "placement_block": placement_block(self.best) if self.ranked else None,
            "ranked": [summary(e) for e in self.ranked[:top]],
            "considered": self.considered,
            "feasible": self.feasible,
            "bounded_not_simulated": self.bounded,
            "rejected_by_reason": self.rejected_by_reason(),
            "rejected": [{"candidate": c, "reason": r} for c, r in self.rejected],
            "seconds": self.seconds,
            "notes": self.notes,
        }


def _reason_kind(reason: str) -> str:
    """The kind of a rejection, for counting: the text before the first colon or number."""
    head = reason.split(":")[0]
    return head if len(head) < 60 else head[:60]


def summary(e: RLEstimate) -> dict[str, Any]:
    """One ranked candidate in a row."""
    return {"placement": e.placement, "pools": e.pools, "period_s": e.period_s, "samples_per_s": e.samples_per_s,
            "generated_tokens_per_s": e.generated_tokens_per_s, "usd_per_1k_samples": e.usd_per_1k_samples,
            "gpu_idle_fraction": e.idle(), "rollout_batch_idle_fraction": e.rollout.drain.batch_idle_fraction,
            "phases_s": e.phases_s}


def placement_block(e: RLEstimate) -> dict[str, Any]:
    """The chosen candidate as job-file sections (placement, rollout tp/pp, parallel)."""
    p = e.placement
    block: dict[str, Any] = {"kind": p["kind"], "mode": p["mode"]}
    if p["kind"] == "split":
        block["rollout_gpus"] = e.pools["rollout"]
    if p["mode"] == "async":
        block["staleness"] = p["staleness"]
    if p["kind"] == "colocated":
        block["offload"] = "all" if p["offload"] else "none"
    plan = {k: v for k, v in e.train_estimate.plan.items() if v is not None and k not in ("dp", "tp_overlap")}
    plan["micro_batch"] = e.micro_rows  # the job's budget in packed rows (the estimate's micro_batch is rows of the span)
    return {"placement": block, "rollout": {"tp": p["rollout_tp"], "pp": p["rollout_pp"]}, "parallel": plan}


def split_sizes(gpus: int, per_node: int) -> list[int]:
    """Rollout pool sizes: whole nodes, every count up to 16 nodes, else eighths of the cluster."""
    nodes = gpus // per_node
    if nodes < 2:
        return []
    counts = range(1, nodes) if nodes <= 16 else sorted({max(1, min(nodes - 1, round(nodes * k / 8))) for k in range(1, 8)})
    return [c * per_node for c in counts]


def rollout_tps(job: RLJob) -> list[int]:
    """Rollout TP degrees: powers of two within a node dividing the heads, whose weights leave room for KV."""
    m, gpu = job.policy, job.cluster.gpu
    per = job.cluster.gpus_per_node
    out = []
    for tp in (1, 2, 4, 8):
        if tp > per or m.heads % tp:
            continue
        if weight_bytes_per_gpu(m, tp, 1, Precision.parse(job.rollout.precision)) > 0.9 * gpu.memory_bytes * job.engine.gpu_memory_utilization:
            continue
        out.append(tp)
    return out


def _train_plans(job: RLJob, gpus: int, cap_gib: float, cache: dict) -> list[TrainPlan] | str:
    """The training planner's best plans for the policy update on `gpus` GPUs (a reason string if none)."""
    key = (gpus, round(cap_gib, 1))
    if key in cache:
        return cache[key]
    a, t = job.algorithm, job.training
    _, batch = iteration_batches(job)
    rows = math.ceil(batch.rows / a.mini_batches)
    rows = math.ceil(rows / gpus) * gpus
    training = TrainingSpec(seq_len=batch.seq_len, global_batch=rows, precision=t.precision, framework=t.framework, compile=t.compile)
    cluster = pool_cluster(job.cluster, gpus)
    try:
        res = plan_search(job.policy, cluster, training, max_memory_gib=cap_gib, top_k=3, schedules=("1f1b",))
        plans = [TrainPlan(**{k: v for k, v in e.plan.items() if k in PLAN_FIELDS and k != "tp_overlap"}) for e in res.top]
    except ShardwiseError as exc:
        plans = f"training phase on {gpus} GPUs: no plan fits ({exc})"
    cache[key] = plans
    return plans


def _others_gib(job: RLJob, gpus: int, engine_tp: int | None) -> float:
    """Per-GPU bytes beside the policy update: frozen models' weights sharded over the pool, and (colocated
    without offload) the engine's weights and the critic's states."""
    b = 2.0
    total = sum(m.params_total * b for m in (job.reference, job.reward) if m is not None) / gpus
    if job.critic is not None:
        total += job.critic.params_total * 16 / gpus  # bf16 weights, fp32 grads... as ZeRO-3 (Rajbhandari 2020 Fig. 1: 16 B/param)
    if engine_tp is not None:
        total += weight_bytes_per_gpu(job.policy, engine_tp, 1, Precision.parse(job.rollout.precision))
    return total / GIB


def plan_rl(job: RLJob, top: int = 5, progress: Progress | None = None, prune: bool = True) -> RLPlanResult:
    """Search the placements of `job` (module docstring). `prune`: simulate a candidate's rollout only where a
    lower bound on its period (:func:`shardwise.rl.step.estimate_rl` with ``bound_only``) leaves it a chance to
    change a reported figure: the `top` ranked, the best on-policy candidate, the async windows' pool sizes;
    the rest count as feasible (``bounded``) and drop from ``ranked``. prune=False simulates every candidate."""
    t0 = time.perf_counter()
    cluster, a = job.cluster, job.algorithm
    n = cluster.num_gpus
    usable_gib = cluster.usable_memory_bytes / GIB
    tps = rollout_tps(job)
    rejected: list[tuple[str, str]] = []
    ranked: list[RLEstimate] = []
    plans_cache: dict = {}
    if not tps:
        raise ShardwiseError(f"rollout: {job.policy.name} does not fit one {cluster.gpus_per_node}-GPU node's replica at "
                             "any TP; use a larger GPU or fp8 rollout")
    candidates: list[tuple[str, PlacementSpec, int, str | None, bool]] = []  # (label, placement, tp, offload, keep-cap)
    for tp in tps:
        for offload in ("none", "all"):
            candidates.append((f"colocated tp{tp} offload {offload}", PlacementSpec(kind="colocated", offload=offload), tp, offload,
                               offload == "none"))
    modes = ["sync", "stream"]
    if a.max_staleness >= 1:
        modes.append("one_step_off")
    else:
        rejected.append(("split one_step_off / async", "staleness limit: algorithm.max_staleness 0 allows on-policy (sync, stream) only"))
    for g in split_sizes(n, cluster.gpus_per_node):
        for tp in tps:
            if g % tp == 0:
                for mode in modes:
                    spec = PlacementSpec(kind="split", rollout_gpus=g, mode=mode)
                    candidates.append((f"split {g}+{n - g} tp{tp} {mode}", spec, tp, None, False))
    total = len(candidates)
    considered = total
    entries: list[_Entry] = []  # the feasible candidates, in candidate order: simulated, or only bounded
    for k, (label, spec, tp, offload, keep) in enumerate(candidates):
        if progress is not None:
            progress(label, k / total)
        probe = _probe(job, spec, tp, offload, keep, usable_gib, plans_cache) if prune else None
        if isinstance(probe, str):
            rejected.append((label, probe))
            continue
        if probe is not None:
            entries.append(_Entry(spec, tp, probe[0], probe[1]))
            continue
        est = _evaluate(job, label, spec, tp, offload, keep, usable_gib, plans_cache, rejected)
        if est is not None:
            entries.append(_Entry(spec, tp, None, None, est))
    _resolve_smallest(job, entries, lambda e: True, top)  # the ranked candidates shown
    _resolve_smallest(job, entries, lambda e: e.staleness == 0, 1)  # the best on-policy one (the notes)
    # Async at the staleness limit, where it can win: its period lies between max(R (1 - idle), C + I + T) + S
    # and one-step-off's, R (1 - idle) being the batch's generation with its drain removed (every sequence
    # slot busy to the end: an optimistic bound, as a fuller batch decodes each step slower); when the
    # rollout already hides under the training side the two are equal, so no window is simulated.
    skipped = 0
    ranked: list[RLEstimate] = []
    if a.max_staleness >= 1:
        best = min((e.est.period_s for e in entries if e.est is not None), default=math.inf)
        # the best rollout TP of each of the pool sizes whose one-step-off period is shortest
        windows = _resolve_sizes(job, entries, MAX_ASYNC_WINDOWS)
        ranked = [e.est for e in entries if e.est is not None]
        for e in windows:
            side = e.period_s - e.phases_s["weight sync"]
            train_side = sum(v for k, v in e.phases_s.items() if k not in ("rollout", "weight sync"))
            g, tp = e.pools["rollout"], e.placement["rollout_tp"]
            label = f"split {g}+{n - g} tp{tp} async"
            considered += 1
            bound = max(e.phases_s["rollout"] * (1 - e.rollout.drain.batch_idle_fraction), train_side) + e.phases_s["weight sync"]
            if bound >= best or e.phases_s["rollout"] <= train_side or side <= 0:
                skipped += 1
                continue  # cannot beat the best, or equal to one-step-off
            spec = PlacementSpec(kind="split", rollout_gpus=g, mode="async", staleness=a.max_staleness)
            est = _evaluate(job, label, spec, tp, None, False, usable_gib, plans_cache, rejected)
            if est is not None:
                ranked.append(est)
                best = min(best, est.period_s)
    else:
        ranked = [e.est for e in entries if e.est is not None]
    bounded = sum(e.est is None for e in entries)
    ranked.sort(key=lambda e: (-e.samples_per_s, e.gpus))
    notes: list[str] = []
    on = [e for e in ranked if e.placement["staleness"] == 0]
    if on and ranked and ranked[0].placement["staleness"] > 0:
        gain = ranked[0].samples_per_s / on[0].samples_per_s - 1
        notes.append(f"off-policy ({ranked[0].placement['mode']}) is {gain:.0%} faster than the best on-policy candidate "
                     f"({on[0].placement['kind']} sync); algorithm.max_staleness 0 keeps on-policy only")
    if progress is not None:
        progress("done", 1.0)
    if skipped:
        notes.append(f"{skipped} async candidates not simulated: a bound shows they cannot beat the best, or equal one-step-off")
    notes += [f"rollout TP searched: {', '.join(map(str, tps))}; split pools: "
             f"{', '.join(str(g) for g in split_sizes(n, cluster.gpus_per_node)) or 'none (one node)'} rollout GPUs"]
    if not ranked:
        raise ShardwiseError("no placement runs: " + "; ".join(f"{c}: {r}" for c, r in rejected[:4]))
    return RLPlanResult(ranked, rejected, considered, time.perf_counter() - t0, notes, bounded, top)


@dataclass
class _Entry:
    """A feasible candidate: its estimate once simulated, else the training plan it runs and a lower bound on its period."""

    spec: PlacementSpec
    tp: int
    plan: TrainPlan | None
    bound: PeriodBound | None
    est: RLEstimate | None = None

    @property
    def staleness(self) -> int:
        return 1 if self.spec.kind == "split" and self.spec.mode == "one_step_off" else 0

    @property
    def low(self) -> float:
        """The period, or its lower bound while not simulated."""
        return self.est.period_s if self.est is not None else self.bound.period_s  # type: ignore[union-attr]


def _simulate(job: RLJob, e: _Entry) -> None:
    """Estimate a bounded candidate in full (the plan :func:`_evaluate` would reach: the same checks passed)."""
    est = estimate_rl(job.with_placement(e.spec, plan=e.plan, tp=e.tp))
    assert isinstance(est, RLEstimate) and e.bound is not None
    if est.period_s < e.bound.period_s * (1 - 1e-12) or not est.fits:
        raise ShardwiseError(f"internal: the period bound {e.bound.period_s:.3f} s exceeds the estimate {est.period_s:.3f} s; "
                             "report this job")
    e.est = est


def _resolve_smallest(job: RLJob, entries: list[_Entry], pick: Callable[[_Entry], bool], k: int) -> None:
    """Simulate the picked candidates until the k shortest periods among them are known exactly: every bounded
    one whose bound is at most the k-th shortest simulated period (ties included, as the order breaks them)."""
    while True:
        exact = sorted(e.est.period_s for e in entries if e.est is not None and pick(e))
        cut = exact[k - 1] if len(exact) >= k else math.inf
        open_ = [e for e in entries if e.est is None and pick(e) and e.low <= cut]
        if not open_:
            return
        _simulate(job, min(open_, key=lambda e: e.low))


def _resolve_sizes(job: RLJob, entries: list[_Entry], k: int) -> list[RLEstimate]:
    """The one-step-off candidate of shortest period (the first on ties) of each of the k pool sizes whose
    shortest one-step-off period is smallest (sizes tied in period in candidate order), simulating the bounded
    candidates that could change them."""
    while True:
        sizes: dict[int, list[_Entry]] = {}
        for e in entries:
            if e.spec.kind == "split" and e.spec.mode == "one_step_off":
                sizes.setdefault(int(e.spec.rollout_gpus or 0), []).append(e)
        rows = []
        for order, group in enumerate(sizes.values()):
            m = min((e.est.period_s for e in group if e.est is not None), default=math.inf)
            open_ = [e for e in group if e.est is None and e.low <= m]
            rows.append((min([m] + [e.low for e in open_]), order, group, open_))
        rows.sort(key=lambda r: (r[0], r[1]))
        todo = next((r[3] for r in rows[:k] if r[3]), None)
        if todo is None and len(rows) > k:
            todo = next((r[3] for r in rows[k:] if r[3] and r[0] <= rows[k - 1][0]), None)
        if todo is None:
            out = []
            for _, _, group, _ in rows[:k]:
                best = None
                for e in group:
                    if e.est is not None and (best is None or e.est.period_s < best.period_s):
                        best = e.est
                assert best is not None
                out.append(best)
            return out
        _simulate(job, min(todo, key=lambda e: e.low))


def _probe(job: RLJob, spec: PlacementSpec, tp: int, offload: str | None, keep: bool, usable_gib: float,
           plans_cache: dict) -> tuple[TrainPlan, PeriodBound] | str | None:
    """What :func:`_evaluate` would reach, without simulating the rollout: the training plan it settles on and a
    lower bound on the candidate's period, or its rejection reason (each plan failing before the rollout, or on
    the memory checks, the rollout then known to run); None where that cannot be decided so (the candidate is
    then evaluated in full)."""
    n = job.cluster.num_gpus
    g_train = n if spec.kind == "colocated" else n - int(spec.rollout_gpus or 0)
    cap = usable_gib - (_others_gib(job, g_train, tp if keep else None) if (keep or spec.kind == "split") else 0.0)
    plans = _train_plans(job, g_train, max(cap, 1.0), plans_cache)
    if isinstance(plans, str):
        return plans
    reason = ""
    for plan in plans:
        try:
            b = estimate_rl(job.with_placement(spec, plan=plan, tp=tp), bound_only=True)
        except ShardwiseError as exc:
            reason = str(exc)  # raised before the rollout: the full estimate raises it too
            continue
        if not isinstance(b, PeriodBound):
            return None
        if not b.fits:
            reason = _memory_reason(b.train_memory)
            continue
        if offload == "none" and b.offload:
            reason = OFFLOAD_REASON
            continue
        return plan, b
    return reason or "no training plan fits"


OFFLOAD_REASON = "offload none: the training states leave the engine too little memory"


def _memory_reason(m: dict[str, Any]) -> str:
    return f"training phase memory: {m['need_gib']:.1f} GiB per GPU of {m['usable_gib']:.1f} usable ({m['peak_model']})"


def _evaluate(job: RLJob, label: str, spec: PlacementSpec, tp: int, offload: str | None, keep: bool, usable_gib: float,
              plans_cache: dict, rejected: list[tuple[str, str]]) -> RLEstimate | None:
    """Estimate one candidate with the training planner's plans for its pool, the first whose phases fit."""
    n = job.cluster.num_gpus
    g_train = n if spec.kind == "colocated" else n - int(spec.rollout_gpus or 0)
    cap = usable_gib - (_others_gib(job, g_train, tp if keep else None) if (keep or spec.kind == "split") else 0.0)
    plans = _train_plans(job, g_train, max(cap, 1.0), plans_cache)
    if isinstance(plans, str):
        rejected.append((label, plans))
        return None
    reason = ""
    for plan in plans:
        try:
            est = estimate_rl(job.with_placement(spec, plan=plan, tp=tp))
        except ShardwiseError as exc:
            reason = str(exc)
            continue
        if not est.fits:
            reason = _memory_reason(est.memory["train"])
            continue
        if offload == "none" and est.memory["offload"]:
            reason = OFFLOAD_REASON
            continue
        return est
    rejected.append((label, reason or "no training plan fits"))
    return None
