"""`shardwise train plan` and `shardwise train sweep`: search the plan space."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json, make_console
from shardwise.engines.targets import choices_help, names

if TYPE_CHECKING:
    from shardwise.handoff import Export
    from shardwise.specs.hardware import Cluster
    from shardwise.specs.model import ModelSpec
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.result import Estimate


def plan_cmd(
    job: Path = typer.Argument(None, help="Job file whose 'parallel' section may be partly or wholly left out."),
    model: str = typer.Option(None, "--model", help="Preset name, config.json path (or from JOB)."),
    gpu: list[str] = typer.Option(None, "--gpu", help="GPU type; repeat or comma-separate to compare types."),
    gpus: int = typer.Option(None, "--gpus", help="Number of GPUs; left out, the smallest count of each --gpu type that "
                             "fits (with --days: that trains --tokens in time)."),
    seq_len: int = typer.Option(None, "--seq-len"),
    global_batch: int = typer.Option(None, "--global-batch", help="Sequences per optimizer step."),
    objective: str = typer.Option("throughput", "--objective", help="throughput | cost | memory"),
    max_memory_gib: float = typer.Option(None, "--max-memory-gib", help="Reject plans above this peak per GPU."),
    schedules: list[str] = typer.Option(None, "--schedules", help="Schedules to search (comma-separated)."),
    top: int = typer.Option(5, "--top", help="How many plans to show."),
    tokens: float = typer.Option(None, "--tokens", help="Tokens to train: adds days and dollars."),
    precision: str = typer.Option(None, "--precision", help="bf16 | fp16 | fp8 | fp4 | fp32; fp8 and fp4 search their "
                                  "scaling recipes (those the GPU runs)."),
    fp8_recipes: list[str] = typer.Option(None, "--fp8-recipes", help="Recipes an fp8/fp4 search tries (comma-separated): "
                                          "tensorwise, rowwise, blockwise, mxfp8, delayed; nvfp4, mxfp4. Default: all."),
    moe_dispatchers: list[str] = typer.Option(None, "--moe-dispatchers", help="MoE token dispatchers to try "
                                              "(comma-separated): alltoall, allgather, deepep. Default: the job's."),
    format: Format = format_option(),
    plot: Path = typer.Option(None, "--plot", help="Write the Pareto-front plot (PNG/SVG)."),
    exact_budget: int = typer.Option(None, "--exact-budget", help="Most exact estimates per GPU type (default 128; on a "
                                     "cluster with groups 16 per group and 16 mixed layouts)."),
    memory_headroom: float = typer.Option(None, "--memory-headroom",
                                          help="Share of GPU memory a plan must leave free (default 0.05; a job's cluster.memory_headroom)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
    runnable_on: list[str] = typer.Option(None, "--runnable-on",
                                          help="Only plans one of these engines runs as is: torch (train run), "
                                               f"{', '.join(names('training'))} (comma-separated); each costed with "
                                               "its engine's stack, each engine's best shown."),
    export: str = typer.Option(None, "--export", help=f"{choices_help('training')}: search the plans this engine "
                               "runs and write the best one's launch script (to --output, else to stdout as is, with "
                               "the tables on stderr)."),
    output: Path = typer.Option(None, "--output", "-o", help="With --export: write the launch script here (and the "
                                "files it reads beside it) instead of stdout."),
    method: str = typer.Option(None, "--method", help="full | lora | qlora (adapters on a frozen, for qlora NF4, base); "
                               "for a fine-tune --seq-len and --global-batch default to 2048 and 16."),
    max_gpus: int = typer.Option(1024, "--max-gpus", help="Largest count tried when looking for the smallest that fits."),
    days: float = typer.Option(None, "--days", help="Deadline: without --gpus and with --tokens, the smallest count of "
                               "each GPU type that trains the tokens within this many days (the cheapest type marked)."),
) -> None:
    """Search every valid TP/PP/VPP/DP/CP (and its scheme)/EP/ETP/ZeRO/SP/recompute/micro-batch/schedule plan
    (and, with --precision fp8 or fp4, scaling recipe) and rank them. Each plan says which engines run it as is.

    Examples:

      shardwise train plan --model llama-3.1-70b --gpu h100 --gpus 512 --seq-len 8192 --global-batch 512

      shardwise train plan --model llama-3.1-8b --gpu h100,a100-80gb --gpus 64 --seq-len 4096 --global-batch 256 --objective cost

      shardwise train plan job.yaml --runnable-on megatron --format json > plans.json

      shardwise train plan --model deepseek-v3 --gpu h100 --gpus 1024 --seq-len 4096 --global-batch 4096 --precision fp8

      shardwise train plan --model llama-3.1-70b --method qlora --gpu l40s --tokens 1e8

      shardwise train plan --model llama-3.1-70b --gpu h100 --gpus 64 --seq-len 8192 --global-batch 128 --export megatron -o launch.sh
    """
    from shardwise.engines.support import parse_engines
    from shardwise.errors import ShardwiseError
    from shardwise.train.advice import NoPlanFits
    from shardwise.train.fit import fit_json, search_fitting, sized_inputs
    from shardwise.train.fit_report import advice_tables, smallest_text
    from shardwise.train.plan_inputs import PlanInputs, plan_inputs, run_plan
    from shardwise.train.plan_report import (
        engine_verdicts,
        front_table,
        plan_json,
        plot_front,
        runnability_note,
        runs_on_label,
        summary_text,
        top_table,
    )

    doc = None
    if job is not None:
        from shardwise.specs._loading import read_document

        doc = read_document(job)
        if isinstance(doc, dict) and isinstance(doc.get("cluster"), dict) and "groups" in doc["cluster"]:
            _hetero_plan(doc, objective, top, exact_budget, format, gpu=gpu, gpus=gpus, model=model, seq_len=seq_len,
                         global_batch=global_batch, runnable_on=runnable_on, export=export, plot=plot,
                         schedules=schedules, max_memory_gib=max_memory_gib, no_progress=no_progress, fp8_recipes=fp8_recipes,
                         moe_dispatchers=moe_dispatchers)
            return
    sized = None
    if doc is None and gpus is None:
        inputs, sized = sized_inputs(model, gpu, seq_len, global_batch, tokens, precision, memory_headroom, method, max_gpus,
                                     days, schedules)
    else:
        if days is not None:
            raise ShardwiseError("--days: give it without --gpus (and with --tokens) to find the smallest count that "
                                 "trains in time")
        inputs = plan_inputs(doc, model, gpu, gpus, seq_len, global_batch, tokens, precision, memory_headroom, method)
    progress = format is Format.table and not no_progress

    def search(inputs: PlanInputs) -> tuple:
        return run_plan(inputs, objective, top, schedules, max_memory_gib, exact_budget or 128, progress,
                        runnable_on=parse_engines(runnable_on) or parse_engines(export), fp8_recipes=fp8_recipes,
                        moe_dispatchers=moe_dispatchers)

    def pricing() -> None:
        if progress:
            typer.echo("no plan fits: pricing what to change (offload, more GPUs, another GPU, a shorter sequence)...", err=True)

    try:
        found = search_fitting(inputs, search, schedules, max_gpus, pricing)
    except NoPlanFits as npf:
        if format is Format.json:
            echo_json({"fits": False, "what_to_change": npf.advice.to_dict()})
        else:
            make_console().print(advice_tables(npf.advice))
        raise
    inputs, results, best, fronts = found.inputs, found.results, found.best, found.fronts
    spec, training, clusters = inputs.model, inputs.training, inputs.clusters
    launch = _launch(best[0], spec, training, clusters, export) if export else None
    note = runnability_note(best, spec, training)
    if plot:
        plot_front(results, fronts, best, plot)
    if output is not None and launch is None:
        from shardwise.errors import ShardwiseError

        raise ShardwiseError("--output: train plan writes a launch script there; add --export ENGINE")
    if format is Format.json:
        out = plan_json(objective, results, best, fronts, inputs)
        out |= fit_json(found, sized, days)
        if launch is not None:
            out["export"] = {"engine": launch.engine, "version": launch.version, "args": launch.args,
                             "script": launch.script()}
            if output is not None:
                from shardwise.cli.export import emit

                emit([launch], "script", output)
        echo_json(out)
        return
    # A launch script is text for bash: written to --output, or to stdout untouched (the tables go to stderr).
    console = make_console(stderr=launch is not None and output is None)
    if sized is not None:
        console.print(smallest_text(sized, results, clusters, days))
    if found.advice is not None:
        console.print(advice_tables(found.advice, found.fallback))
    labels = [runs_on_label(engine_verdicts(e, spec, training)) for e in best]
    console.print(top_table(results, best, objective, labels))
    if note:
        console.print(f"[bold yellow]note:[/bold yellow] {note}")
    title = "Pareto front: throughput vs $/M tokens" if len({r.gpu for r in results}) > 1 else "Pareto front: throughput vs peak memory"
    console.print(front_table(fronts, title))
    console.print(summary_text(results))
    if plot:
        console.print(f"plot written to {plot}")
    if launch is not None:
        from shardwise.cli.export import emit

        console.print(f"[bold]launch of plan #1 in {launch.engine} {launch.version}[/bold] "
                      + (f"written to {output}" if output is not None else "on stdout"))
        emit([launch], "script", output)


def _hetero_plan(doc: dict, objective: str, top: int, exact_budget: int | None, format: Format, schedules: list[str] | None,
                 max_memory_gib: float | None, no_progress: bool, **unsupported: object) -> None:
    """`train plan JOB` where the job's cluster has groups (:mod:`shardwise.train.hetero.plan`)."""
    from shardwise.errors import ShardwiseError
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.hetero.plan import hetero_plan
    from shardwise.train.hetero.report import hetero_plan_table
    from shardwise.train.plan_inputs import split_list

    given = [k for k, v in unsupported.items() if v]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ShardwiseError(f"{flag}: not taken with a job whose cluster has groups (the job file gives the model, "
                             "GPUs and batch; engines and plots are for one GPU type); leave it out")
    base = job_from_mapping(doc, require_plan=False)
    # the job's own layout, when it gives one, is ranked with the search's (an invalid one says why)
    given = job_from_mapping(doc).layout if doc.get("parallel") else None
    progress = None
    if format is Format.table and not no_progress:
        def progress(message: str, fraction: float) -> None:
            typer.echo(f"\r{message} ({fraction:.0%})".ljust(70), nl=False, err=True)
    budget = exact_budget or 16
    res = hetero_plan(base.model, base.cluster, base.training, objective, top_k=top, max_exact=budget, per_group_exact=budget,
                      schedules=tuple(split_list(schedules)) or None, max_memory_gib=max_memory_gib, progress=progress,
                      given=given)
    if progress is not None:
        typer.echo("\r" + " " * 70 + "\r", nl=False, err=True)
    if format is Format.json:
        echo_json(res.to_dict())
        return
    make_console().print(hetero_plan_table(res))
