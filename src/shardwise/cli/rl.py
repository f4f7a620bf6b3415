"""`shardwise rl` commands: estimate one RL post-training iteration, plan the placement."""

from __future__ import annotations

from pathlib import Path

import typer

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json

app = typer.Typer(help="""RL post-training (GRPO, PPO): generation, inference passes, training and weight sync on one cluster.

Examples:

  shardwise rl estimate examples/rl-grpo-llama3.1-8b-64xh100.yaml

  shardwise rl plan examples/rl-grpo-llama3.1-8b-64xh100.yaml --format json
""", no_args_is_help=True)


@app.command()
def estimate(
    job: Path = typer.Argument(..., help="RL job file (YAML/JSON): policy, reference, reward, critic, algorithm, rollout, "
                               "cluster, training, parallel, placement."),
    format: Format = format_option(),
    export: Path = typer.Option(None, "--export", help="Write the phases as job files into this directory: rollout.yaml "
                                "(+ rollout.csv, the batch) for `serve simulate`, train.yaml for `train estimate`."),
) -> None:
    """Estimate one iteration: rollout (serving simulator), forward passes and training (training estimate), weight
    sync (network model), their overlap under the placement and mode, memory per phase, samples/s and cost.

    Examples:

      shardwise rl estimate examples/rl-grpo-llama3.1-8b-64xh100.yaml

      shardwise rl estimate examples/rl-grpo-llama3.1-8b-64xh100.yaml --format json --export phases/
    """
    from shardwise.rl.report import print_estimate, write_phase_jobs
    from shardwise.rl.spec import load_rl_job
    from shardwise.rl.step import estimate_rl

    spec = load_rl_job(job)
    result = estimate_rl(spec)
    if export is not None:
        written = write_phase_jobs(spec, result, export)
    if format is Format.json:
        echo_json(result.to_dict())
        return
    print_estimate(result)
    if export is not None:
        typer.echo("phase jobs written: " + ", ".join(str(p) for p in written))


@app.command()
def plan(
    job: Path = typer.Argument(..., help="RL job file; its placement, rollout tp/pp and parallel are searched."),
    format: Format = format_option(),
    top: int = typer.Option(5, "--top", help="Candidates shown."),
    max_staleness: int = typer.Option(None, "--max-staleness", help="Policy versions a response may lag (default: the "
                                      "job's algorithm.max_staleness)."),
) -> None:
    """Search colocated vs split (and the rollout pool's size), the rollout TP, the training plan and the mode;
    rank by samples/s and $ per sample; say why the rest were rejected.

    Examples:

      shardwise rl plan examples/rl-grpo-llama3.1-8b-64xh100.yaml

      shardwise rl plan examples/rl-grpo-llama3.1-70b-256xh100.yaml --max-staleness 0 --format json
    """
    from shardwise.console import watch
    from shardwise.errors import ShardwiseError
    from shardwise.rl.planner import plan_rl
    from shardwise.rl.report import print_plan
    from shardwise.rl.spec import load_rl_job

    if top < 1:
        raise ShardwiseError(f"--top must be >= 1, got {top}")
    spec = load_rl_job(job)
    if max_staleness is not None:
        from shardwise.rl.spec import with_max_staleness

        spec = with_max_staleness(spec, max_staleness)
    done = [0.0]

    def report(message: str, fraction: float) -> None:
        done[0] = 100.0 * fraction

    with watch("rl plan: searching (%)", lambda: done[0], total=100):
        result = plan_rl(spec, top, progress=report)
    if format is Format.json:
        echo_json(result.to_dict(top))
        return
    print_plan(result, top)


@app.command()
def validate(format: Format = format_option(),
             lengths: bool = typer.Option(False, "--lengths", help="Also infer the response-length median each record's "
                                          "update time implies, fit one per source, and compare the other phases at it "
                                          "(about 15 s).")) -> None:
    """Compare `rl estimate` with published RL runs (data/rl_measurements.yaml): per-phase and step seconds, the
    error per record and per source (+ means the estimate takes longer), and the error at other response-length
    medians (the sources do not state their mean response length). Nothing is fitted on these rows; with
    --lengths, the response-length median is read from the update times and the other phases checked at it.

    Examples:

      shardwise rl validate

      shardwise rl validate --lengths

      shardwise rl validate --format json
    """
    from rich.table import Table

    from shardwise.console import make_console
    from shardwise.rl.validate import FIGURES, LENGTH_FIGURE, implied_lengths, run_validation

    result = run_validation()
    if lengths:
        result["implied_lengths"] = implied_lengths()
    if format is Format.json:
        echo_json(result)
        return
    console = make_console()
    table = Table(title="rl estimate vs published runs: seconds per iteration, estimated / measured (error)", title_justify="left")
    table.add_column("record")
    for key in FIGURES:
        table.add_column(key, justify="right")
    table.add_column("step error at other medians", justify="right")
    for row in result["rows"]:
        cells = [f"{f['estimated']:.0f} / {f['measured']:.0f} ({f['error']:+.0%})" if (f := row["figures"].get(k)) else "-" for k in FIGURES]
        sens = ", ".join(f"{m}: {d['step_s']:+.0%}" for m, d in row["sensitivity"].items() if "step_s" in d)
        table.add_row(f"{row['id']} (median {row['output_median']})", *cells, sens or "-")
    console.print(table)
    per = Table(title="mean absolute error per source", title_justify="left")
    per.add_column("source")
    for key in FIGURES:
        per.add_column(key, justify="right")
    for src, errs in result["per_source"].items():
        per.add_row(src, *[f"{errs[k]:.0%}" if k in errs else "-" for k in FIGURES])
    console.print(per)
    if lengths:
        inferred = result["implied_lengths"]
        held = Table(title=f"the median response length the measured {LENGTH_FIGURE} implies (one per record, one fitted "
                           "per source), and the other figures' error at the source's median", title_justify="left")
        held.add_column("source")
        held.add_column("median: assumed -> fitted", justify="right")
        held.add_column("per record", justify="right")
        others = [k for k in FIGURES if k != LENGTH_FIGURE]
        for key in others:
            held.add_column(key, justify="right")
        for src, fit in inferred["per_source"].items():
            mine = ", ".join(f"{inferred['per_record'][rid]:.0f}" for rid in fit["errors"])
            end = " (range end)" if fit["at_range_end"] else ""
            held.add_row(src, f"{fit['assumed_median']:.0f} -> {fit['median']:.0f}{end}", mine,
                         *[f"{fit['mean_abs_error'][k]:.0%}" if k in fit["mean_abs_error"] else "-" for k in others])
        console.print(held)
    for src, text in result["sources"].items():
        typer.echo(f"{src}: {text}")
