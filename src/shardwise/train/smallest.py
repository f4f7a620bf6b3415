"""The smallest GPU count that fits a job ("will it fit?", most often asked of a fine-tune).

Counts 1, 2, 4, ... are tried in turn; at each, every runnable plan is enumerated and screened (the
planner's first two stages) and the leanest plan by screened peak memory decides. A count that does
not fit is explained by the exact estimate of its leanest plan: its peak and what it is made of. The
first count with a plan that fits is where the planner then searches for the fastest plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.plan_report import plan_label
from shardwise.train.planner import job_from_plan
from shardwise.train.result import GIB, Estimate
from shardwise.train.screen import screen
from shardwise.train.search_space import enumerate_plans

MAX_SMALLEST_GPUS = 4096


@dataclass(frozen=True)
class CountVerdict:
    """Whether `gpus` GPUs fit the job, and why not when they do not."""

    gpus: int
    fits: bool
    reason: str
    leanest_plan: str | None = None
    leanest_gib: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"gpus": self.gpus, "fits": self.fits, "reason": self.reason, "leanest_plan": self.leanest_plan,
                "leanest_peak_gib": self.leanest_gib}


def _counts(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _breakdown(e: Estimate) -> str:
    m = e.memory
    parts = [("weights", m.params), ("gradients", m.grads), ("optimizer", m.optimizer),
             ("activations", m.activations), ("buffers", m.buffers), ("fragmentation", m.fragmentation),
             ("runtime", m.runtime)]
    return ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts if value > 0)


def smallest_fit(model: ModelSpec, gpu: str, training: TrainingSpec, max_gpus: int = 1024,
                 memory_headroom: float | None = None, schedules: tuple[str, ...] | None = None,
                 constants: Constants | None = None) -> tuple[int | None, list[CountVerdict]]:
    """(smallest GPU count in 1, 2, 4, ... up to `max_gpus` with a plan that fits, or None; a verdict per
    count tried)."""
    if not 1 <= max_gpus <= MAX_SMALLEST_GPUS:
        raise ShardwiseError(f"--max-gpus must be in 1..{MAX_SMALLEST_GPUS:,}, got {max_gpus}")
    verdicts = []
    for n in _counts(max_gpus):
        try:
            cluster = make_cluster(gpu, n, memory_headroom=memory_headroom)
        except (ShardwiseError, ValueError):
            verdicts.append(CountVerdict(n, False, f"{n} GPUs do not make whole nodes of this GPU type"))
            continue
        cands = enumerate_plans(model, cluster, training, schedules)
        if not len(cands):
            why = "; ".join(f"{reason} ({count})" for reason, count in cands.rejected.most_common(2))
            verdicts.append(CountVerdict(n, False, f"no plan can run: {why}"))
            continue
        mem = screen(cands, model, cluster, training, constants)["memory_bytes"]
        i = int(np.argmin(mem))
        usable = cluster.usable_memory_bytes / GIB
        if mem[i] <= cluster.usable_memory_bytes:
            label = plan_label(job_from_plan(model, cluster, training, cands.plan_dict(i)).plan.model_dump())
            verdicts.append(CountVerdict(n, True, f"fits: {label} needs {mem[i] / GIB:.1f} GiB of {usable:.1f} usable",
                                         label, float(mem[i] / GIB)))
            return n, verdicts
        e = estimate(job_from_plan(model, cluster, training, cands.plan_dict(i)), constants)
        label = plan_label(e.plan)
        if e.fits:  # the screen's peak is an upper bound; the exact estimate decides
            verdicts.append(CountVerdict(n, True, f"fits: {label} needs {e.peak_memory_gib:.1f} GiB of {usable:.1f} usable",
                                         label, e.peak_memory_gib))
            return n, verdicts
        verdicts.append(CountVerdict(
            n, False, f"the leanest plan ({label}) needs {e.peak_memory_gib:.1f} GiB > {usable:.1f} usable "
                      f"({_breakdown(e)} GiB)", label, e.peak_memory_gib))
    return None, verdicts
