"""`shardwise train` commands."""

from __future__ import annotations

from pathlib import Path

import typer

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json, make_console

app = typer.Typer(help="""Training: estimate a plan, search plans, export a plan to an engine, run a plan, validate
the model against public measurements.

Examples:

  shardwise train estimate examples/llama3.1-70b-64xh100.yaml

  shardwise train plan --model llama-3.1-8b --gpu h100 --gpus 64 --seq-len 4096 --global-batch 256
""", no_args_is_help=True)


@app.command("estimate")
def estimate_cmd(
    job: Path = typer.Argument(..., help="YAML or JSON job file (one job or a list of jobs)."),
    format: Format = format_option(),
    trace: Path = typer.Option(None, "--trace", help="Write the estimated step as a Chrome/Perfetto trace (JSON)."),
) -> None:
    """Predict per-GPU memory, step time, MFU, tokens/s (and days and dollars) for each job. In a list, a job
    that fails is reported in place (JSON: an object with an `error` field) and the others still print;
    the exit status is then 2.

    Examples:

      shardwise train estimate examples/llama3.1-70b-64xh100.yaml

      shardwise train estimate examples/llama3.1-70b-64xh100.yaml --format json --trace step.json
    """
    from rich.text import Text

    from shardwise.errors import ShardwiseError
    from shardwise.specs._loading import read_document
    from shardwise.train.batch import JobError, estimate_batch
    from shardwise.train.hetero.report import hetero_table
    from shardwise.train.report import engine_verdicts_of, estimate_json, estimate_table
    from shardwise.train.result import Estimate

    entries = estimate_batch(read_document(job), str(job))
    jobs = [j for j, _ in entries]
    results = [r for _, r in entries]
    failed = [r for r in results if isinstance(r, JobError)]
    if trace is not None:
        from shardwise.pipeline.trace import trace_document, write_trace
        from shardwise.train.hetero.trace import hetero_events
        from shardwise.train.trace import estimate_events

        events: list[dict] = []
        for r in (r for r in results if not isinstance(r, JobError)):
            make = estimate_events if isinstance(r, Estimate) else hetero_events
            events += make(r, 1 + len({e["pid"] for e in events}), flow_id=1 + sum(e["ph"] == "s" for e in events))
        write_trace(trace_document(events, source="shardwise train estimate", jobs=len(results)), trace)
        typer.echo(f"trace written to {trace} (open it in ui.perfetto.dev)", err=True)
    if format is Format.json:
        echo_json(estimate_json(results, jobs))
    else:
        console = make_console()
        for r, j in zip(results, jobs):
            if isinstance(r, JobError):
                console.print(Text(r.line(), style="bold red"))
            else:
                console.print(estimate_table(r, engine_verdicts_of(j)) if isinstance(r, Estimate) else hetero_table(r))
    if failed:
        raise ShardwiseError(f"{len(failed)} of {len(results)} jobs failed: {', '.join(r.label for r in failed)}; "
                             "each error is printed in place of its estimate")


@app.command("goodput")
def goodput_cmd(
    job: Path = typer.Argument(..., help="YAML or JSON job file (one job or a list of jobs; clusters of one GPU type)."),
    runs: int = typer.Option(2000, "--runs", min=0, max=100_000, help="Monte Carlo runs (0: none; needs training.tokens)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the Monte Carlo draws."),
    plot: Path = typer.Option(None, "--plot", help="Write the histogram of simulated days to train (PNG/SVG)."),
    format: Format = format_option(),
) -> None:
    """Failures, checkpoints and restarts: effective training time, the checkpoint interval, spares, what
    continuing on fewer nodes costs, and a Monte Carlo of the whole run (P10/P90 days).

    Examples:

      shardwise train goodput examples/goodput-llama3-405b-16k.yaml --plot risk.png

      shardwise train goodput examples/llama3.1-70b-64xh100.yaml --format json
    """
    from shardwise.errors import ShardwiseError
    from shardwise.specs.job import TrainJob, load_jobs
    from shardwise.train.elastic import what_ifs
    from shardwise.train.estimate import estimate
    from shardwise.train.goodput import goodput
    from shardwise.train.goodput_report import (
        goodput_tables,
        plot_simulation,
        run_simulation,
        simulation_dict,
        work_seconds,
    )

    out, console = [], make_console()
    for j in load_jobs(job):
        if not isinstance(j, TrainJob):
            raise ShardwiseError("cluster.groups: goodput is modelled for clusters of one GPU type; estimate each group")
        e = estimate(j)
        g = goodput(j, e)
        if g is None:
            raise ShardwiseError("cluster.reliability.failures is false: nothing to model; remove it or set it to true")
        e = e.__class__(**{**e.__dict__, "goodput": g.to_dict()})
        wi = what_ifs(j, e, g)
        sim = sim_d = None
        if runs and e.days_to_train is not None and g.ettr > 0 and g.run.mttf_s < float("inf"):
            work = work_seconds(e)
            sim = run_simulation(g, work, runs, seed)
            sim_d = simulation_dict(sim, g, work)
            if plot is not None:
                plot_simulation(sim, g, work, plot, f"{e.model} on {e.num_gpus:,} x {e.gpu}: {runs:,} simulated runs")
        if format is Format.json:
            out.append({"name": e.name, "model": e.model, "gpu": e.gpu, "num_gpus": e.num_gpus, "step_time_s": e.step_time_s,
                        "goodput": e.goodput, "what_if": wi, "monte_carlo": sim_d})
        else:
            console.print(goodput_tables(e, g, wi, sim_d))
            if sim is not None and plot is not None:
                console.print(f"plot written to {plot}")
    if format is Format.json:
        echo_json(out[0] if len(out) == 1 else out)


def _register() -> None:
    from shardwise.cli.export import train_export_cmd
    from shardwise.cli.train_plan import plan_cmd, sweep_cmd
    from shardwise.cli.train_run import run_cmd
    from shardwise.cli.validate import validate

    app.command("export")(train_export_cmd)
    app.command("plan")(plan_cmd)
    app.command("sweep")(sweep_cmd)
    app.command("run")(run_cmd)
    app.command("validate")(validate)


_register()
