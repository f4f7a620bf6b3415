"""A plan as the engine rules read it: its fields as equal-length numpy arrays (one element per plan), so
one rule checks a single plan (the exporters, ``train run``) or every candidate of the planner at once.

Kept apart from the rules table (:mod:`shardwise.engines.table`) and the support report
(:mod:`shardwise.engines.support`) so that both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec, TrainPlan

if TYPE_CHECKING:
    from shardwise.specs.job import TrainJob

RECOMPUTE = ("none", "selective", "full")
CP_COMMS = ("p2p", "allgather", "a2a", "a2a+p2p")


@lru_cache(maxsize=64)
def splits_backward(schedule: str) -> bool:
    """True when the schedule runs backward as separate I (input-gradient) and W (weight-gradient)
    actions (the zero-bubble family, DualPipeV, auto); read off a small generated instance."""
    from shardwise.pipeline import generate_schedule, resolve, schedule_info
    from shardwise.pipeline.ir import I_CODE, W_CODE

    name = resolve(schedule)
    if schedule_info(name).takes_costs:  # searched per job: its orders may split the backward
        return True
    sched = generate_schedule(name, 4, 8)
    return any(code in (I_CODE, W_CODE) for arr in sched.codes for code in arr[:, 2].tolist())


@dataclass
class PlanView:
    """Plan fields as equal-length numpy arrays (one element per plan), plus what is shared by all.
    ``sched``, ``cpc``, ``rcp`` and ``disp`` index ``schedules``, ``cp_comms``, ``recipes`` (the resolved
    low-precision recipe, "none" for 16-bit GEMMs) and ``dispatchers``; the other fields are the job's."""

    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    zero: np.ndarray
    sp: np.ndarray
    rc: np.ndarray  # index into RECOMPUTE
    sched: np.ndarray  # index into `schedules`
    schedules: tuple[str, ...]
    model: ModelSpec | None = None
    precision: str = "bf16"
    flash_attention: bool = True
    method: str = "full"
    etp: np.ndarray | None = None  # expert TP (tp where None)
    cpc: np.ndarray | None = None  # index into cp_comms (p2p where None)
    cp_comms: tuple[str, ...] = CP_COMMS
    rcp: np.ndarray | None = None  # index into recipes (the first where None)
    recipes: tuple[str, ...] = ("none",)
    disp: np.ndarray | None = None  # index into dispatchers
    dispatchers: tuple[str, ...] = ("alltoall",)
    tp_overlap: str = "none"  # resolved (auto: the stack's default)
    microbatch_group: int | None = None
    reshard_after_forward: bool | None = None
    offload: str = "none"
    offload_device: str = "cpu"  # cpu | nvme
    dp_shard: int | None = None
    offload_activations: float = 0.0  # share of the activations offloaded to host memory
    offload_activations_policy: str = "uniform"  # uniform | selective (cost/act_offload.py)
    grouped_gemm: str = "on"  # moe.grouped_gemm: on | off
    overlap_a2a: str = "default"  # moe.overlap_a2a: default (unset: the stack's share) | on | off
    expandable_segments: str = "off"  # the allocator the estimate costed: on | off

    def __post_init__(self) -> None:
        zeros = np.zeros(len(self.tp), dtype=np.int64)
        self.etp = self.tp if self.etp is None else self.etp
        self.cpc, self.rcp, self.disp = (zeros if x is None else x for x in (self.cpc, self.rcp, self.disp))

    def sched_in(self, names: tuple[str, ...]) -> np.ndarray:
        return np.isin(self.sched, [i for i, s in enumerate(self.schedules) if s in names])

    def split(self) -> np.ndarray:
        return np.isin(self.sched, [i for i, s in enumerate(self.schedules) if splits_backward(s)])

    _NAMED = {"cp_comm": ("cpc", "cp_comms"), "recipe": ("rcp", "recipes"), "dispatcher": ("disp", "dispatchers")}

    def value_in(self, name: str, values: tuple[str, ...]) -> np.ndarray:
        """Per plan: whether the choice ``name`` (a named field or a scalar of the job) is one of ``values``."""
        if name in self._NAMED:
            idx, names = self._NAMED[name]
            return np.isin(getattr(self, idx), [i for i, s in enumerate(getattr(self, names)) if s in values])
        return np.full(len(self.tp), self.scalar(name) in values)

    def scalar(self, name: str) -> Any:
        """The value of choice ``name`` for a one-plan view ("none" for an unset optional knob)."""
        if name in self._NAMED:
            idx, names = self._NAMED[name]
            return getattr(self, names)[int(getattr(self, idx)[0])]
        value = getattr(self, name)
        return "none" if value is None else value

    @classmethod
    def of(cls, plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None,
           recipe: str | None = None, arch: str | None = None) -> PlanView:
        """A one-plan view (dp must be resolved: a checked job's plan). ``recipe``: the low-precision recipe
        that was costed (default: the job's, ``auto`` resolved by its stack on ``arch``)."""
        from shardwise.pipeline import resolve, schedule_info

        name = resolve(plan.schedule)
        vpp = schedule_info(name).vpp_rule.held(plan.pp, plan.vpp)
        one = lambda x: np.array([int(x)])  # noqa: E731
        training = training or TrainingSpec(seq_len=1, global_batch=1)
        recipe = recipe or _costed_recipe(training, arch)
        mode = plan.tp_overlap if plan.tp_overlap != "auto" else _stack_default_tp_overlap(training.framework)
        return cls(one(plan.tp), one(plan.pp), one(vpp), one(plan.cp), one(plan.ep), one(plan.dp or 1),
                   one(plan.zero), one(plan.sp), one(RECOMPUTE.index(plan.recompute)), one(0), (name,), model,
                   training.precision, plan.flash_attention, training.method, etp=one(plan.expert_tp),
                   cpc=one(CP_COMMS.index(plan.cp_comm)), rcp=one(0), recipes=(recipe,), disp=one(0),
                   dispatchers=(training.moe.dispatcher,), tp_overlap=mode, microbatch_group=plan.microbatch_group,
                   reshard_after_forward=plan.reshard_after_forward, offload=plan.offload, offload_device=plan.offload_device, dp_shard=plan.dp_shard,
                   offload_activations=plan.offload_activations, offload_activations_policy=plan.offload_activations_policy,
                   **training_knobs(training))

    @classmethod
    def of_job(cls, job: TrainJob, recipe: str | None = None) -> PlanView:
        return cls.of(job.plan, job.model, job.training, recipe, job.cluster.gpu.arch)


def training_knobs(training: TrainingSpec) -> dict[str, str]:
    """The job-level choices the table reads, as values of its knobs: MoE grouped GEMMs, the expert
    all-to-all overlap, and the allocator's expandable segments as the estimate costs them (the job's
    setting, else its stack's default)."""
    from shardwise.cost.stack import expandable_segments, stack_profile

    onoff = lambda x: "on" if x else "off"  # noqa: E731
    moe = training.moe
    return {"grouped_gemm": onoff(moe.grouped_gemm),
            "overlap_a2a": "default" if moe.overlap_a2a is None else onoff(moe.overlap_a2a),
            "expandable_segments": onoff(expandable_segments(training, stack_profile(training.framework, "hopper")))}


def _costed_recipe(training: TrainingSpec, arch: str | None) -> str:
    """The low-precision recipe a job's estimate runs (:func:`shardwise.cost.lowp.resolve_recipe`)."""
    from shardwise.cost.lowp import recipe_on
    from shardwise.cost.stack import stack_profile

    return recipe_on(training, stack_profile(training.framework, arch or "hopper"), arch)


def _stack_default_tp_overlap(framework: str) -> str:
    from shardwise.cost.stack import stack_profile

    return stack_profile(framework, "hopper").tp_overlap_modes[0]
