"""`train plan` on a heterogeneous cluster: which groups to use at all, and how to lay the plan over them.

The search runs in the planner's three steps:

1. **Enumerate.** Every group alone is searched by the homogeneous planner
   (:func:`shardwise.train.planner.plan_search`: every TP/PP/CP/ZeRO/recompute/micro-batch/schedule
   plan, screened, the best estimated exactly). The shared knobs of each group's best plans (tp, cp, pp,
   vpp, zero, recompute, micro-batch, schedule, ...) are then laid over every set of two or more groups
   in both heterogeneous layouts (:mod:`shardwise.specs.hetero`): data-parallel replicas in every group
   (as many as each group holds; the micro-batch halved until every replica gets one), and pipelines
   whose ranks are shared out between the groups (every split of pp ranks, or of 2 pp, the groups in
   both orders, as many replicas as the smallest share allows).
   Layouts whose tensor/context groups do not fit one node of a group, or whose batch does not split,
   are rejected with the reason.
2. **Screen.** A layout's optimistic throughput: every GPU it uses at the per-GPU rate its knobs reached
   in the homogeneous search, scaled to each GPU type by its peak FLOP/s (assumption: the same MFU on
   every GPU type; the exact step then prices the imbalance, the links and the memory).
3. **Exact.** The best-screened layouts (up to ``max_exact``) are estimated exactly
   (:func:`shardwise.train.hetero.estimate.hetero_estimate`: layer split balanced by speed under memory, batch
   split by speed, the nearest integer split to the equal-finish point, ZeRO states by memory); those
   that fit are ranked with the single-group plans. Each pick carries its layer or batch split, so
   `train estimate` of it gives the same figures.

A single-group plan is a valid plan on the cluster, so the pick is never predicted slower (or, with
``objective="cost"``, dearer) than the best plan on one group. The result compares the pick with the
best plan using only the fastest group (highest peak FLOP/s per GPU) and only the largest group.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import HeteroCluster
from shardwise.specs.hetero import HeteroJob, HeteroLayout, HeteroLayoutSpec, check_layout
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.hetero.estimate import hetero_estimate
from shardwise.train.hetero.result import HeteroEstimate
from shardwise.train.planner import OBJECTIVES, plan_search
from shardwise.train.result import Estimate

#: The plan fields a heterogeneous layout shares across its groups (dp and the layout are its own).
SHARED = ("tp", "cp", "pp", "vpp", "zero", "sequence_parallel", "recompute", "micro_batch", "schedule",
          "flash_attention", "overlap_grad_reduce")


@dataclass(frozen=True)
class HeteroOption:
    """One ranked plan: on a single group (`estimate` an :class:`Estimate`) or over several
    (a :class:`HeteroEstimate`)."""

    groups: dict[str, int]  # GPUs used per group
    label: str
    tokens_per_s: float
    usd_per_hour: float | None
    memory_used_fraction: float
    estimate: Estimate | HeteroEstimate = field(repr=False)

    @property
    def num_gpus(self) -> int:
        return sum(self.groups.values())

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour / 3600 / self.tokens_per_s * 1e6

    @property
    def mixed(self) -> bool:
        return len(self.groups) > 1

    def to_dict(self) -> dict[str, Any]:
        return {"groups": dict(self.groups), "num_gpus": self.num_gpus, "label": self.label,
                "tokens_per_s": self.tokens_per_s, "usd_per_hour": self.usd_per_hour,
                "usd_per_million_tokens": self.usd_per_million_tokens, "memory_used_fraction": self.memory_used_fraction,
                "estimate": self.estimate.to_dict()}


@dataclass
class HeteroPlanResult:
    """The ranked options (best first by the objective), the best plan on each group alone, and what the
    search did."""

    objective: str
    ranked: list[HeteroOption]
    single: dict[str, HeteroOption | None]  # best plan per group alone
    fastest_group: str
    largest_group: str
    considered: int = 0
    exact_evaluations: int = 0
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> HeteroOption:
        return self.ranked[0]

    def comparison(self) -> str:
        """The pick against the best plan on the fastest group alone and on the largest group alone."""
        best = self.best
        lines = []
        for what, g in (("fastest", self.fastest_group), ("largest", self.largest_group)):
            alone = self.single.get(g)
            if alone is None:
                lines.append(f"no plan fits on the {what} group {g!r} alone")
                continue
            if best is alone:
                lines.append(f"best plan uses only the {what} group {g!r}: leave the other groups out")
                continue
            others = ", ".join(sorted(set(best.groups) - {g})) or "none"
            gain = best.tokens_per_s / alone.tokens_per_s - 1
            cost = ""
            if best.usd_per_million_tokens is not None and alone.usd_per_million_tokens is not None:
                cost = f" at {best.usd_per_million_tokens / alone.usd_per_million_tokens:.2f}x the cost per token"
            lines.append(f"vs only the {what} group {g!r}: using {others} adds {gain:.0%} throughput{cost}")
            if self.fastest_group == self.largest_group:
                break
        return "; ".join(dict.fromkeys(lines))

    def to_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "top": [o.to_dict() for o in self.ranked],
                "single_group": {g: (o.to_dict() if o else None) for g, o in self.single.items()},
                "fastest_group": self.fastest_group, "largest_group": self.largest_group,
                "comparison": self.comparison(), "considered": self.considered,
                "exact_evaluations": self.exact_evaluations, "rejected": dict(self.rejected)}


def _price(hc: HeteroCluster, groups: dict[str, int]) -> float | None:
    prices = [hc.group(g).cluster.price_usd_per_gpu_hour for g in groups]
    return None if any(p is None for p in prices) else sum(n * p for n, p in zip(groups.values(), prices, strict=True))


def _single(hc: HeteroCluster, name: str, e: Estimate) -> HeteroOption:
    groups = {name: e.num_gpus}
    return HeteroOption(groups, f"only {name}: " + _plan_label(e.plan), e.tokens_per_s_per_gpu * e.num_gpus, _price(hc, groups),
                  e.peak_memory_gib / e.usable_memory_gib, e)


def _plan_label(p: dict[str, Any]) -> str:
    extra = "".join(f" {k}{p[k]}" for k in ("cp", "vpp") if p.get(k, 1) > 1)
    rc = f" rc={p['recompute']}" if p.get("recompute", "none") != "none" else ""
    return f"tp{p['tp']} pp{p['pp']} dp{p['dp']}{extra} z{p['zero']} mb{p['micro_batch']} {p['schedule']}{rc}"


def _mixed(e: HeteroEstimate) -> HeteroOption:
    return HeteroOption(dict(e.gpus_per_group), e.label(), e.tokens_per_s, e.usd_per_hour, e.memory_used_fraction, e)


def _key(objective: str) -> Callable[[HeteroOption], tuple]:
    if objective == "cost":
        return lambda o: (o.usd_per_million_tokens if o.usd_per_million_tokens is not None else float("inf"), -o.tokens_per_s)
    if objective == "memory":
        return lambda o: (o.memory_used_fraction, -o.tokens_per_s)
    return lambda o: (-o.tokens_per_s,)


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write `total` as `parts` positive integers, in order."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in itertools.pairwise(bounds))


def _layouts(knobs: dict[str, Any], hc: HeteroCluster, subset: tuple[str, ...], global_batch: int) -> Iterator[dict[str, Any]]:
    """The `parallel` mappings of both layouts of `knobs` over the groups of `subset` (module docstring)."""
    tp, cp, pp, mb = knobs["tp"], knobs["cp"], knobs["pp"], knobs["micro_batch"]
    shared = {k: v for k, v in knobs.items() if k != "pp"}
    reps = {g: hc.group(g).num_gpus // (tp * cp * pp) for g in subset}
    data_mb = mb  # more replicas than one group's: halve the micro-batch until each replica gets one or more
    while data_mb > 1 and global_batch // data_mb < sum(reps.values()):
        data_mb //= 2
    if all(d > 0 for d in reps.values()) and global_batch % data_mb == 0:
        yield shared | {"pp": pp, "replicas": reps, "micro_batch": data_mb}
    for order, total in itertools.product((subset, subset[::-1]) if len(subset) == 2 else (subset,),
                                          sorted({max(pp, len(subset)), 2 * pp})):
        for counts in _compositions(total, len(subset)):
            dp = min(hc.group(g).num_gpus // (tp * cp * n) for g, n in zip(order, counts, strict=True))
            while dp > 0 and global_batch % (mb * dp):
                dp -= 1
            if dp > 0:
                stages = [g for g, n in zip(order, counts, strict=True) for _ in range(n)]
                yield shared | {"stage_groups": stages, "dp": dp}


def _screen(layout: dict[str, Any], rate: dict[str, float]) -> float:
    """Optimistic tokens/s: every GPU used at its group's per-GPU rate (module docstring)."""
    tp, cp = layout["tp"], layout["cp"]
    if "replicas" in layout:
        return sum(d * tp * cp * layout["pp"] * rate[g] for g, d in layout["replicas"].items())
    return sum(tp * cp * layout["dp"] * rate[g] for g in layout["stage_groups"])


