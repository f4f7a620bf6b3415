"""`plan_search`: the best training plans for a model, GPU type and count, sequence length and batch.

Three stages (deterministic: ties break on enumeration order):
1. enumerate every distinct plan and drop those that cannot run, counted by reason
   (:mod:`shardwise.train.search_space`), and those whose recipe another recipe beats on every term
   (:func:`shardwise.train.screen.dominated_recipes`, before any layer is costed), or whose etp, cp_comm,
   recipe or dispatcher another choice beats on every layer (:func:`shardwise.train.screen.dominated`; each
   layer configuration at the fastest TP overlap mode its stack runs);
2. screen all of them at once with numpy (:mod:`shardwise.train.screen`): a lower bound and an
   approximation of the step time, and the peak memory; drop plans that do not fit;
3. run the exact estimate (with the schedule simulator) in order of the approximation, keeping the
   best K, and stop as soon as no remaining plan can beat the K-th best exact time: neither its lower
   bound nor APPROX_TRUST of its approximation. The lower bound is a bound; the APPROX_TRUST rule is a
   heuristic (a plan whose approximation errs by more than 10% could be skipped); tests compare it with
   estimating every plan that fits on small cases. For the memory objective the screen's memory orders
   the exact evaluations.

Activation offload as a plan choice: when the job leaves `parallel.offload_activations` free and the best
plan recomputes, plans without recompute that miss GPU memory only by their activations (pipelined: with a
single micro-batch in flight offloading saves nothing, :mod:`shardwise.cost.act_offload`) are screened again
with ACT_OFFLOAD_SHARES of their activations offloaded, and the fastest few that then fit are estimated
exactly (the copies priced on the schedule's timeline), the share spread over the pipeline ranks uniformly
and selectively (`offload_activations_policy`), the faster kept; one that beats a ranked plan joins the ranking, and
a note says what it bought. Only the plans whose lower bound beats the best plan are re-screened, so the
search costs little where offload cannot help. When nothing fits at all, the fallback
(:func:`shardwise.train.advice.offload_fallback`) weighs activation offload beside the model-state offloads.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import Cluster
from shardwise.specs.job import TrainJob
from shardwise.specs.model import ModelSpec
from shardwise.specs.reliability import Resilience
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.estimate import estimate
from shardwise.train.goodput import effective_step_s, ettr_bound, ettr_of, with_goodput
from shardwise.train.pareto import pareto_front
from shardwise.train.plan_label import plan_label
from shardwise.train.result import GIB, Estimate
from shardwise.train.screen import LayerTable, ScreenOptions, dominated, drop_dominated_recipes, layer_table, screen
from shardwise.train.search_space import EVERY_PLAN, REASONS, RECOMPUTE, Candidates, enumerate_plans, group_rejections

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

OBJECTIVES = ("throughput", "cost", "memory", "goodput")
# A plan is skipped once neither its lower bound nor this share of its screened time can beat the K-th
# best exact time. The approximation's median error is under 1% (benchmarks/plan.py prints its spread);
# a few schedules at short pipelines (V-Min, m < p) are under-estimated by more, which only makes the
# search evaluate them exactly sooner.
APPROX_TRUST = 0.9
#: Shares of the activations offloaded when the search tries activation offload (module docstring), and the
#: exact estimates it spends on each share at most.
ACT_OFFLOAD_SHARES = (0.5, 1.0)
ACT_OFFLOAD_EXACT = 4
# A progress report: what the search is doing and the fraction done (0..1).
Progress = Callable[[str, float], None]


@dataclass
class PlanResult:
    """Outcome of one search on one GPU type."""

    gpu: str
    num_gpus: int
    objective: str
    top: list[Estimate]
    front: list[dict[str, Any]]
    considered: int
    feasible_screened: int
    exact_evaluations: int
    rejected: dict[str, int]
    seconds: dict[str, float]
    screen_rate_per_s: float
    notes: list[str] = field(default_factory=list)
    screened: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "num_gpus": self.num_gpus,
            "objective": self.objective,
            "considered": self.considered,
            "feasible_after_screen": self.feasible_screened,
            "exact_evaluations": self.exact_evaluations,
            "rejected": self.rejected,
            "seconds": self.seconds,
            "screened_plans_per_s": self.screen_rate_per_s,
            "top": [e.to_dict() for e in self.top],
            "pareto_front": self.front,
            "notes": self.notes,
        }


def job_from_plan(model: ModelSpec, cluster: Cluster, training: TrainingSpec, plan: dict[str, Any],
                  extra: dict[str, Any] | None = None, resilience: Resilience | None = None) -> TrainJob:
    """The job that runs one enumerated plan (`plan`: the candidates' fields, with the training fields a
    search chooses as `fp8_recipe` and `moe_dispatcher`; `extra`: fixed plan fields)."""
    plan = dict(plan)
    recipe, dispatcher = plan.pop("fp8_recipe", None), plan.pop("moe_dispatcher", None)
    if recipe is not None and recipe != training.fp8_recipe:
        training = training.model_copy(update={"fp8_recipe": recipe})
    if dispatcher is not None and dispatcher != training.moe.dispatcher:
        training = training.model_copy(update={"moe": training.moe.model_copy(update={"dispatcher": dispatcher})})
    return TrainJob(model=model, cluster=cluster, training=training, plan=TrainPlan(**plan, **(extra or {})), name=model.name,
                    resilience=resilience or Resilience())


def _score(e: Estimate, objective: str) -> tuple[float, float]:
    """Lower is better; ties go to the other axis."""
    if objective == "memory":
        return (e.peak_memory_gib, e.step_time_s)
    if objective == "goodput":
        return (effective_step_s(e), e.peak_memory_gib)
    return (e.step_time_s, e.peak_memory_gib)  # throughput; cost is the same order on one GPU type and count


def plan_search(
    model: ModelSpec,
    cluster: Cluster,
    training: TrainingSpec,
    objective: str = "throughput",
    schedules: tuple[str, ...] | None = None,
    fixed: dict[str, Any] | None = None,
    max_memory_gib: float | None = None,
    top_k: int = 5,
    constants: Constants | None = None,
    max_exact: int = 128,
    progress: bool | Progress = False,
    runnable_on: tuple[str, ...] = (),
    recipes: tuple[str, ...] | None = None,
    dispatchers: tuple[str, ...] | None = None,
    resilience: Resilience | None = None,
) -> PlanResult:
    """Search the plan space on one cluster (see the module docstring); `runnable_on` keeps only the
    plans one of these engines runs as is (:mod:`shardwise.engines.support`); `recipes` limits the
    low-precision recipes an fp8/fp4 job searches (default: all of its precision), `dispatchers` the MoE
    token dispatchers (default: the job's); `resilience`: the failures, storage and checkpoints the top plans'
    goodput assumes (the goodput objective ranks by it). `progress`: True draws
    a progress bar on the terminal; a callable receives (message, fraction done) as the search goes."""
    if objective not in OBJECTIVES:
        raise ShardwiseError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if top_k < 1:
        raise ShardwiseError(f"--top must be >= 1, got {top_k}")
    if max_exact < 1:
        raise ShardwiseError(f"--exact-budget must be >= 1 (exact estimates per GPU type), got {max_exact}")
    if max_memory_gib is not None and not (math.isfinite(max_memory_gib) and max_memory_gib > 0):
        raise ShardwiseError(f"--max-memory-gib must be a positive number of GiB, got {max_memory_gib}")
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None and v != "auto"}
    if len(runnable_on) == 1:  # a plan offered for an engine is costed with that engine's stack
        from shardwise.engines.support import costing_stack

        training = costing_stack(runnable_on[0], training)
    extra = {k: fixed[k] for k in EVERY_PLAN if k in fixed}  # what every plan carries (enumerate_plans checks them)
    t0 = time.perf_counter()
    cands = enumerate_plans(model, cluster, training, schedules, fixed, flash_attention=extra.get("flash_attention", True),
                            runnable_on=runnable_on, recipes=recipes, dispatchers=dispatchers,
                            prune=lambda c: drop_dominated_recipes(c, cluster, training, constants))
    t1 = time.perf_counter()
    if not len(cands):
        raise ShardwiseError(_nothing_runs(cands))
    if callable(progress):
        progress(f"{cluster.gpu.name}: screening {len(cands):,} plans", 0.05)
    flash = extra.get("flash_attention", True)
    table = layer_table(cands, model, cluster, training, constants, flash, fixed.get("tp_overlap"), runnable_on)
    faster = ~dominated(cands, table)
    cands.keep(faster, "dominated")
    scr = screen(cands, model, cluster, training, constants, table.subset(faster), ScreenOptions.of(extra))
    t2 = time.perf_counter()
    capacity = cluster.usable_memory_bytes
    host_ok = scr.pop("host_ok")
    gpu_fits = scr["memory_bytes"] <= capacity
    fits = gpu_fits & host_ok
    spare = _act_offload_spare(cands, table.subset(faster), scr["step_lb_s"], ~gpu_fits & host_ok, fixed, runnable_on, objective)
    if not fits.any():
        closest = _leanest_distinct(cands, scr["memory_bytes"])
        cands.keep(gpu_fits, "memory")
        cands.keep(host_ok[gpu_fits], "host_memory")
        raise NothingFits(_nothing_runs(cands, cluster), cluster, closest, dict(cands.rejected), extra)
    cands.keep(gpu_fits, "memory")
    cands.keep(host_ok[gpu_fits], "host_memory")
    scr = {k: v[fits] for k, v in scr.items()}
    if max_memory_gib is not None:
        ok = scr["memory_bytes"] <= max_memory_gib * GIB
        cands.keep(ok, "memory_cap")
        scr = {k: v[ok] for k, v in scr.items()}
    feasible = len(cands)
    if not feasible:
        raise ShardwiseError(_nothing_runs(cands))
    order_key = scr["memory_bytes"] if objective == "memory" else scr["step_s"]
    order = np.lexsort((np.arange(feasible), order_key))
    top, evaluated, notes = _exact_top(cands, scr, order, objective, top_k, max_exact, model, cluster, training, extra, constants,
                                       progress, resilience or Resilience())
    if spare is not None and top[0].plan["recompute"] != "none":
        top, bought = _with_act_offload(spare, top, objective, top_k, model, cluster, training, extra, constants, flash,
                                        resilience or Resilience())
        notes += bought
    t3 = time.perf_counter()
    front = _front(cands, scr, training, cluster.num_gpus, top, cluster.price_usd_per_gpu_hour)
    t4 = time.perf_counter()
    screen_s = t2 - t1
    return PlanResult(
        gpu=cluster.gpu.name,
        num_gpus=cluster.num_gpus,
        objective=objective,
        top=top,
        front=front,
        considered=cands.considered,
        feasible_screened=feasible,
        exact_evaluations=evaluated,
        rejected=dict(sorted(cands.rejected.items(), key=lambda kv: -kv[1])),
        seconds={"enumerate": t1 - t0, "screen": screen_s, "exact": t3 - t2, "pareto": t4 - t3, "total": t4 - t0},
        screen_rate_per_s=cands.considered / max(screen_s, 1e-9),
        notes=notes,
        screened={"step_s": scr["step_s"], "memory_bytes": scr["memory_bytes"]},
    )


def _act_offload_spare(cands: Candidates, table: LayerTable, lb: np.ndarray, over: np.ndarray, fixed: dict[str, Any],
                       runnable_on: tuple[str, ...], objective: str) -> tuple[Candidates, LayerTable, np.ndarray] | None:
    """The plans activation offload could make fit and faster (module docstring): without recompute, pipelined,
    over GPU memory but not over host memory; None where the job fixes the share, an engine is asked for (the
    engines' own offload rules are narrower: shardwise.engines.table) or the objective is memory."""
    if "offload_activations" in fixed or runnable_on or objective == "memory":
        return None
    mask = over & (cands["rc"] == RECOMPUTE.index("none")) & (cands["pp"] > 1)
    if not mask.any():
        return None
    sub = Candidates({k: v[mask] for k, v in cands.arrays.items()}, cands.schedules, int(mask.sum()),
                     recipes=cands.recipes, dispatchers=cands.dispatchers)
    return sub, table.subset(mask), lb[mask]


def _with_act_offload(spare: tuple[Candidates, LayerTable, np.ndarray], top: list[Estimate], objective: str, top_k: int,
                      model: ModelSpec, cluster: Cluster, training: TrainingSpec, extra: dict[str, Any],
                      constants: Constants | None, flash: bool, resilience: Resilience) -> tuple[list[Estimate], list[str]]:
    """(the ranking with the plans activation offload makes fit and faster, notes saying what it bought)."""
    sub, table, lb = spare
    best = top[0]
    promising = lb < best.step_time_s
    if not promising.any():
        return top, []
    sub.keep(promising)
    table = table.subset(promising)
    # Memory falls with the share, so the plans that fit at a share fit at every larger one: screen all at the
    # largest, then only those again at each smaller share; each plan runs at the smallest share that fits it.
    largest = ACT_OFFLOAD_SHARES[-1]
    options = ScreenOptions.of(extra | {"flash_attention": flash})
    scr = screen(sub, model, cluster, training, constants, table, replace(options, offload_activations=largest))
    ok = (scr["memory_bytes"] <= cluster.usable_memory_bytes) & scr["host_ok"] & (scr["step_lb_s"] < best.step_time_s)
    rows = np.nonzero(ok)[0]
    rows = rows[np.argsort(scr["step_s"][rows], kind="stable")][:ACT_OFFLOAD_EXACT]
    share = np.full(len(rows), largest)
    if len(rows):
        few = Candidates({k: v[rows] for k, v in sub.arrays.items()}, sub.schedules, len(rows), recipes=sub.recipes,
                         dispatchers=sub.dispatchers)
        for smaller in reversed(ACT_OFFLOAD_SHARES[:-1]):
            m = screen(few, model, cluster, training, constants, table.subset(rows),
                       replace(options, offload_activations=smaller))
            share = np.where((m["memory_bytes"] <= cluster.usable_memory_bytes) & m["host_ok"], smaller, share)
    found: list[Estimate] = []
    for i, x in zip(rows.tolist(), share.tolist(), strict=True):
        # The screen's memory rule is the uniform one; the selective policy peaks no higher at the same share
        # (water filling minimises the largest rank's peak), so both are estimated and the faster kept.
        fits = []
        for policy in ("uniform", "selective"):
            knobs = extra | {"offload_activations": x, "offload_activations_policy": policy}
            job = job_from_plan(model, cluster, training, sub.plan_dict(i), knobs, resilience)
            try:
                e = estimate(job, constants)
            except ShardwiseError:
                continue
            if e.fits:
                fits.append(with_goodput(job, e))
        if fits:
            found.append(min(fits, key=lambda e: _score(e, objective)))
    if not found:
        return top, []
    winner = min(found, key=lambda e: _score(e, objective))
    if _score(winner, objective) >= _score(top[-1], objective) and len(top) >= top_k:
        return top, []
    ranked = sorted(top + found, key=lambda e: _score(e, objective))[:top_k]
    gain = 1.0 - _score(winner, objective)[0] / _score(best, objective)[0]
    what = (f"{gain:.1%} faster than the best plan without it ({plan_label(best.plan)})" if gain > 0
            else f"ranked beside the plans without it (the best without: {plan_label(best.plan)})")
    return ranked, [f"activation offload: {plan_label(winner.plan)} offloads {winner.plan['offload_activations']:.0%} of "
                    f"its activations to host memory instead of recomputing them ({winner.time_s.act_offload:.3f} s of "
                    f"copies exposed): {what}"]


def _exact_top(cands: Candidates, scr: dict[str, np.ndarray], order: np.ndarray, objective: str, top_k: int, max_exact: int,
               model: ModelSpec, cluster: Cluster, training: TrainingSpec, extra: dict[str, Any], constants: Constants | None,
               progress: bool | Progress, resilience: Resilience) -> tuple[list[Estimate], int, list[str]]:
    """Exact estimates in screen order until the remaining lower bounds cannot beat the K-th best (for the
    goodput objective: a plan's effective step time is at least its step time over the best ETTR any plan
    of this cluster can reach)."""
    optimistic = np.maximum(scr["step_lb_s"], APPROX_TRUST * scr["step_s"])[order]
    if objective == "goodput":
        optimistic = optimistic / ettr_bound(cluster, resilience)
    suffix_min = np.minimum.accumulate(optimistic[::-1])[::-1]
    heap: list[tuple[tuple[float, float], int, Estimate]] = []  # max-heap of the best K via negated scores
    evaluated, notes = 0, []
    total = min(len(order), max_exact)
    bar = _progress(progress is True, total)
    report = progress if callable(progress) else None
    try:
        for pos, i in enumerate(order.tolist()):
            if len(heap) >= top_k and objective != "memory" and suffix_min[pos] >= -heap[0][0][0]:
                break
            if objective == "memory" and len(heap) >= top_k and pos >= 4 * top_k:
                break
            if evaluated >= max_exact:
                notes.append(f"stopped after {max_exact} exact estimates; later plans ranked by the screen only")
                break
            evaluated += 1
            if bar:
                bar[0].advance(bar[1])
            if report:
                report(f"{cluster.gpu.name}: exact estimate {evaluated} (at most {total})", 0.1 + 0.9 * evaluated / total)
            try:
                job = job_from_plan(model, cluster, training, cands.plan_dict(i), extra, resilience)
                e = estimate(job, constants, split_p2p=False)
                if objective == "goodput":
                    e = with_goodput(job, e)
            except ShardwiseError:
                cands.rejected[REASONS["schedule"]] += 1
                continue
            if not e.fits:
                cands.rejected[REASONS["memory" if (e.misfit or "").startswith("GPU") else "host_memory"]] += 1
                continue
            score = _score(e, objective)
            item = ((-score[0], -score[1]), -i, e)
            if len(heap) < top_k:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    finally:
        if bar:
            bar[0].stop()
    best = sorted(heap, key=lambda t: ((-t[0][0], -t[0][1]), -t[1]))
    jobs = [job_from_plan(model, cluster, training, cands.plan_dict(-i), extra, resilience) for _, i, _ in best]
    ranked = [with_goodput(j, estimate(j, constants)) for j in jobs]
    if not ranked:
        raise ShardwiseError("no plan fits in memory after exact estimation; add GPUs, allow recompute or lower the batch")
    return ranked, evaluated, notes


PLAN_KEYS = ("tp", "pp", "vpp", "cp", "cp_comm", "ulysses", "ep", "etp", "dp", "zero", "sequence_parallel", "recompute", "micro_batch",
             "schedule", "fp8_recipe", "moe_dispatcher")


def _key(plan: dict[str, Any]) -> tuple:
    return tuple(plan.get(k) for k in PLAN_KEYS)


def searched_fields(e: Estimate) -> dict[str, Any]:
    """An estimated plan in the fields the search enumerates (the recipe of an fp8/fp4 job and the
    dispatcher of an MoE model included)."""
    plan = {k: e.plan[k] for k in PLAN_KEYS if k in e.plan and (k != "ulysses" or e.plan[k] is not None)}
    for key in ("fp8_recipe", "moe_dispatcher"):
        if getattr(e, key) is not None:
            plan[key] = getattr(e, key)
    return plan


def _front(cands: Candidates, scr: dict[str, np.ndarray], training: TrainingSpec, n_gpus: int, top: list[Estimate], price: float | None) -> list[dict[str, Any]]:
    """Throughput vs peak-memory Pareto front over every plan that fits. Points carry screen values
    (`exact: false`) except the top-K plans, which carry their exact estimates."""
    exact = {_key(searched_fields(e)): e for e in top}
    points = {}
    for i in pareto_front(-scr["step_s"], scr["memory_bytes"]).tolist():
        plan = cands.plan_dict(i)
        points[_key(plan)] = _point(plan, float(scr["step_s"][i]), float(scr["memory_bytes"][i] / GIB), training, n_gpus, price, False)
    for key, e in exact.items():
        points[key] = _point(searched_fields(e), e.step_time_s, e.peak_memory_gib, training, n_gpus, price, True)
    pts = list(points.values())
    keep = pareto_front(np.array([-p["step_time_s"] for p in pts]), np.array([p["peak_memory_gib"] for p in pts]))
    return [pts[i] for i in keep]


def _point(plan: dict[str, Any], step: float, mem: float, training: TrainingSpec, n: int, price: float | None, exact: bool) -> dict[str, Any]:
    tokens = training.tokens_per_step / step
    cost = None if price is None else step * n * price / 3600 / training.tokens_per_step * 1e6
    return {"plan": plan, "step_time_s": step, "tokens_per_s_per_gpu": tokens / n, "peak_memory_gib": mem,
            "usd_per_million_tokens": cost, "exact": exact}


def _nothing_runs(c: Candidates, cluster: Cluster | None = None) -> str:
    groups = group_rejections(c.rejected)
    memory = next((n for g, n, _ in groups if g == REASONS["memory"]), 0)
    where = f" on {cluster.num_gpus} x {cluster.gpu.name}" if cluster is not None else ""
    host = c.rejected.get(REASONS["host_memory"], 0)
    if memory:
        head = (f"no plan fits{where}: all {memory:,} plans that can run need more than "
                f"{cluster.usable_memory_bytes / GIB:.1f} GiB per GPU" if cluster is not None else f"no plan fits: {memory:,} out of memory")
        if host and cluster is not None:
            h = cluster.host
            head = (f"no plan fits{where}: of the {memory:,} plans that can run, {memory - host:,} need more than "
                    f"{cluster.usable_memory_bytes / GIB:.1f} GiB per GPU and {host:,} offload more than a node's host DRAM "
                    f"({'unknown' if h.dram_gib is None else f'{h.dram_gib:,.0f}'} GiB) or NVMe holds (cluster.host; docs/offload.md)")
        rest = "; ".join(f"{n:,} {g}" for g, n, _ in groups if g != REASONS["memory"])
        return f"{head} (of {c.considered:,} plans; {rest}). Add GPUs or offload (`train plan` prices what would fit)"
    reasons = "; ".join(f"{n:,} {g} ({', '.join(r for r, _ in members[:2])})" for g, n, members in groups)
    return f"no plan can run{where}: all {c.considered:,} plans were rejected: {reasons}. Add GPUs, change the batch or free the fixed fields"


#: How many of the leanest plans a search that finds none that fits reports (:class:`NothingFits`).
CLOSEST = 3


def _leanest_distinct(cands: Candidates, memory: np.ndarray) -> list[tuple[dict[str, Any], float]]:
    """The CLOSEST leanest plans whose screened peaks differ by at least 0.1 GiB (plans that differ only in
    a knob that changes nothing here, such as the ZeRO stage at dp 1, are one)."""
    out: list[tuple[dict[str, Any], float]] = []
    for i in np.argsort(memory, kind="stable").tolist():
        if all(abs(memory[i] - m) >= 0.1 * GIB for _, m in out):
            out.append((cands.plan_dict(i), float(memory[i])))
            if len(out) == CLOSEST:
                break
    return out


class NothingFits(ShardwiseError):
    """No plan of the search fits in memory: the cluster, the leanest plans ((plan, screened peak bytes),
    leanest first), the rejections by reason and the fields every plan carried (:mod:`shardwise.train.advice`
    says what to change)."""

    def __init__(self, message: str, cluster: Cluster, closest: list[tuple[dict[str, Any], float]],
                 rejected: dict[str, int], extra: dict[str, Any]) -> None:
        super().__init__(message)
        self.cluster, self.closest, self.rejected, self.extra = cluster, closest, rejected, extra


def _progress(enabled: bool, total: int) -> tuple[RichProgress, TaskID] | None:
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("exact estimates"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task("exact", total=total)
    bar.start()
    return bar, task


def usd_per_million_tokens(e: Estimate, price: float | None) -> float | None:
    """Dollars per million training tokens at the GPU's hourly price."""
    if price is None:
        return None
    tokens_per_s = e.tokens_per_s_per_gpu * e.num_gpus
    return e.num_gpus * price / 3600 / tokens_per_s * 1e6


def plan_across_gpus(
    model: ModelSpec,
    clusters: list[Cluster],
    training: TrainingSpec,
    objective: str = "throughput",
    top_k: int = 5,
    **kw: Any,
) -> tuple[list[PlanResult], list[Estimate], list[dict[str, Any]]]:
    """Search each GPU type, then merge: the overall top K by the objective and, with several types,
    the throughput vs $/M-tokens Pareto front over every type's front points. With several engines in
    `runnable_on`, one search per engine and GPU type, each costed with its engine's stack (each estimate
    names it: ``stack["name"]``); the top then holds each search's best, so every engine's estimate is shown."""
    progress = kw.pop("progress", False)
    engines = tuple(kw.pop("runnable_on", ()) or ())
    runs = [(c, (e,)) for c in clusters for e in engines] if len(engines) > 1 else [(c, engines) for c in clusters]

    def part(k: int) -> bool | Progress:  # one search's progress as its share of all of them
        if not callable(progress):
            return progress
        return lambda message, fraction: progress(message, (k + fraction) / len(runs))

    results: list[PlanResult] = []
    empty: list[tuple[Cluster, str, ShardwiseError]] = []
    for k, (c, on) in enumerate(runs):
        try:
            results.append(plan_search(model, c, training, objective, top_k=top_k, progress=part(k), runnable_on=on, **kw))
        except ShardwiseError as exc:  # with several engines, one that runs nothing here leaves the others
            if len(engines) <= 1:
                raise
            empty.append((c, on[0], exc))
    if not results:
        raise empty[0][2]
    for c, engine, exc in empty:  # said in the search's summary of the same GPU type
        next((r for r in results if r.gpu == c.gpu.name), results[0]).notes.append(f"nothing runs on {engine}: {exc}")
    price = {c.gpu.name: c.price_usd_per_gpu_hour for c in clusters}
    for r in results:
        for p in r.front:
            p["gpu"] = r.gpu
    every = [e for r in results for e in r.top]
    if objective == "cost":
        priced = [e for e in every if price[e.gpu] is not None]
        if not priced:
            raise ShardwiseError("--objective cost needs a price: none of the GPUs has a catalog price; set cluster.price_usd_per_gpu_hour")
        every = priced
    keys: dict[str, Callable[[Estimate], tuple[float, float]]] = {
        "cost": lambda e: (usd_per_million_tokens(e, price[e.gpu]), e.step_time_s),
        "memory": lambda e: (e.peak_memory_gib, e.step_time_s),
        "throughput": lambda e: (-e.tokens_per_s_per_gpu * e.num_gpus, e.peak_memory_gib),
        "goodput": lambda e: (-e.tokens_per_s_per_gpu * e.num_gpus * ettr_of(e), e.peak_memory_gib),
    }
    key = keys.get(objective, keys["throughput"])
    top = sorted(every, key=key)[:top_k]
    if len(engines) > 1:  # each engine's best is shown, costed with its stack, in place of the last rows
        bests = [min(r.top, key=key) for r in results if r.top and (objective != "cost" or price[r.gpu] is not None)]
        others = [e for e in sorted(every, key=key) if not any(e is b for b in bests)]
        top = sorted(bests + others[:max(top_k - len(bests), 0)], key=key)
        if len(top) > top_k:
            results[0].notes.append(f"{len(top)} plans shown for --top {top_k}: the best of each of the {len(bests)} engines searched")
    fronts = [p for r in results for p in r.front]
    if len(clusters) > 1:
        priced = [p for p in fronts if p["usd_per_million_tokens"] is not None]
        keep = pareto_front(np.array([p["tokens_per_s_per_gpu"] * p.get("num_gpus", 1) for p in priced]),
                            np.array([p["usd_per_million_tokens"] for p in priced]))
        fronts = [priced[i] for i in keep]
    return results, top, fronts
