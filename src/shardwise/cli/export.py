"""`shardwise train export` and `shardwise serve export`: a plan as the engine's own launch."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shardwise.engines.targets import choices_help
from shardwise.errors import ShardwiseError

if TYPE_CHECKING:
    from shardwise.handoff import Export
    from shardwise.serve.config import ServeJob
    from shardwise.specs.job import TrainJob

_VERSION = typer.Option(None, "--engine-version", help="Engine release to target (default: the pinned one).")
_FORMAT = typer.Option("script", "--format", "-f", help="args (engine arguments, one line) | script | file (config file).")
_OUT = typer.Option(None, "--output", "-o", help="Write here instead of stdout; extra files (schedule CSV) go beside it.")


def load_train_job(path: Path, rank: int = 1) -> TrainJob:
    """A job file, or the JSON of `train plan --format json` (its `rank`-th plan)."""
    from shardwise.specs._loading import read_document
    from shardwise.specs.job import job_from_mapping, load_jobs

    doc = read_document(path)
    if isinstance(doc, dict) and "top" in doc:
        rows = doc["top"] or []
        if not 1 <= rank <= len(rows):
            raise ShardwiseError(f"--rank {rank}: {path} holds {len(rows)} plans; give 1..{len(rows)}")
        if not isinstance(rows[rank - 1], dict) or "job" not in rows[rank - 1]:
            raise ShardwiseError(f"{path}: plan {rank} has no 'job'; write it with this version's `train plan --format json`")
        return job_from_mapping(rows[rank - 1]["job"], where=f"top[{rank - 1}].job")
    jobs = load_jobs(path)
    if len(jobs) > 1 and rank > len(jobs):
        raise ShardwiseError(f"--rank {rank}: {path} holds {len(jobs)} jobs")
    return jobs[rank - 1 if len(jobs) > 1 else 0]


def emit(exports: Sequence[Export], fmt: str, output: Path | None) -> None:
    """Print or write the rendered exports; extra files are written beside the output (or here)."""
    texts = [e.render(fmt) for e in exports]
    where = output.parent if output is not None else Path(".")
    for e in exports:
        for name, text in e.files.items():
            if fmt != "script":  # a script carries its files as here-documents
                (where / name).write_text(text)
                typer.echo(f"wrote {where / name}", err=True)
        if fmt == "args":
            for n in e.notes:
                typer.echo(f"note: {n}", err=True)
    text = "\n".join(texts) if fmt != "args" else "".join(texts)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output}", err=True)


def train_export_cmd(
    job: Path = typer.Argument(..., help="Job file, or the JSON written by `train plan --format json`."),
    to: str = typer.Option(..., "--to", help=choices_help("training")),
    engine_version: str = _VERSION,
    format: str = _FORMAT,
    output: Path = _OUT,
    rank: int = typer.Option(1, "--rank", help="Which plan of a `train plan` JSON (1 = best)."),
) -> None:
    """Write the launch of a plan in torchtitan, Megatron-LM or DeepSpeed. A plan the engine cannot run is
    refused with the reason and what would run.

    Examples:

      shardwise train export examples/llama3.1-70b-64xh100.yaml --to megatron --format args

      shardwise train plan job.yaml --runnable-on torchtitan -f json > plans.json && shardwise train export plans.json --to torchtitan -o launch.sh

      shardwise train export job.yaml --to deepspeed --format file -o ds_config.json
    """
    from shardwise.handoff import export_train

    emit([export_train(load_train_job(job, rank), to, engine_version)], format, output)


def load_serve_export_job(path: Path, rank: int = 1) -> ServeJob:
    """A serve job file, or the JSON of `serve plan --format json` (rank 1: its chosen deployment; 2..: the
    runners-up)."""
    from shardwise.serve.config import load_serve_job, parse_serve_job
    from shardwise.specs._loading import read_document

    doc = read_document(path)
    if not (isinstance(doc, dict) and "chosen" in doc and "runners_up" in doc):
        return load_serve_job(path)
    plans = [c for c in [doc.get("chosen"), *(doc.get("runners_up") or [])] if c]
    if not plans:
        raise ShardwiseError(f"{path}: the plan found no feasible deployment; nothing to export")
    if not 1 <= rank <= len(plans):
        raise ShardwiseError(f"--rank {rank}: {path} holds {len(plans)} deployments (1: the chosen one); give 1..{len(plans)}")
    job = {"model": doc["model"], "precision": doc.get("precision", "bf16"), "deployment": plans[rank - 1]["deployment"],
           "workload": {"rate": 1, "num_requests": 1}}
    return parse_serve_job(job, base_dir=path.resolve().parent, where=f"{path} (plan {rank})")


def serve_export_cmd(
    job: Path = typer.Argument(..., help="Serve job file, or the JSON written by `serve plan --format json`."),
    to: str = typer.Option(..., "--to", help=choices_help("serving")),
    engine_version: str = _VERSION,
    format: str = _FORMAT,
    output: Path = _OUT,
    rank: int = typer.Option(1, "--rank", help="Which deployment of a `serve plan` JSON (1 = the chosen one)."),
) -> None:
    """Write the serve command of each pool of a deployment for vLLM or SGLang (and, for a prefill/decode
    split, the router that joins the pools).

    Examples:

      shardwise serve export examples/serve-llama3.1-8b-a100.yaml --to vllm --format args

      shardwise serve export examples/serve-llama3.1-70b-disagg.yaml --to sglang -o serve.sh

      shardwise serve plan job.yaml --gpu h100 --gpus 16 -f json > plan.json && shardwise serve export plan.json --to vllm
    """
    from shardwise.handoff import export_serve

    if format == "file":
        raise ShardwiseError("--format file: vLLM and SGLang take flags; use --format args or script")
    emit(export_serve(load_serve_export_job(job, rank), to, engine_version), format, output)