def _reason(msg: str) -> str:
    """A rejection's reason: the field the message names and what it says first."""
    head = ": ".join(msg.split(";", 1)[0].split(": ")[:2])
    return head if len(head) <= 100 else head[:99].rsplit(" ", 1)[0] + " ..."


def hetero_plan(model: ModelSpec, cluster: HeteroCluster, training: TrainingSpec, objective: str = "throughput",
                top_k: int = 5, max_exact: int = 16, per_group_exact: int = 16, schedules: tuple[str, ...] | None = None,
                max_memory_gib: float | None = None, progress: Callable[[str, float], None] | None = None,
                given: HeteroLayout | None = None) -> HeteroPlanResult:
    """Search plans over the groups of `cluster` (module docstring). `given`: the job's own layout, estimated
    and ranked with the search's options (labelled so), so the answer is never slower than what the job gave."""
    if objective not in OBJECTIVES:
        raise ShardwiseError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if max_exact < 1:
        raise ShardwiseError(f"--exact-budget must be >= 1, got {max_exact}")
    kw: dict[str, Any] = {"schedules": schedules} if schedules else {}
    single: dict[str, HeteroOption | None] = {}
    knob_sets: dict[tuple, dict[str, Any]] = {}
    rate: dict[str, float] = {}  # per-GPU tokens/s per group, at its best plan
    peak = {g.name: g.gpu.peak_flops(training.precision) for g in cluster.groups}
    rejected: Counter[str] = Counter()
    considered = 0
    for k, g in enumerate(cluster.groups):
        if progress:
            progress(f"searching group {g.name} alone", k / (len(cluster.groups) + 1))
        res = plan_search(model, g.cluster, training, objective, top_k=max(top_k, 4), max_exact=per_group_exact,
                          max_memory_gib=max_memory_gib, **kw)
        considered += res.considered
        fits = [e for e in res.top if e.fits]
        single[g.name] = _single(cluster, g.name, fits[0]) if fits else None
        if not fits:
            rejected[f"group {g.name} alone: no plan fits"] += 1
        for e in fits:
            knob_sets.setdefault(tuple(e.plan[s] for s in SHARED), {s: e.plan[s] for s in SHARED})
            rate.setdefault(g.name, e.tokens_per_s_per_gpu / peak[g.name])
    best_rate = max(rate.values(), default=0.0)
    rate = {g: rate.get(g, best_rate) * peak[g] for g in peak}

    candidates: dict[str, tuple[float, dict[str, Any]]] = {}
    names = cluster.names
    for size in range(2, len(names) + 1):
        for subset in itertools.combinations(names, size):
            for knobs in knob_sets.values():
                for layout in _layouts(knobs, cluster, subset, training.global_batch):
                    considered += 1
                    candidates.setdefault(repr(sorted(layout.items())), (_screen(layout, rate), layout))
    ranked_layouts = sorted(candidates.values(), key=lambda c: -c[0])

    options = [o for o in single.values() if o is not None]
    exact = 0
    for _, layout in ranked_layouts:
        if exact >= max_exact:
            rejected["screened out (exact budget)"] += 1
            continue
        try:
            job_layout = check_layout(model, cluster, training, HeteroLayoutSpec(**layout))
        except ShardwiseError as exc:
            rejected[_reason(str(exc))] += 1
            continue
        if progress:
            progress(f"exact estimate {exact + 1} of at most {max_exact}", (len(names) + exact / max_exact) / (len(names) + 1))
        exact += 1
        try:
            e = hetero_estimate(HeteroJob(model, cluster, training, job_layout, model.name), batch_options=1, refine=False)
        except ShardwiseError as exc:
            rejected[_reason(str(exc))] += 1
            continue
        if not e.fits or (max_memory_gib is not None and e.peak_memory_gib > max_memory_gib):
            worst = max(e.ranks, key=lambda r: r.memory.total / r.capacity_gib)
            rejected[f"out of memory on {worst.group}"] += 1
            continue
        options.append(_mixed(e))
    if given is not None:
        e = hetero_estimate(HeteroJob(model, cluster, training, given, model.name))  # as `train estimate` costs it
        if e.fits and (max_memory_gib is None or e.peak_memory_gib <= max_memory_gib):
            mine = _mixed(e)
            options = [o for o in options if o.label != mine.label]  # the search found it too: one row
            options.append(replace(mine, label=f"{mine.label} (the job's layout)"))
        else:
            rejected["the job's layout: out of memory"] += 1
    if not options:
        raise ShardwiseError(f"no plan fits on {cluster.describe()} for {model.name} (rejected: "
                             f"{', '.join(f'{k} x{n}' for k, n in rejected.most_common(3))}); add GPUs or lower the batch")
    options.sort(key=_key(objective))
    fastest = max(cluster.groups, key=lambda g: peak[g.name]).name
    largest = max(cluster.groups, key=lambda g: (g.num_gpus, g.gpu.memory_bytes)).name
    return HeteroPlanResult(objective, options[:top_k], single, fastest, largest, considered, exact, dict(rejected))
