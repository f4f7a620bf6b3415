"""What each training engine can run: for a plan and an engine, runnable, or one line saying why not and
what would run instead, read from the engine-rules table (:mod:`shardwise.engines.table`: each rule with
its source and the engine versions it holds for).

Each rule is a predicate over a :class:`PlanView` (the plan's fields as numpy arrays), so the same rule
checks one plan (the exporters, ``train run``, the labels of ranked plans) or every candidate of the
planner at once (``train plan --runnable-on``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shardwise.engines.plan_view import PlanView
from shardwise.engines.table import ENGINES, VERSIONS, Rule, rules, tp_overlap_modes
from shardwise.engines.targets import TARGETS, engine_label, rule_engines
from shardwise.errors import ShardwiseError
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec, TrainPlan

if TYPE_CHECKING:
    from shardwise.specs.job import TrainJob

#: TP overlap modes each engine runs (the planner chooses among them): from the table's tp_overlap knob.
ENGINE_TP_OVERLAP = {e: tp_overlap_modes(e) for e in ENGINES if e != "torch"}


def _check_engine(engine: str) -> str:
    key = engine.strip().lower()
    if key not in rule_engines():
        raise ShardwiseError(f"unknown engine {engine!r}; choose one of {', '.join(rule_engines())}")
    return key


def first_refusal(view: PlanView, engine: str, version: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per plan: the index into ``rules(engine, version)`` of the first rule that refuses it (or -1); and
    the ok mask."""
    which = np.full(len(view.tp), -1, dtype=np.int64)
    for k, rule in enumerate(rules(_check_engine(engine), version)):
        hit = np.broadcast_to(np.asarray(rule.refuses(view), dtype=bool), which.shape)
        which = np.where((which < 0) & hit, k, which)
    return which, which < 0


@dataclass(frozen=True)
class Verdict:
    engine: str
    runnable: bool
    reason: str | None = None
    instead: str | None = None
    source: str | None = None

    def line(self) -> str:
        return "runs as is" if self.runnable else f"{self.reason}; would run: {self.instead}"


def view_verdict(view: PlanView, engine: str, version: str | None = None) -> Verdict:
    """The verdict for a one-plan view."""
    engine = _check_engine(engine)
    which, _ = first_refusal(view, engine, version)
    k = int(which[0])
    if k < 0:
        return Verdict(engine, True)
    rule: Rule = rules(engine, version)[k]
    return Verdict(engine, False, rule.reason, rule.instead, rule.source)


def verdict(plan: TrainPlan, engine: str, model: ModelSpec | None = None, training: TrainingSpec | None = None,
            recipe: str | None = None, arch: str | None = None, version: str | None = None) -> Verdict:
    """Whether ``engine`` (at ``version``, default the pinned one) runs ``plan`` as is (``plan.dp``
    resolved); ``recipe``: the low-precision recipe that was costed (default: the job's)."""
    return view_verdict(PlanView.of(plan, model, training, recipe, arch), engine, version)


def job_verdict(job: TrainJob, engine: str, version: str | None = None) -> Verdict:
    return view_verdict(PlanView.of_job(job), engine, version)


def verdicts(plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None,
             recipe: str | None = None, arch: str | None = None) -> dict[str, Verdict]:
    return {e: verdict(plan, e, model, training, recipe, arch) for e in rule_engines()}


def runnable_on(plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None,
                recipe: str | None = None, arch: str | None = None) -> list[str]:
    """The engines that run ``plan`` as is."""
    return [e for e, v in verdicts(plan, model, training, recipe, arch).items() if v.runnable]


def require(plan: TrainPlan, engine: str, model: ModelSpec | None = None, training: TrainingSpec | None = None,
            label: str | None = None, arch: str | None = None, version: str | None = None) -> None:
    """Raise ShardwiseError with the one-line reason and what would run when ``engine`` refuses ``plan``."""
    v = verdict(plan, engine, model, training, arch=arch, version=version)
    if not v.runnable:
        raise ShardwiseError(f"{label or engine_label(v.engine)} cannot run this plan: {v.reason}; would run: {v.instead}")


def require_job(job: TrainJob, engine: str, version: str | None = None, label: str | None = None) -> None:
    """:func:`require` for a job (its GPU resolves an ``auto`` recipe as the estimate does)."""
    require(job.plan, engine, job.model, job.training, label, job.cluster.gpu.arch, version)


def parse_engines(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"torch,megatron"`` -> ("torch", "megatron"), each checked."""
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else [x for t in text for x in t.split(",")]
    return tuple(dict.fromkeys(_check_engine(x) for x in items if x.strip()))


def costing_stack(engine: str, training: TrainingSpec) -> TrainingSpec:
    """``training`` as a plan offered for ``engine`` is costed: with that engine's software stack."""
    target = TARGETS.get(engine)
    stack = target.stack if target is not None else None
    return training if stack is None or stack == training.framework else training.model_copy(update={"framework": stack})


__all__ = ["ENGINES", "ENGINE_TP_OVERLAP", "VERSIONS", "PlanView", "Verdict", "costing_stack", "first_refusal", "job_verdict",
           "parse_engines", "require", "require_job", "runnable_on", "verdict", "verdicts", "view_verdict"]
