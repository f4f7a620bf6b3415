"""`shardwise serve` commands: simulate a deployment, plan the cheapest one under SLOs, validate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from shardwise.cli.options import Format, format_option, gpu_mix_option
from shardwise.console import echo_json, watch

app = typer.Typer(help="""Serving: simulate a deployment, plan the cheapest one under SLOs, validate, export to vLLM/SGLang.

Examples:

  shardwise serve simulate examples/serve-llama3.1-8b-a100.yaml

  shardwise serve plan --model llama-3.1-8b --rate 20 --slo-ttft-ms 300 --slo-tpot-ms 50 --gpu h100 --gpus 8
""", no_args_is_help=True)


@app.command()
def simulate(
    job: Path = typer.Argument(..., help="Serve job file (YAML/JSON): model, precision, deployment, workload, slo."),
    format: Format = format_option(),
    plot_cdf: Path = typer.Option(None, "--plot-cdf", help="Write TTFT/TPOT/ITL/E2E CDFs to this PNG."),
) -> None:
    """Simulate a serving deployment iteration by iteration and report vLLM-style metrics.

    Examples:

      shardwise serve simulate examples/serve-llama3.1-8b-a100.yaml

      shardwise serve simulate examples/serve-llama3.1-70b-disagg.yaml --format json --plot-cdf latency.png
    """
    from shardwise.serve.config import load_serve_job
    from shardwise.serve.report import simulation_report

    spec = load_serve_job(job)
    tables: list = []

    def done() -> float:  # first tokens and completions so far, in requests (half each)
        t = tables[-1] if tables else None
        return 0.0 if t is None else (np.isfinite(t.first_s).sum() + np.isfinite(t.finish_s).sum()) / 2

    with watch("simulating requests", done, total=spec.workload.num_requests):
        result, metrics = simulation_report(spec, tables)
    if plot_cdf is not None:
        from shardwise.serve.plots import plot_latency_cdfs

        plot_latency_cdfs(result, plot_cdf, f"{spec.name}: {'; '.join(metrics['deployment'])}", spec.slo)
    if format is Format.json:
        echo_json(metrics)
        return
    from shardwise.serve.report import metrics_tables, print_tables

    print_tables(metrics_tables(f"{spec.name} ({spec.precision.label}) on {'; '.join(metrics['deployment'])}", metrics))
    if plot_cdf is not None:
        typer.echo(f"latency CDFs written to {plot_cdf}")


@app.command()
def plan(
    job: Path = typer.Argument(None, help="Optional job file: model, precision, workload, slo (its deployment is ignored)."),
    model: str = typer.Option(None, "--model", help="Model preset, config.json path (overrides the job's)."),
    rate: float = typer.Option(None, "--rate", help="Target request rate (req/s)."),
    slo_ttft_ms: float = typer.Option(None, "--slo-ttft-ms", help="TTFT target (ms)."),
    slo_tpot_ms: float = typer.Option(None, "--slo-tpot-ms", help="TPOT target (ms)."),
    attainment: float = typer.Option(None, "--attainment", help="Fraction of requests that must meet the SLOs (default 0.9)."),
    gpu: list[str] = typer.Option(None, "--gpu", help="GPU type the deployment may use; repeat or comma-separate "
                                  "to allow several (default: --gpu-mix h100:8,a100-80gb:8)."),
    gpus: str = typer.Option(None, "--gpus", help="GPUs available of each --gpu type (default 8)."),
    gpu_mix: str = typer.Option(None, "--gpu-mix", help="GPU types with the count available of each, "
                                "e.g. h100:8,a100-80gb:16."),
    workload: Path = typer.Option(None, "--workload", help="Workload file (YAML/JSON `workload:` block or a CSV trace)."),
    precision: str = typer.Option(None, "--precision", help="bf16 | fp16 | fp8 | int8 | int4 | fp4 (weights; fp8 also the KV cache)."),
    disaggregation: bool = typer.Option(True, "--disagg/--no-disagg", help="Also search prefill/decode-disaggregated deployments."),
    mix: bool = typer.Option(True, "--mix/--no-mix", help="Also search GPU-type mixes by length class (MILP)."),
    num_requests: int = typer.Option(None, "--num-requests", help="Requests per candidate simulation (default 600)."),
    speculative: str = typer.Option(None, "--speculative", help="Also try speculative decoding: METHOD[:TOKENS[:DRAFT]], "
                                    "e.g. eagle3:3, ngram:4, draft:4:llama-3.2-1b (needs workload.acceptance_rate)."),
    format: Format = format_option(),
    plot: Path = typer.Option(None, "--plot", help="Write the cost-vs-rate curve of the candidates to this PNG."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar (as train plan's)."),
) -> None:
    """Find the cheapest deployment that meets the SLOs at the target rate.

    Examples:

      shardwise serve plan --model llama-3.1-8b --rate 20 --slo-ttft-ms 300 --slo-tpot-ms 50 --gpu-mix h100:8,a100-80gb:16

      shardwise serve plan examples/serve-llama3.1-8b-a100.yaml --gpu h100 --gpus 32 --format json
    """
    from shardwise.serve.plan_cli import plan_request, print_plan
    from shardwise.serve.planner import plan as run_plan

    mix_text, note = gpu_mix_option(gpu, gpus, gpu_mix)
    request = plan_request(job, model, rate, slo_ttft_ms, slo_tpot_ms, attainment, mix_text, workload, precision, num_requests,
                           speculative)
    if note:
        typer.echo(f"note: {note}", err=True)
    done = [0.0]  # percent of the search, as the planner reports it

    def report(message: str, fraction: float) -> None:
        done[0] = 100.0 * fraction

    with watch("serve plan: searching (%)", lambda: done[0], total=100, enabled=False if no_progress else None):
        result = run_plan(request, disaggregation=disaggregation, mix=mix, progress=report)
    if plot is not None:
        from shardwise.serve.planner import cost_curves
        from shardwise.serve.plots import plot_cost_vs_rate

        plot_cost_vs_rate(cost_curves(result), plot, f"{request.model.name}: cost vs rate under the SLOs", request.rate)
    if format is Format.json:
        echo_json(result.to_json())
        return
    print_plan(result)
    if plot is not None:
        typer.echo(f"cost-vs-rate curve written to {plot}")


@app.command()
def validate(
    format: Format = format_option(),
    split: str = typer.Option("all", "--split", help="fit | context | all."),
    cv: bool = typer.Option(False, "--cv", help="Leave-one-source-out: each source's rows predicted by constants fitted "
                            "without it (stored by scripts/fit_serving.py)."),
) -> None:
    """Compare the simulator with published vLLM/SGLang runs (data/serving_measurements.yaml and
    data/calibration/serving-measurements.json), per source.

    Examples:

      shardwise serve validate

      shardwise serve validate --cv

      shardwise serve validate --split fit --format json
    """
    from shardwise.errors import ShardwiseError
    from shardwise.serve.validate import per_source, print_validation, run_validation, stored_cv, verdict

    if split not in ("fit", "context", "all"):
        raise ShardwiseError(f"--split must be fit, context or all, got {split!r}")
    if cv:
        stored = stored_cv()
        if not stored:
            raise ShardwiseError("no stored cross-validation: run scripts/fit_serving.py (it refits once per source)")
        rows = [r for fold in stored["folds"].values() for r in fold["rows"] if split in ("all", r["split"])]
        by_source = per_source(rows)
        if format is Format.json:
            echo_json({"rows": rows, "per_source": by_source, "verdict": verdict(by_source),
                       "parameters": {s: f["parameters"] for s, f in stored["folds"].items()}})
            return
        for r in rows:
            r.setdefault("citation", r["source"])
        print_validation(rows, "Held out: each source predicted by constants fitted without it (error = simulated / published - 1)")
        return
    rows = run_validation(split=split)
    if format is Format.json:
        echo_json(rows)
        return
    print_validation(rows)


def _register() -> None:
    from shardwise.cli.export import serve_export_cmd

    app.command("export")(serve_export_cmd)


_register()
