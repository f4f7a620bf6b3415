"""Serving: workload -> router -> iteration-level engines -> metrics; and a cost planner under SLOs.

Public API::

    from shardwise.serve import load_serve_job, simulate, compute_metrics
    job = load_serve_job("examples/serve-llama3.1-8b-a100.yaml")
    metrics = compute_metrics(simulate(job), job.slo)
"""

from shardwise.serve.config import ServeJob, load_serve_job, parse_serve_job
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.simulate import ServeSimResult, simulate
from shardwise.serve.workload import Requests, build_requests

__all__ = ["Requests", "ServeJob", "ServeSimResult", "build_requests", "compute_metrics", "load_serve_job", "parse_serve_job", "simulate"]
