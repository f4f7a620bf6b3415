"""The work behind each endpoint: a request body in, the CLI's JSON out, through the functions the CLI
calls. Quick requests run in the server process; searches run in a worker process (:mod:`.jobs`).

Each task takes the body, a progress callback (message, fraction done) and its options (`plot`: add
the data of the CLI's `--plot` figure under the key "plot"), and raises ShardwiseError on bad input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.web.inputs import (
    MAX_PIPELINE_CELLS,
    MAX_TIMELINE_CELLS,
    RLPlanBody,
    ScheduleCompareBody,
    ScheduleSimulateBody,
    ServePlanBody,
    ServeSimulateBody,
    TrainExportBody,
    TrainPlanBody,
    check_cells,
    model_ref,
    pipeline_cells,
    rl_document,
    serve_workload,
    trace_file,
    validate,
    with_model,
)

Progress = Callable[[str, float], None]


def _quiet(message: str, fraction: float) -> None:
    """No progress reports wanted."""


# --- training ------------------------------------------------------------------------------------------

def estimate_jobs(body: Any) -> list:
    """The jobs of a `train estimate` body (one job document or a list), checked and within bounds."""
    from shardwise.specs.job import jobs_from_document

    docs = [with_model(d) for d in body] if isinstance(body, list) else with_model(body)
    jobs = jobs_from_document(docs, "body")
    for j in jobs:
        check_cells(estimate_cells(j), MAX_PIPELINE_CELLS, "training.global_batch")
    return jobs


def estimate_cells(job: Any) -> int:
    """Pipeline stages x micro-batches the estimate simulates (V schedules hold two stages per rank); on a
    cluster with groups, at most every micro-batch of the step on one pipeline."""
    from shardwise.pipeline import schedule_info
    from shardwise.specs.hetero import HeteroJob

    if isinstance(job, HeteroJob):
        plan = job.layout.plan
        microbatches = job.training.global_batch // plan.micro_batch
    else:
        plan, microbatches = job.plan, job.microbatches
    if plan.pp == 1:
        return 1
    vpp = schedule_info(plan.schedule).vpp_rule.held(plan.pp, plan.vpp)
    return pipeline_cells(plan.pp, vpp, microbatches)


def train_estimate(body: Any, progress: Progress = _quiet) -> Any:
    return estimate_result(estimate_jobs(body))


def estimate_result(jobs: list) -> Any:
    from shardwise.train.goodput import estimate_with_goodput
    from shardwise.train.report import estimate_json

    return estimate_json([estimate_with_goodput(j) for j in jobs], jobs)


def train_plan(body: Any, progress: Progress = _quiet) -> dict[str, Any]:
    from shardwise.train.fit import fit_json, search_fitting, sized_inputs
    from shardwise.train.plan_inputs import plan_inputs, run_plan
    from shardwise.train.plan_report import plan_json

    o = validate(TrainPlanBody, body)
    doc = with_model(o.job) if o.job is not None else None
    model = model_ref(o.model) if o.model is not None and doc is None else o.model
    sized = None
    if doc is None and o.gpus is None:  # the smallest count of each GPU type that fits (or, with days, trains in time)
        inputs, sized = sized_inputs(model, o.gpu, o.seq_len, o.global_batch, o.tokens, o.precision, None, None, o.max_gpus,
                                     o.days, o.schedules)
    else:
        inputs = plan_inputs(doc, model, o.gpu, o.gpus, o.seq_len, o.global_batch, o.tokens, o.precision)

    def search(inputs: Any) -> tuple:
        return run_plan(inputs, o.objective, o.top, o.schedules, o.max_memory_gib, o.exact_budget, progress,
                        fp8_recipes=o.fp8_recipes, moe_dispatchers=o.moe_dispatchers)

    found = search_fitting(inputs, search, o.schedules, o.max_gpus)
    return plan_json(o.objective, found.results, found.best, found.fronts, found.inputs) | fit_json(found, sized, o.days)


def train_export(body: Any, progress: Progress = _quiet) -> dict[str, Any]:
    """`train export JOB --to ENGINE --format F`: `text` is what the CLI prints; `files` what it writes beside it."""
    from shardwise.handoff import export_train
    from shardwise.specs.job import job_from_mapping

    o = validate(TrainExportBody, body)
    if o.format not in ("args", "script", "file"):
        raise ShardwiseError(f"--format must be args, script or file, got {o.format!r}")
    e = export_train(job_from_mapping(with_model(o.job)), o.to, o.engine_version)
    return {"engine": e.engine, "version": e.version, "format": o.format, "text": e.render(o.format),
            "files": dict(e.files) if o.format != "script" else {}, "notes": list(e.notes)}


# --- schedules -----------------------------------------------------------------------------------------

def schedule_cells(body: Any) -> int:
    """Stages x micro-batches of a `schedule simulate` body (0 for an uploaded CSV: checked once parsed)."""
    from shardwise.pipeline import schedule_info

    o = validate(ScheduleSimulateBody, body)
    if o.csv is not None:
        return 0
    info = schedule_info(o.schedule)
    vpp = info.vpp_rule.held(o.pp, o.vpp or 1)
    return pipeline_cells(o.pp, vpp, o.microbatches)


def schedule_simulate(body: Any, progress: Progress = _quiet) -> dict[str, Any]:
    from shardwise.pipeline import read_csv_text
    from shardwise.pipeline.options import simulate_options

    o = validate(ScheduleSimulateBody, body)
    check_cells(schedule_cells(body), MAX_TIMELINE_CELLS, "microbatches")
    imported = read_csv_text(o.csv, name="uploaded") if o.csv is not None else None
    if imported is not None:
        check_cells(imported.num_stages * imported.microbatches, MAX_TIMELINE_CELLS, "csv")
    res = simulate_options(o.schedule, o.pp, o.microbatches, o.vpp, o.f, o.i, o.w, o.comm, o.mem_cap, o.w_retained, imported,
                           o.placement)
    return res.to_dict()


def schedule_compare(body: Any, progress: Progress = _quiet) -> list[dict[str, Any]]:
    from shardwise.pipeline import compare_schedules
    from shardwise.pipeline.options import parse_times
    from shardwise.train.plan_inputs import split_list

    o = validate(ScheduleCompareBody, body)
    check_cells(pipeline_cells(o.pp, max(o.vpp, 2), o.microbatches), MAX_TIMELINE_CELLS, "microbatches")
    names = split_list(o.schedules) or None
    return compare_schedules(o.pp, o.microbatches, o.vpp, parse_times(o.f, "f"), parse_times(o.i, "i"),
                             parse_times(o.w, "w"), o.comm, o.mem_cap, o.w_retained, names)


# --- serving -------------------------------------------------------------------------------------------

def serve_simulate(body: Any, progress: Progress = _quiet, plot: bool = False) -> dict[str, Any]:
    from shardwise.serve.config import parse_serve_job
    from shardwise.serve.plots import CDFS, cdf_points, latency_samples_ms
    from shardwise.serve.report import simulation_report

    o = validate(ServeSimulateBody, body)
    doc = o.model_dump(exclude_none=True, exclude={"trace_csv"})
    doc["model"] = model_ref(o.model)
    with trace_file(o.trace_csv) as trace:
        doc["workload"] = serve_workload(o.workload, trace)
        job = parse_serve_job(doc, base_dir=None, where="job")
        progress(f"simulating {job.workload.num_requests or 'the trace'} requests", 0.1)
        result, metrics = simulation_report(job)
    if plot:
        samples = latency_samples_ms(result)
        slo = metrics.get("slo", {})
        metrics["plot"] = {"cdf": [{"metric": key, "label": label, "slo_ms": slo.get(target) if target else None,
                                    **cdf_points(*samples[key])} for key, label, target in CDFS]}
    return metrics


def serve_plan(body: Any, progress: Progress = _quiet, plot: bool = False) -> dict[str, Any]:
    from shardwise.serve.config import parse_block
    from shardwise.serve.plan_cli import gpu_mix_text, merge_plan_request
    from shardwise.serve.planner import cost_curves, plan
    from shardwise.serve.workload import WorkloadSpec

    o = validate(ServePlanBody, body)
    job = dict(o.job) if isinstance(o.job, dict) else o.job
    if isinstance(job, dict):
        job = with_model(job)
        if "workload" in job:
            job["workload"] = serve_workload(job["workload"], None, "job.workload")
    model = model_ref(o.model) if o.model is not None else None
    with trace_file(o.trace_csv) as trace:
        block = serve_workload(o.workload, trace)
        workload = parse_block(WorkloadSpec, block, "workload") if block is not None else None
        mix_text, note = gpu_mix_text(o.gpu, None if o.gpus is None else str(o.gpus), o.gpu_mix)  # the CLI's rule
        request = merge_plan_request(job, None, "job", model, o.rate, o.slo_ttft_ms, o.slo_tpot_ms, o.attainment,
                                     mix_text, workload, o.precision, o.num_requests)
        result = plan(request, o.disaggregation, o.mix, progress=progress)
    out = result.to_json()
    if note:
        out["notes"] = [*out.get("notes", []), note]
    if plot:
        out["plot"] = cost_curves(result)
    return out


# --- RL post-training ----------------------------------------------------------------------------------

def rl_job(body: Any) -> Any:
    """The RL job of an `rl estimate` body (a job document), checked as the CLI checks a job file."""
    from shardwise.rl.spec import parse_rl_job

    return parse_rl_job(rl_document(body))


def rl_tokens(job: Any) -> float:
    """Most response tokens one iteration generates (responses x their longest length; inf without a cap):
    what the rollout's simulation costs grows with."""
    out = job.rollout.output_len
    longest = out.value if out.dist == "fixed" else out.max
    return job.algorithm.samples * longest if longest is not None else float("inf")


