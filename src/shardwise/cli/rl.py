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
