"""`shardwise train plan` and `shardwise train sweep`: search the plan space."""

from __future__ import annotations

from pathlib import Path

import typer
from shardwise.console import echo_json, make_console

from shardwise.cli.train import Format
from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_CLUSTER_GPUS


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def plan_cmd(
    job: Path = typer.Argument(None, help="Job file whose 'parallel' section may be partly or wholly left out."),
    model: str = typer.Option(None, "--model", help="Preset name, config.json path (or from JOB)."),
    gpu: list[str] = typer.Option(None, "--gpu", help="GPU type; repeat or comma-separate to compare types."),
    gpus: int = typer.Option(None, "--gpus", help="Number of GPUs."),
    seq_len: int = typer.Option(None, "--seq-len"),
    global_batch: int = typer.Option(None, "--global-batch", help="Sequences per optimizer step."),
    objective: str = typer.Option("throughput", "--objective", help="throughput | cost | memory"),
    max_memory_gib: float = typer.Option(None, "--max-memory-gib", help="Reject plans above this peak per GPU."),
    schedules: list[str] = typer.Option(None, "--schedules", help="Schedules to search (comma-separated)."),
    top: int = typer.Option(5, "--top", help="How many plans to show."),
    tokens: float = typer.Option(None, "--tokens", help="Tokens to train: adds days and dollars."),
    precision: str = typer.Option(None, "--precision", help="bf16 | fp16 | fp8 | fp32"),
    format: Format = typer.Option(Format.table, "--format", "-f"),
    plot: Path = typer.Option(None, "--plot", help="Write the Pareto-front plot (PNG/SVG)."),
    exact_budget: int = typer.Option(128, "--exact-budget", help="Most exact estimates per GPU type."),
    memory_headroom: float = typer.Option(None, "--memory-headroom",
                                          help="Share of GPU memory a plan must leave free (default 0.05; a job's cluster.memory_headroom)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Search every valid TP/PP/VPP/DP/CP/EP/ZeRO/SP/recompute/micro-batch/schedule plan and rank them."""
    from pydantic import ValidationError

    from shardwise.specs._loading import format_validation_error
    from shardwise.specs.hardware import make_cluster
    from shardwise.specs.job import job_from_mapping
    from shardwise.specs.model import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.plan_report import front_table, plot_front, summary_text, top_table
    from shardwise.train.planner import plan_across_gpus
    from shardwise.train.search_space import DEFAULT_SCHEDULES

    if memory_headroom is not None and not 0 <= memory_headroom < 1:
        raise ShardwiseError(f"--memory-headroom must be in [0, 1), got {memory_headroom}")
    fixed: dict = {}
    if job is not None:
        from shardwise.specs._loading import read_document

        doc = read_document(job)
        base = job_from_mapping(doc, require_plan=False)
        fixed = dict((doc.get("parallel") or {}) if isinstance(doc, dict) else {})
        spec, training = base.model, base.training
        clusters = [base.cluster if memory_headroom is None else base.cluster.model_copy(update={"memory_headroom": memory_headroom})]
    else:
        missing = [n for n, v in (("--model", model), ("--gpu", gpu), ("--gpus", gpus), ("--seq-len", seq_len), ("--global-batch", global_batch)) if not v]
        if missing:
            raise ShardwiseError(f"give a job file or {', '.join(missing)}")
        spec = load_model(model)
        try:
            training = TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision or "bf16", tokens=tokens)
        except ValidationError as exc:
            raise ShardwiseError(format_validation_error(exc).replace("seq_len", "--seq-len").replace("global_batch", "--global-batch")) from None
        if not 0 < gpus <= MAX_CLUSTER_GPUS:
            raise ShardwiseError(f"--gpus must be in 1..{MAX_CLUSTER_GPUS:,} (see Limits in the README), got {shorten(gpus)}")
        clusters = [make_cluster(g, gpus, memory_headroom=memory_headroom) for g in _split(gpu)]
    if tokens is not None and job is not None:
        try:
            training = TrainingSpec(**{**training.model_dump(), "tokens": tokens})
        except ValidationError as exc:
            raise ShardwiseError(format_validation_error(exc).replace("tokens", "--tokens")) from None
    names = tuple(_split(schedules)) or DEFAULT_SCHEDULES
    progress = format is Format.table and not no_progress
    results, best, fronts = plan_across_gpus(spec, clusters, training, objective, top_k=top, schedules=names,
                                             fixed=fixed, max_memory_gib=max_memory_gib, progress=progress,
                                             max_exact=exact_budget)
    if plot:
        plot_front(results, fronts, best, plot)
    if format is Format.json:
        out = {"objective": objective, "top": [e.to_dict() for e in best], "pareto_front": fronts,
               "searches": [r.to_dict() | {"top": None, "pareto_front": None} for r in results]}
        echo_json(out)
        return
    console = make_console()
    console.print(top_table(results, best, objective))
    title = "Pareto front: throughput vs $/M tokens" if len(results) > 1 else "Pareto front: throughput vs peak memory"
    console.print(front_table(fronts, title))
    console.print(summary_text(results))
    if plot:
        console.print(f"plot written to {plot}")


def sweep_cmd(
    sweep: Path = typer.Argument(..., help="Sweep YAML: models x clusters x seq_lens x global_batches."),
    backend: str = typer.Option("local", "--backend", help="local (processes) | ray"),
    address: str = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)."),
    output: Path = typer.Option(Path("sweep.csv"), "--output", "-o", help="CSV or Parquet (.parquet) table of best plans."),
    workers: int = typer.Option(None, "--workers", help="Local worker processes (default: CPU count)."),
    no_progress: bool = typer.Option(False, "--no-progress"),
) -> None:
    """Run a grid of planning jobs in parallel and write one table of the best plans."""
    from shardwise.train.sweep import load_sweep, run_sweep, write_table

    jobs = load_sweep(sweep)
    rows = run_sweep(jobs, backend=backend, address=address, workers=workers, progress=not no_progress)
    write_table(rows, output)
    failed = sum(1 for r in rows if r.get("error"))
    make_console().print(f"{len(rows)} planning jobs ({failed} without a feasible plan) written to {output}")
