"""Sweeps: a grid of planning jobs run in parallel (local processes or Ray), one table of best plans.

Sweep file::

    models: [llama-3.1-8b, llama-3.1-70b]          # presets, config.json paths or mappings
    clusters: [{gpu: H100-SXM, gpus: 64}, {gpu: A100-80GB, gpus: 128}]
    seq_lens: [4096, 8192]
    global_batches: [256, 512]
    objective: throughput                            # optional; also: schedules, max_memory_gib, precision
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardwise.errors import ShardwiseError
from shardwise.specs._loading import format_validation_error, read_document
from shardwise.specs.job import ClusterSpec

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: The CSV/Parquet columns; ``mfu`` and ``mfu_causal`` as the Estimate JSON names them (FLOP_CONVENTIONS).
COLUMNS = ("job", "model", "gpu", "gpus", "seq_len", "global_batch", "tp", "pp", "vpp", "dp", "cp", "ep", "zero",
           "sequence_parallel", "recompute", "micro_batch", "schedule", "step_time_s", "tokens_per_s_per_gpu", "mfu",
           "mfu_causal", "peak_memory_gib", "considered", "feasible", "error")


class SweepSpec(BaseModel):
    """A sweep file (`train sweep SWEEP`): one planning job per (model, cluster, seq_len, global_batch) of the
    lists' product, each searched as `train plan` does; examples/sweep.yaml shows every field."""

    model_config = ConfigDict(extra="forbid")

    models: list[str | dict[str, Any]] = Field(min_length=1, description="presets, config.json paths or inline model "
                                                "mappings (as a job file's model)")
    clusters: list[ClusterSpec] = Field(min_length=1, description="clusters, each as a job file's cluster "
                                        "(gpu, gpus, gpus_per_node, ...)")
    seq_lens: list[int] = Field(min_length=1, description="sequence lengths (tokens)")
    global_batches: list[int] = Field(min_length=1, description="global batches (sequences per step)")
    objective: str = Field(default="throughput", description="throughput | cost | memory | goodput (as --objective)")
    schedules: list[str] | None = Field(default=None, description="schedules to search (default: the planner's)")
    max_memory_gib: float | None = Field(default=None, description="reject plans above this peak per GPU")
    precision: str = Field(default="bf16", description="bf16 | fp16 | fp8 | fp4 | fp32 for every job")


def load_sweep(path: str | Path) -> list[dict[str, Any]]:
    """The planning jobs of a sweep file, in a fixed order (models, clusters, seq_lens, batches)."""
    doc = read_document(path)
    if not isinstance(doc, dict):
        raise ShardwiseError(f"{path}: a sweep file is a mapping with models, clusters, seq_lens, global_batches")
    try:
        spec = SweepSpec(**doc)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, "sweep")) from None
    jobs = []
    for n, (model, cluster, seq, batch) in enumerate(itertools.product(spec.models, spec.clusters, spec.seq_lens, spec.global_batches)):
        jobs.append({"job": n, "model": model, "cluster": cluster.model_dump(), "seq_len": seq, "global_batch": batch,
                     "objective": spec.objective, "schedules": spec.schedules, "max_memory_gib": spec.max_memory_gib,
                     "precision": spec.precision})
    return jobs


def plan_one(job: dict[str, Any]) -> dict[str, Any]:
    """Run one planning job; errors become a row with `error` set (the sweep goes on)."""
    from shardwise.specs.job import cluster_from_mapping
    from shardwise.specs.model_ref import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.planner import plan_search

    c = job["cluster"]
    row: dict[str, Any] = {"job": job["job"], "model": str(job["model"] if isinstance(job["model"], str) else "custom"),
                           "gpu": c.get("gpu"), "gpus": c.get("gpus"), "seq_len": job["seq_len"], "global_batch": job["global_batch"]}
    try:
        model = load_model(job["model"])
        cluster = cluster_from_mapping(c)
        training = TrainingSpec(seq_len=job["seq_len"], global_batch=job["global_batch"], precision=job["precision"])
        res = plan_search(model, cluster, training, job["objective"], tuple(job["schedules"] or ()) or None,
                          max_memory_gib=job["max_memory_gib"], top_k=1)
    except (ShardwiseError, ValidationError) as exc:
        return row | {"error": str(exc).splitlines()[0]}
    best = res.top[0]
    plan = {k: best.plan[k] for k in ("tp", "pp", "vpp", "dp", "cp", "cp_comm", "ep", "etp", "zero", "sequence_parallel", "recompute",
                                      "micro_batch", "schedule")} | {"fp8_recipe": best.fp8_recipe, "moe_dispatcher": best.moe_dispatcher}
    return row | {"gpu": cluster.gpu.name} | plan | {
        "step_time_s": best.step_time_s, "tokens_per_s_per_gpu": best.tokens_per_s_per_gpu, "mfu": best.mfu, "mfu_causal": best.mfu_causal,
        "peak_memory_gib": best.peak_memory_gib, "considered": res.considered, "feasible": res.feasible_screened, "error": None}


def run_sweep(jobs: list[dict[str, Any]], backend: str = "local", address: str | None = None,
              workers: int | None = None, progress: bool = False) -> list[dict[str, Any]]:
    """Rows in job order, whichever backend ran them."""
    if backend not in ("local", "ray"):
        raise ShardwiseError(f"--backend must be local or ray, got {backend!r}")
    runner = _run_ray if backend == "ray" else _run_local
    rows = runner(jobs, address, workers, progress)
    return sorted(rows, key=lambda r: r["job"])


def _bar(progress: bool, total: int) -> tuple[Progress, TaskID]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("planning jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), disable=not progress)
    return bar, bar.add_task("sweep", total=total)


def _run_local(jobs, address, workers, progress):
    bar, task = _bar(progress, len(jobs))
    with bar, ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        rows = []
        for row in pool.map(plan_one, jobs):
            rows.append(row)
            bar.advance(task)
    return rows


def _run_ray(jobs, address, workers, progress):
    try:
        import ray
    except ImportError:
        raise ShardwiseError("the ray backend needs Ray: pip install -e '.[ray]' (or use --backend local)") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                 **({} if address else {"num_cpus": workers or os.cpu_count() or 1}))
    try:
        remote = ray.remote(plan_one)
        pending = [remote.remote(j) for j in jobs]
        bar, task = _bar(progress, len(jobs))
        rows = []
        with bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                rows.extend(ray.get(done))
                bar.advance(task, len(done))
        return rows
    finally:
        if started:
            ray.shutdown()


def write_table(rows: list[dict[str, Any]], path: str | Path) -> None:
    """CSV, or Parquet when the path ends in .parquet (needs pyarrow: the ray extra)."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ShardwiseError("Parquet output needs pyarrow: pip install -e '.[ray]' (or write .csv)") from None
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows]), path)
        return
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k) for k in COLUMNS})
