"""The typed Python API: ``from shardwise import estimate, plan, simulate_serving, export, describe``.

Each function takes what the matching command takes (a job file path or mapping, or keyword arguments)
and returns the same result objects the CLI prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.specs.job import TrainJob
    from shardwise.train.hetero.result import HeteroEstimate
    from shardwise.train.planner import PlanResult
    from shardwise.train.result import Estimate


def _train_job(job: str | Path | dict[str, Any]) -> TrainJob:
    from shardwise.specs.job import job_from_mapping, load_jobs

    return job_from_mapping(job) if isinstance(job, dict) else load_jobs(job)[0]


def estimate(job: str | Path | dict[str, Any]) -> Estimate | HeteroEstimate:
    """Memory per GPU, step time, MFU and tokens/s of a training job (`train estimate`).
    Returns a :class:`shardwise.train.result.Estimate` (``.to_dict()`` is the JSON output), or a
    :class:`shardwise.train.hetero.result.HeteroEstimate` for a cluster with `groups`. ``.goodput`` holds
    what failures, checkpoints and restarts leave of it (:mod:`shardwise.train.goodput`)."""
    from shardwise.train.goodput import estimate_with_goodput

    return estimate_with_goodput(_train_job(job))


def plan(model: str | dict[str, Any], gpu: str, gpus: int, seq_len: int, global_batch: int, *,
         precision: str = "bf16", objective: str = "throughput", top: int = 5,
         runnable_on: tuple[str, ...] = (), **options: Any) -> PlanResult:
    """The best training plans (`train plan`): a :class:`shardwise.train.planner.PlanResult` whose
    ``top`` holds the exact estimates, best first. ``runnable_on`` keeps plans those engines run as is."""
    from shardwise.specs.hardware import make_cluster
    from shardwise.specs.model_ref import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.planner import plan_search

    training = TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision)
    return plan_search(load_model(model), make_cluster(gpu, gpus), training, objective, top_k=top,
                       runnable_on=tuple(runnable_on), **options)


def describe(e: Estimate) -> str:
    """A ranked plan in the CLI's compact form, as `train plan`'s ``plan`` column prints it
    (``tp8 pp4 v2 dp2 z1 mb1 interleaved rc=selective sp``)."""
    from shardwise.train.plan_label import plan_label
    from shardwise.train.planner import searched_fields

    return plan_label(searched_fields(e))


def simulate_serving(job: str | Path | dict[str, Any]) -> dict[str, Any]:
    """Simulate a serving deployment (`serve simulate`): the metrics `--format json` prints (ttft_ms,
    tpot_ms, itl_ms, e2e_ms as {mean, median, p90, p99}, request_throughput, SLO attainment, costs)."""
    from shardwise.serve.config import load_serve_job, parse_serve_job
    from shardwise.serve.metrics import compute_metrics
    from shardwise.serve.simulate import simulate

    parsed = parse_serve_job(job) if isinstance(job, dict) else load_serve_job(job)
    return compute_metrics(simulate(parsed), parsed.slo)


def export(job: str | Path | dict[str, Any], to: str, *, version: str | None = None, format: str = "script") -> str:
    """The launch of a plan in an engine (`train export` / `serve export`): torchtitan, megatron and
    deepspeed take a training job; vllm and sglang a serving job (one command per pool)."""
    from shardwise.engines.targets import names
    from shardwise.handoff import export_serve, export_train

    if to.strip().lower() in names("serving"):
        from shardwise.serve.config import load_serve_job, parse_serve_job

        parsed = parse_serve_job(job) if isinstance(job, dict) else load_serve_job(job)
        return "\n".join(e.render(format) for e in export_serve(parsed, to, version))
    return export_train(_train_job(job), to, version).render(format)