def _launch(best: Estimate, spec: ModelSpec, training: TrainingSpec, clusters: list[Cluster], engine: str) -> Export:
    """The export of the best plan (it runs on `engine`: the search was restricted to such plans)."""
    from shardwise.handoff import export_train
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.plan_report import job_mapping

    return export_train(job_from_mapping(job_mapping(best, spec, training, clusters)), engine)


def sweep_cmd(
    sweep: Path = typer.Argument(..., help="Sweep YAML: models x clusters x seq_lens x global_batches."),
    backend: str = typer.Option("local", "--backend", help="local (processes) | ray"),
    address: str = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)."),
    output: Path = typer.Option(Path("sweep.csv"), "--output", "-o", help="CSV or Parquet (.parquet) table of best plans."),
    workers: int = typer.Option(None, "--workers", help="Local worker processes (default: CPU count)."),
    no_progress: bool = typer.Option(False, "--no-progress"),
) -> None:
    """Run a grid of planning jobs in parallel and write one table of the best plans.

    Examples:

      shardwise train sweep sweep.yaml -o best.csv

      shardwise train sweep sweep.yaml --backend ray --address auto -o best.parquet
    """
    from shardwise.train.sweep import load_sweep, run_sweep, write_table

    jobs = load_sweep(sweep)
    rows = run_sweep(jobs, backend=backend, address=address, workers=workers, progress=not no_progress)
    write_table(rows, output)
    failed = sum(1 for r in rows if r.get("error"))
    make_console().print(f"{len(rows)} planning jobs ({failed} without a feasible plan) written to {output}")
