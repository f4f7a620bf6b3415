"""What each training engine can run: for a plan and an engine, runnable, or one line saying why not and
what would run instead.

Engines: ``torch`` (our own ``train run`` executor, :mod:`shardwise.execute`), ``torchtitan`` 0.3.0,
``megatron`` (Megatron-LM ``pretrain_gpt.py``, core 0.20) and ``deepspeed`` 0.19.8. Each rule is one
predicate over the plan's fields, written with numpy operators so the same rule checks one plan (the
exporters, ``train run``) or every candidate of the planner at once (``train plan --runnable-on``).

Sources of each rule (read at these versions):

- torch: the executor's own limits (``execute/worker.py``, ``execute/runners.py``); ZeRO-1 with TP:
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` takes plain tensors; FSDP2 with a split-backward
  schedule: torch's ``_PipelineScheduleRuntime`` runs W on parameters FSDP2 keeps out of autograd (found
  by ``train run --check``).
- torchtitan 0.3.0: ``config/configs.py`` (ParallelismConfig: ``data_parallel_replicate_degree`` replicates,
  ``data_parallel_shard_degree`` is FSDP2 -- no optimizer-only sharding, i.e. no ZeRO-1;
  ``models/llama3/parallelize.py`` always applies FSDP2, replicated over ``dp_replicate``);
  ``trainer.py`` ``TrainingConfig.mixed_precision_param`` in {bfloat16, float32} (no fp16), float8 is a
  model converter chosen in ``config_registry`` (not a command-line flag);
  ``distributed/pipeline_parallel.py`` (every torch.distributed.pipelining schedule, or a CSV run by
  ``_PipelineScheduleRuntime``).
- Megatron-LM (core_r0.20 main, ``megatron/core/pipeline_parallel/schedules.py``): 1F1B without
  interleaving and interleaved 1F1B only; ``megatron/training/arguments.py``: ``--use-distributed-optimizer``
  (ZeRO-1), Megatron-FSDP ``--data-parallel-sharding-strategy optim_grads|optim_grads_params`` (ZeRO-2/3).
- DeepSpeed 0.19.8: ``runtime/pipe/engine.py`` asserts ``zero_optimization_stage() < 2`` ("ZeRO-2 and
  ZeRO-3 are incompatible with pipeline parallelism") and runs its own ``TrainSchedule`` (1F1B,
  ``runtime/pipe/schedule.py``); tensor parallelism is AutoTP (``runtime/tensor_parallel/config.py``
  ``autotp_size``), which the pipeline engine does not use and which keeps activations replicated
  (no sequence parallelism); no ring-attention context parallelism (DeepSpeed-Ulysses splits heads, a
  different scheme); expert parallelism is set in the model code (``deepspeed.moe.layer.MoE(ep_size=)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec, TrainPlan

ENGINES = ("torch", "torchtitan", "megatron", "deepspeed")
RECOMPUTE = ("none", "selective", "full")
FUSED_BACKWARD = ("gpipe", "1f1b", "interleaved", "bfs")
MEGATRON_SCHEDULES = ("1f1b", "interleaved")


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
    """Plan fields as equal-length numpy arrays (one element per plan), plus what is shared by all."""

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

    def sched_in(self, names: tuple[str, ...]) -> np.ndarray:
        return np.isin(self.sched, [i for i, s in enumerate(self.schedules) if s in names])

    def split(self) -> np.ndarray:
        return np.isin(self.sched, [i for i, s in enumerate(self.schedules) if splits_backward(s)])

    @classmethod
    def of(cls, plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None) -> PlanView:
        """A one-plan view (dp must be resolved: a checked job's plan)."""
        from shardwise.pipeline import resolve, schedule_info

        name = resolve(plan.schedule)
        vpp = schedule_info(name).vpp_rule.held(plan.pp, plan.vpp)
        one = lambda x: np.array([int(x)])  # noqa: E731
        return cls(one(plan.tp), one(plan.pp), one(vpp), one(plan.cp), one(plan.ep), one(plan.dp or 1),
                   one(plan.zero), one(plan.sp), one(RECOMPUTE.index(plan.recompute)), one(0), (name,), model,
                   training.precision if training else "bf16", plan.flash_attention,
                   training.method if training else "full")


@dataclass(frozen=True)
class Rule:
    """`refuses(view)` is true where the engine cannot run the plan; `reason` says why (one line),
    `instead` what would run."""

    refuses: Callable[[PlanView], Any]
    reason: str
    instead: str


def _model(v: PlanView, test: Callable[[ModelSpec, PlanView], Any]) -> np.ndarray:
    """``test(model, view)`` where the model is known; false where it is not (the rule needs it)."""
    if v.model is None:
        return np.zeros(len(v.tp), dtype=bool)
    return np.broadcast_to(np.asarray(test(v.model, v), dtype=bool), v.tp.shape)


# Adapter fine-tunes (training.method lora / qlora) are estimated and planned, but neither the executor
# nor the exporters write adapters or a quantized base: no engine runs them as is.
ADAPTERS = Rule(lambda v: np.full(len(v.tp), v.method != "full"),
                "adapter fine-tunes (method lora / qlora) are planned but not run or exported by shardwise",
                "method full, or the plan's degrees in a LoRA recipe (torchtune, PEFT + accelerate)")

RULES: dict[str, tuple[Rule, ...]] = {
    "torch": (
        ADAPTERS,
        Rule(lambda v: v.cp > 1, "the executor does not run context parallelism", "cp 1"),
        Rule(lambda v: (v.ep > 1) | _model(v, lambda m, _: m.is_moe), "the executor runs dense models only",
             "a dense model with ep 1"),
        Rule(lambda v: (v.zero == 1) & (v.tp > 1) & (v.dp > 1),
             "zero 1 with tp > 1 is not run by the executor (torch's ZeroRedundancyOptimizer takes plain "
             "tensors, not TP-sharded DTensors)", "zero 0, 2 or 3"),
        Rule(lambda v: (v.zero >= 2) & (v.dp > 1) & v.split(),
             "zero 2/3 (FSDP2) with a schedule that splits backward into I and W loses weight gradients in "
             "torch's pipeline runtime (it computes W for the sharded parameters, which FSDP2 keeps out of "
             "the autograd graph; --check shows it)",
             "zero 0 or 1 with this schedule, or a fused-backward schedule (gpipe, 1f1b, interleaved, bfs) "
             "with zero 2/3"),
        Rule(lambda v: _model(v, lambda m, w: m.tied_embeddings & ((w.tp > 1) | (w.pp > 1))),
             "tied_embeddings runs only without TP and PP in the executor", "tied_embeddings: false"),
        Rule(lambda v: _model(v, lambda m, w: m.n_kv_heads % w.tp != 0),
             "the executor splits KV heads across TP ranks: tp must divide the KV heads",
             "a tp that divides kv_heads"),
        Rule(lambda v: _model(v, lambda m, w: (m.ffn % w.tp != 0) | (m.vocab % w.tp != 0)),
             "tp must divide model.ffn and model.vocab in the executor", "sizes tp divides"),
        Rule(lambda v: _model(v, lambda m, w: m.layers < w.pp * w.vpp),
             "the executor needs at least one layer per stage", "fewer stages (pp*vpp <= layers)"),
    ),
    "torchtitan": (
        ADAPTERS,
        Rule(lambda v: v.zero == 1, "ZeRO-1 is not in torchtitan: its data parallelism is FSDP2, which either "
             "replicates everything or shards parameters, gradients and optimizer state together",
             "zero 0 (replicated), 2 (FSDP2 without resharding after forward) or 3 (FSDP2)"),
        Rule(lambda v: np.full(len(v.tp), v.precision == "fp16"),
             "torchtitan trains in bf16 or fp32 (mixed_precision_param has no float16)", "precision bf16"),
    ),
    "megatron": (
        ADAPTERS,
        Rule(lambda v: (v.pp > 1) & ~v.sched_in(MEGATRON_SCHEDULES),
             "Megatron-LM runs 1F1B and interleaved 1F1B only (no GPipe, BFS, zero-bubble or V schedules)",
             "schedule 1f1b (vpp 1) or interleaved (vpp > 1)"),
        Rule(lambda v: (v.pp > 1) & v.sched_in(("1f1b",)) & (v.vpp > 1),
             "Megatron-LM's 1F1B with several stages per rank is its interleaved schedule", "schedule interleaved"),
        Rule(lambda v: (v.pp > 1) & v.sched_in(("interleaved",)) & (v.vpp == 1),
             "interleaved 1F1B needs vpp > 1 in Megatron-LM", "schedule 1f1b"),
    ),
    "deepspeed": (
        ADAPTERS,
        Rule(lambda v: v.cp > 1, "DeepSpeed has no ring-attention context parallelism (DeepSpeed-Ulysses "
             "splits attention heads instead)", "cp 1"),
        Rule(lambda v: v.ep > 1, "expert parallelism is set in the model code in DeepSpeed "
             "(deepspeed.moe.layer.MoE ep_size), not by a launch configuration", "ep 1"),
        Rule(lambda v: (v.pp > 1) & (v.zero >= 2), "ZeRO-2 and ZeRO-3 are incompatible with DeepSpeed's "
             "pipeline engine", "zero 0 or 1 with pp > 1, or pp 1 with zero 2/3"),
        Rule(lambda v: (v.pp > 1) & ~(v.sched_in(("1f1b",)) & (v.vpp == 1)),
             "DeepSpeed's pipeline engine runs its own 1F1B TrainSchedule only", "schedule 1f1b with vpp 1"),
        Rule(lambda v: (v.pp > 1) & (v.tp > 1), "DeepSpeed's pipeline engine does not combine with AutoTP "
             "tensor parallelism", "tp 1 with pp > 1, or pp 1 with tp > 1"),
        Rule(lambda v: (v.tp > 1) & (v.sp == 1), "DeepSpeed AutoTP keeps activations replicated across "
             "TP ranks (no sequence parallelism)", "sequence_parallel false"),
        Rule(lambda v: (v.rc == RECOMPUTE.index("selective")) & (not v.flash_attention),
             "DeepSpeed checkpoints whole layers (no selective recompute of attention alone)",
             "recompute full or none"),
    ),
}


def _check_engine(engine: str) -> str:
    key = engine.strip().lower()
    if key not in RULES:
        raise ShardwiseError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return key


def first_refusal(view: PlanView, engine: str) -> tuple[np.ndarray, np.ndarray]:
    """Per plan: the index of the first rule that refuses it (or -1) for ``engine``; and the ok mask."""
    rules = RULES[_check_engine(engine)]
    which = np.full(len(view.tp), -1, dtype=np.int64)
    for k, rule in enumerate(rules):
        hit = np.broadcast_to(np.asarray(rule.refuses(view), dtype=bool), which.shape)
        which = np.where((which < 0) & hit, k, which)
    return which, which < 0


@dataclass(frozen=True)
class Verdict:
    engine: str
    runnable: bool
    reason: str | None = None
    instead: str | None = None

    def line(self) -> str:
        return "runs as is" if self.runnable else f"{self.reason}; would run: {self.instead}"


def verdict(plan: TrainPlan, engine: str, model: ModelSpec | None = None, training: TrainingSpec | None = None) -> Verdict:
    """Whether ``engine`` runs ``plan`` as is (``plan.dp`` resolved)."""
    engine = _check_engine(engine)
    which, _ = first_refusal(PlanView.of(plan, model, training), engine)
    k = int(which[0])
    if k < 0:
        return Verdict(engine, True)
    rule = RULES[engine][k]
    return Verdict(engine, False, rule.reason, rule.instead)


def verdicts(plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None) -> dict[str, Verdict]:
    return {e: verdict(plan, e, model, training) for e in ENGINES}


def runnable_on(plan: TrainPlan, model: ModelSpec | None = None, training: TrainingSpec | None = None) -> list[str]:
    """The engines that run ``plan`` as is."""
    return [e for e, v in verdicts(plan, model, training).items() if v.runnable]


def require(plan: TrainPlan, engine: str, model: ModelSpec | None = None, training: TrainingSpec | None = None,
            label: str | None = None) -> None:
    """Raise ShardwiseError with the one-line reason and what would run when ``engine`` refuses ``plan``."""
    v = verdict(plan, engine, model, training)
    if not v.runnable:
        raise ShardwiseError(f"{label or engine} cannot run this plan: {v.reason}; would run: {v.instead}")


def parse_engines(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"torch,megatron"`` -> ("torch", "megatron"), each checked."""
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else [x for t in text for x in t.split(",")]
    return tuple(dict.fromkeys(_check_engine(x) for x in items if x.strip()))


#: Tensor-parallel overlap modes (TrainPlan.tp_overlap) each engine runs: Megatron-LM's Transformer Engine
#: userbuffers (--tp-comm-overlap, with or without the split all-gather/reduce-scatter overlaps), torchtitan's
#: async TP (--compile.enable_async_tensor_parallel); DeepSpeed has neither.
ENGINE_TP_OVERLAP = {"megatron": ("none", "bulk", "pipelined"), "torchtitan": ("none", "async"), "deepspeed": ("none",)}
