"""Jobs the hand-off tests export: every example job and the top plan of `train plan` on three cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardwise.specs.hardware import make_cluster
from shardwise.specs.hetero import HeteroJob
from shardwise.specs.job import TrainJob, job_from_mapping, load_jobs
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec

ROOT = Path(__file__).resolve().parents[2]
PLAN_CASES = {  # model, gpu, gpus, seq_len, global_batch
    "llama8b-16xh100": ("llama-3.1-8b", "h100", 16, 4096, 64),
    "llama70b-64xh100": ("llama-3.1-70b", "h100", 64, 8192, 128),
    "llama70b-512xh100": ("llama-3.1-70b", "h100", 512, 8192, 512),  # the README example
}


def example_jobs():
    return [j for p in sorted((ROOT / "examples").glob("llama*.yaml")) for j in load_jobs(p)]


_TOP: dict[tuple[str, str], TrainJob | HeteroJob] = {}


def top_plan_job(case: str, engine: str) -> TrainJob | HeteroJob:
    """The best plan `train plan --runnable-on ENGINE` finds for a case, as a job."""
    from shardwise.train.plan_report import job_mapping
    from shardwise.train.planner import plan_search

    key = (case, engine)
    if key not in _TOP:
        name, gpu, n, seq, batch = PLAN_CASES[case]
        model, cluster = load_model(name), make_cluster(gpu, n)
        training = TrainingSpec(seq_len=seq, global_batch=batch)
        best = plan_search(model, cluster, training, top_k=1, max_exact=16, runnable_on=(engine,)).top[0]
        _TOP[key] = job_from_mapping(job_mapping(best, model, training, [cluster]))
    return _TOP[key]


def jobs_for(engine: str) -> list[pytest.ParameterSet]:
    """Example jobs the engine runs, plus the top plan of each planning case."""
    from shardwise.engines.support import verdict

    out = [pytest.param(j, id=f"example-{j.name}") for j in example_jobs()
           if verdict(j.plan, engine, j.model, j.training).runnable]
    out += [pytest.param(case, id=f"top-{case}") for case in PLAN_CASES]
    return out


def resolve_job(item: str | TrainJob | HeteroJob, engine: str) -> TrainJob | HeteroJob:
    return top_plan_job(item, engine) if isinstance(item, str) else item
