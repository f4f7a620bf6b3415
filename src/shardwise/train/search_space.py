"""The training plan space: every combination of the parallel degrees and knobs, as numpy arrays, with
the plans that cannot run removed and counted by reason.

Dimensions: tp (powers of two up to a node), pp (divisors of the GPU count), vpp (as each schedule
admits), cp (powers of two), ep (powers of two dividing the experts), ZeRO 0-3, sequence parallelism
(only with tp > 1), recompute none/selective/full, micro-batch (powers of two) and schedule. Plans that
are the same plan under two names are not enumerated twice: sequence parallelism needs tp > 1, with
pp = 1 every schedule is plain gradient accumulation (kept once, as 1f1b), and with FlashAttention
selective recompute has nothing left to recompute (kept once, as none).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_PIPELINE_STAGES
from shardwise.pipeline import resolve, schedule_info
from shardwise.pipeline.registry import planner_schedules
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec

RECOMPUTE = ("none", "selective", "full")
VPP_CHOICES = (1, 2, 3, 4, 6, 8)
FIELDS = ("tp", "pp", "vpp", "cp", "ep", "zero", "sp", "rc", "mb", "sched")

REASONS = {
    "heads": "tp does not divide the attention (or KV) heads",
    "gpus": "GPU count is not a multiple of tp*pp*cp",
    "layers": "more pipeline stages than layers",
    "stages_limit": f"more than {MAX_PIPELINE_STAGES} virtual stages (pp x vpp; Limits in the README)",
    "seq": "cp does not divide the sequence length",
    "experts": "ep does not divide the experts or dp*cp",
    "batch_small": "micro-batch x dp exceeds the global batch",
    "batch_divide": "global batch is not a multiple of micro-batch x dp",
    "schedule": "schedule does not admit this (pp, micro-batches, vpp)",
    "memory": "out of memory",
    "memory_cap": "exceeds --max-memory-gib",
}


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


@dataclass
class Candidates:
    """Plans as parallel arrays (one element per plan); `schedules[sched]` names the schedule."""

    arrays: dict[str, np.ndarray]
    schedules: tuple[str, ...]
    considered: int
    rejected: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.arrays["tp"])

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def keep(self, mask: np.ndarray, reason: str | None = None) -> None:
        """Drop the plans where `mask` is false, counting them under `reason` (a key of REASONS or a line)."""
        dropped = int((~mask).sum())
        if dropped and reason:
            self.rejected[REASONS.get(reason, reason)] += dropped
        self.arrays = {k: v[mask] for k, v in self.arrays.items()}

    def plan_dict(self, i: int) -> dict[str, Any]:
        a = {k: int(v[i]) for k, v in self.arrays.items()}
        return {
            "tp": a["tp"], "pp": a["pp"], "vpp": a["vpp"], "cp": a["cp"], "ep": a["ep"], "dp": a["dp"],
            "zero": a["zero"], "sequence_parallel": bool(a["sp"]), "recompute": RECOMPUTE[a["rc"]],
            "micro_batch": a["mb"], "schedule": self.schedules[a["sched"]],
        }


def enumerate_plans(
    model: ModelSpec,
    cluster: Cluster,
    training: TrainingSpec,
    schedules: tuple[str, ...] | None = None,
    fixed: dict[str, Any] | None = None,
    max_tp: int | None = None,
    max_cp: int = 16,
    max_micro_batch: int = 8,
    flash_attention: bool = True,
    runnable_on: tuple[str, ...] = (),
) -> Candidates:
    """All distinct plans, minus those that cannot run (counted by reason); `schedules` defaults to those
    the planner searches by default (:func:`shardwise.pipeline.registry.planner_schedules`); `fixed` pins fields
    (job-file names: tp, pp, vpp, cp, ep, zero, sequence_parallel, recompute, micro_batch, schedule);
    `runnable_on` keeps only the plans at least one of these engines runs as is."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None and v != "auto"}
    if "schedule" in fixed:
        schedules = (fixed["schedule"],)
    names = tuple(resolve(s) for s in (planner_schedules() if schedules is None else schedules))
    if not names:
        raise ShardwiseError("--schedules: give at least one schedule")
    n = cluster.num_gpus
    axes: dict[str, list[int]] = {
        "tp": _powers_of_two(max_tp or cluster.gpus_per_node),
        "pp": [d for d in range(1, min(n, model.layers + 2) + 1) if n % d == 0],
        "cp": _powers_of_two(min(max_cp, training.seq_len)),
        "ep": [e for e in _powers_of_two(model.experts) if model.experts % e == 0] if model.is_moe else [1],
        "zero": [0, 1, 2, 3],
        "sp": [0, 1],
        "rc": [0, 1, 2],
        "mb": _powers_of_two(max_micro_batch),
    }
    pins = {"tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "zero": "zero", "micro_batch": "mb"}
    for key, axis in pins.items():
        if key in fixed:
            axes[axis] = [int(fixed[key])]
    if "sequence_parallel" in fixed:
        axes["sp"] = [int(bool(fixed["sequence_parallel"]))]
    if "recompute" in fixed:
        axes["rc"] = [RECOMPUTE.index(fixed["recompute"])]
    pairs = [(si, v) for si, s in enumerate(names) for v in schedule_info(s).vpp_rule.options(VPP_CHOICES, model.layers)
             if "vpp" not in fixed or v == int(fixed["vpp"])]
    if not pairs:
        raise ShardwiseError(f"no schedule in {', '.join(names)} admits vpp={fixed.get('vpp')}")
    grids = np.meshgrid(*(np.array(axes[k]) for k in axes), np.arange(len(pairs)), indexing="ij")
    arrays = {k: g.ravel().astype(np.int64) for k, g in zip(list(axes) + ["pair"], grids, strict=True)}
    pair = np.array(pairs, dtype=np.int64)
    arrays["sched"], arrays["vpp"] = pair[arrays["pair"], 0], pair[arrays["pair"], 1]
    del arrays["pair"]
    # The same plan under two names is enumerated once.
    distinct = (arrays["sp"] == 0) | (arrays["tp"] > 1)
    if flash_attention and "recompute" not in fixed:
        distinct &= arrays["rc"] != RECOMPUTE.index("selective")  # FlashAttention stores no s^2 terms to drop
    if "schedule" not in fixed:
        single = names.index("1f1b") if "1f1b" in names else 0
        distinct &= (arrays["pp"] > 1) | ((arrays["sched"] == single) & (arrays["vpp"] == 1))
    arrays = {k: v[distinct] for k, v in arrays.items()}
    cands = Candidates(arrays, names, considered=int(distinct.sum()))
    _drop_impossible(cands, model, cluster, training)
    if runnable_on:
        keep_runnable(cands, runnable_on, model, training, flash_attention)
    return cands


def engine_view(c: Candidates, model: ModelSpec, training: TrainingSpec, flash_attention: bool = True):
    """The candidates as a :class:`~shardwise.engines.support.PlanView` (arrays, no copy)."""
    from shardwise.engines.support import PlanView

    return PlanView(c["tp"], c["pp"], c["vpp"], c["cp"], c["ep"], c["dp"], c["zero"], c["sp"], c["rc"], c["sched"],
                    c.schedules, model, training.precision, flash_attention, training.method)


def keep_runnable(c: Candidates, engines: tuple[str, ...], model: ModelSpec, training: TrainingSpec,
                  flash_attention: bool = True) -> None:
    """Drop the plans none of `engines` runs as is. With one engine each is counted under the reason of
    the engine's first rule it breaks; with several, under the engines' names."""
    from shardwise.engines.support import RULES, first_refusal

    view = engine_view(c, model, training, flash_attention)
    results = {e: first_refusal(view, e) for e in engines}
    ok = np.zeros(len(c), dtype=bool)
    for _, good in results.values():
        ok |= good
    if len(engines) == 1:
        (engine, (which, _)), = results.items()
        for k, rule in enumerate(RULES[engine]):
            n = int(((which == k) & ~ok).sum())
            if n:
                c.rejected[f"not runnable on {engine}: {rule.reason}"] += n
        c.arrays = {k: v[ok] for k, v in c.arrays.items()}
    else:
        c.keep(ok, f"runnable on none of {', '.join(engines)}")


def _drop_impossible(c: Candidates, model: ModelSpec, cluster: Cluster, training: TrainingSpec) -> None:
    kv = model.n_kv_heads
    c.keep((model.heads % c["tp"] == 0) & ((kv % c["tp"] == 0) | (c["tp"] % kv == 0)), "heads")
    c.keep(cluster.num_gpus % (c["tp"] * c["pp"] * c["cp"]) == 0, "gpus")
    c.arrays["dp"] = cluster.num_gpus // (c["tp"] * c["pp"] * c["cp"])
    c.keep(c["pp"] * c["vpp"] <= model.layers + 2, "layers")
    c.keep(c["pp"] * c["vpp"] <= MAX_PIPELINE_STAGES, "stages_limit")
    c.keep(training.seq_len % c["cp"] == 0, "seq")
    if model.is_moe:
        c.keep((model.experts % c["ep"] == 0) & ((c["dp"] * c["cp"]) % c["ep"] == 0), "experts")
    per_step = c["mb"] * c["dp"]
    c.keep(per_step <= training.global_batch, "batch_small")
    c.keep(training.global_batch % (c["mb"] * c["dp"]) == 0, "batch_divide")
    c.arrays["m"] = training.global_batch // (c["mb"] * c["dp"])
    ok = np.ones(len(c), dtype=bool)
    for si, name in enumerate(c.schedules):
        here = c["sched"] == si
        ok[here] = schedule_info(name).admits(c["pp"][here], c["m"][here], c["vpp"][here])
    ok &= np.where(c["pp"] > 1, c["m"] >= 1, True)
    c.keep(ok, "schedule")