def rl_estimate(body: Any, progress: Progress = _quiet) -> dict[str, Any]:
    """`rl estimate JOB --format json`."""
    from shardwise.rl.step import estimate_rl

    job = rl_job(body)
    progress(f"estimating {job.algorithm.samples:,} responses", 0.1)
    return estimate_rl(job).to_dict()


def rl_plan(body: Any, progress: Progress = _quiet) -> dict[str, Any]:
    """`rl plan JOB [--top N] [--max-staleness K] --format json`."""
    from shardwise.rl.planner import plan_rl
    from shardwise.rl.spec import with_max_staleness

    o = validate(RLPlanBody, body)
    job = rl_job(o.job)
    if o.max_staleness is not None:
        job = with_max_staleness(job, o.max_staleness)
    return plan_rl(job, o.top, progress=progress).to_dict(o.top)


TASKS: dict[str, Callable[..., Any]] = {
    "train/estimate": train_estimate,
    "train/plan": train_plan,
    "train/export": train_export,
    "schedule/simulate": schedule_simulate,
    "schedule/compare": schedule_compare,
    "serve/simulate": serve_simulate,
    "serve/plan": serve_plan,
    "rl/estimate": rl_estimate,
    "rl/plan": rl_plan,
}


def run_task(name: str, body: Any, progress: Progress = _quiet, **params: Any) -> Any:
    if name not in TASKS:
        raise ShardwiseError(f"unknown task {name!r}")
    return TASKS[name](body, progress, **params)
