"""What `train plan` searches, from a job document and/or options: the one reading of its inputs that
the CLI and the web API share (the CLI reads the document from a file, the API from the request)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shardwise.errors import ShardwiseError, clip, shorten
from shardwise.limits import MAX_CLUSTER_GPUS
from shardwise.specs.hardware import Cluster, make_cluster
from shardwise.specs.job import job_from_mapping
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.reliability import Resilience
from shardwise.specs.training import TrainingSpec
from shardwise.train.planner import PlanResult, Progress, plan_across_gpus
from shardwise.train.result import Estimate


def split_list(values: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """``["h100,a100", "l40s"]`` or ``"h100,a100"`` -> ``["h100", "a100", "l40s"]``."""
    items = [values] if isinstance(values, str) else list(values or [])
    return [v.strip() for item in items for v in str(item).split(",") if v.strip()]


# A fine-tune's sequence and batch when the options leave them out: 2,048 tokens (the common fine-tuning
# cut-off, e.g. torchtune's and axolotl's example configs) and 16 sequences (QLoRA's Guanaco runs:
# micro-batch 4 x 4 accumulation steps, artidoro/qlora finetune_guanaco_65b.sh).
FINE_TUNE_DEFAULTS = {"seq_len": 2048, "global_batch": 16}


@dataclass(frozen=True)
class PlanInputs:
    model: ModelSpec
    training: TrainingSpec
    clusters: list[Cluster]
    fixed: dict[str, Any]  # the job's `parallel` fields the search must keep
    resilience: Resilience = Resilience()  # the job's failures, storage and checkpoints (goodput of the top plans)


def plan_inputs(doc: Any = None, model: str | dict | ModelSpec | None = None, gpu: str | list[str] | None = None,
                gpus: int | None = None, seq_len: int | None = None, global_batch: int | None = None,
                tokens: float | None = None, precision: str | None = None, memory_headroom: float | None = None,
                method: str | None = None) -> PlanInputs:
    """A job document whose `parallel` may be partly or wholly left out, or the options
    (--model, --gpu, --gpus, --seq-len, --global-batch; --precision, --tokens, --memory-headroom, --method).
    A fine-tune (--method lora | qlora) takes FINE_TUNE_DEFAULTS for the sequence and batch left out."""
    if memory_headroom is not None and not 0 <= memory_headroom < 1:
        raise ShardwiseError(f"--memory-headroom must be in [0, 1), got {memory_headroom}")
    if doc is not None:
        base = job_from_mapping(doc, require_plan=False)
        if not isinstance(base.cluster, Cluster):
            raise ShardwiseError("cluster.groups: this search takes GPUs of one type; search a cluster with groups "
                                 "with `shardwise train plan JOB` (shardwise.train.hetero.plan.hetero_plan)")
        given = doc.get("parallel") or {}
        fixed = {k: getattr(base.plan, k) for k in given} if isinstance(given, dict) else {}  # parsed: "false" is False
        training, clusters, spec, resilience = base.training, [base.cluster], base.model, base.resilience
        if memory_headroom is not None:
            clusters = [c.model_copy(update={"memory_headroom": memory_headroom}) for c in clusters]
    else:
        names = split_list(gpu)
        if method not in (None, "full"):
            seq_len = seq_len or FINE_TUNE_DEFAULTS["seq_len"]
            global_batch = global_batch or FINE_TUNE_DEFAULTS["global_batch"]
        given = (("--model", model), ("--gpu", names), ("--gpus", gpus), ("--seq-len", seq_len), ("--global-batch", global_batch))
        missing = [flag for flag, value in given if not value]
        if missing:
            raise ShardwiseError(f"give a job file or {', '.join(missing)}")
        spec = load_model(model)
        try:
            training = TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision or "bf16", tokens=tokens,
                                    method=method or "full")
        except ValidationError as exc:
            raise ShardwiseError(_flag_errors(exc)) from None
        if not 0 < gpus <= MAX_CLUSTER_GPUS:
            raise ShardwiseError(f"--gpus must be in 1..{MAX_CLUSTER_GPUS:,} (see Limits in the README), got {shorten(gpus)}")
        clusters = [make_cluster(g, gpus, memory_headroom=memory_headroom) for g in names]
        fixed, resilience = {}, Resilience()
    if (tokens is not None or method is not None) and doc is not None:
        update = {k: v for k, v in (("tokens", tokens), ("method", method)) if v is not None}
        try:
            training = TrainingSpec(**{**training.model_dump(), **update})
        except ValidationError as exc:
            raise ShardwiseError(_flag_errors(exc)) from None
    if training.adapter is not None:
        training.adapter.shapes(spec)  # a model adapters cannot be put on: one line naming the field
    return PlanInputs(spec, training, clusters, fixed, resilience)


def _flag_errors(exc: ValidationError) -> str:
    """Pydantic errors on TrainingSpec fields, named as the flags that set them (--seq-len, ...)."""
    return "; ".join(f"--{str(e['loc'][0]).replace('_', '-')}: {clip(e['msg'], 160)}" for e in exc.errors())


def run_plan(inputs: PlanInputs, objective: str = "throughput", top: int = 5, schedules: str | list[str] | None = None,
             max_memory_gib: float | None = None, exact_budget: int = 128, progress: bool | Progress = False,
             runnable_on: tuple[str, ...] = (), fp8_recipes: str | list[str] | None = None,
             moe_dispatchers: str | list[str] | None = None) -> tuple[list[PlanResult], list[Estimate], list[dict[str, Any]]]:
    """Search every GPU type of `inputs` (see :func:`shardwise.train.planner.plan_across_gpus`);
    `fp8_recipes` (comma-separated) limits the recipes an fp8/fp4 job searches (default: all),
    `moe_dispatchers` lists the MoE token dispatchers to try (default: the job's)."""
    names = tuple(split_list(schedules)) or None  # None: the schedules the planner searches by default
    return plan_across_gpus(inputs.model, inputs.clusters, inputs.training, objective, top_k=top, schedules=names,
                            fixed=inputs.fixed, max_memory_gib=max_memory_gib, progress=progress, max_exact=exact_budget,
                            runnable_on=runnable_on, recipes=tuple(split_list(fp8_recipes)) or None,
                            dispatchers=tuple(split_list(moe_dispatchers)) or None, resilience=inputs.resilience)
