"""`serve plan` input (options and/or a job file) and its table output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_CLUSTER_GPUS, MAX_PLAN_REQUESTS
from shardwise.serve.config import SLOSpec, SpeculativeSpec, parse_block, parse_serve_job
from shardwise.serve.planner import PlanRequest, ServePlanResult
from shardwise.serve.precision import Precision
from shardwise.serve.workload import WorkloadSpec
from shardwise.specs._loading import display_path, read_document
from shardwise.specs.hardware import get_gpu
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model

DEFAULT_GPU_MIX = "h100:8,a100-80gb:8"  # what `serve plan` may use when no GPUs are given
DEFAULT_GPUS_PER_TYPE = 8


def parse_gpu_mix(text: str) -> dict[str, int]:
    """'h100:8,a100-80gb:16' -> {'H100-SXM': 8, 'A100-80GB': 16} (a type without a count: 8)."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, count = item.partition(":")
        try:
            n = int(count) if count else DEFAULT_GPUS_PER_TYPE
        except ValueError:
            raise ShardwiseError(f"--gpu-mix: bad count in {shorten(item)}; write TYPE:COUNT, e.g. h100:8") from None
        if not 0 < n <= MAX_CLUSTER_GPUS:
            raise ShardwiseError(f"--gpu-mix: the count of {shorten(name)} must be positive and at most {MAX_CLUSTER_GPUS:,}, got {shorten(n)}")
        try:
            gpu = get_gpu(name).name
        except ShardwiseError as exc:
            raise ShardwiseError(f"--gpu-mix: {exc}") from None
        out[gpu] = out.get(gpu, 0) + n
    if not out:
        raise ShardwiseError("--gpu-mix must name at least one GPU type with a count, e.g. h100:8,a100-80gb:16")
    return out


def _workload_file(path: Path) -> WorkloadSpec:
    if path.suffix.lower() == ".csv":
        return parse_block(WorkloadSpec, {"arrival": "trace", "path": str(path.resolve())}, "workload")
    doc = read_document(path)
    block = doc.get("workload", doc) if isinstance(doc, dict) else doc
    if isinstance(block, dict) and block.get("arrival") == "trace" and isinstance(block.get("path"), str) and not Path(block["path"]).is_absolute():
        block = {**block, "path": str((path.parent / block["path"]).resolve())}
    return parse_block(WorkloadSpec, block, "workload")


def plan_request(job: Path | None, model: str | None, rate: float | None, ttft: float | None, tpot: float | None,
                 attainment: float | None, gpu_mix: str, workload: Path | None, precision: str | None,
                 num_requests: int | None, speculative: str | None = None) -> PlanRequest:
    """Read the job file and the workload file (if any), then merge them with the options."""
    doc = read_document(job) if job is not None else None
    base = job.resolve().parent if job is not None else None
    wl = _workload_file(workload) if workload else None
    return merge_plan_request(doc, base, str(job), model, rate, ttft, tpot, attainment, gpu_mix, wl, precision, num_requests,
                              speculative)


def parse_speculative(text: str) -> SpeculativeSpec:
    """'eagle3', 'ngram:4' or 'draft:4:llama-3.2-1b' -> method, drafted tokens, draft model."""
    method, _, rest = text.strip().partition(":")
    count, _, draft = rest.partition(":")
    data: dict[str, Any] = {"method": method}
    if count:
        data["num_tokens"] = count
    if draft:
        data["draft_model"] = draft
    return parse_block(SpeculativeSpec, data, "--speculative")


def merge_plan_request(doc: Any, base: Path | None, where: str, model: str | dict | ModelSpec | None, rate: float | None,
                       ttft: float | None, tpot: float | None, attainment: float | None, gpu_mix: str,
                       workload: WorkloadSpec | None, precision: str | None, num_requests: int | None,
                       speculative: str | None = None) -> PlanRequest:
    """The parsed job document (model, precision, workload, slo, and the deployment's adapters; the rest of
    its deployment is ignored) merged with the options, which win: what the CLI and the web API both plan.
    `gpu_mix`: 'h100:8,a100-80gb:16'."""
    data: dict[str, Any] = {}
    if doc is not None:
        if not isinstance(doc, dict):
            raise ShardwiseError(f"{display_path(where)}: a serve job must be a mapping")
        doc = {"deployment": {"gpu": "h100"}, **doc}
        parsed = parse_serve_job(doc, base_dir=base, where=where)
        shared = (parsed.deployment.engine or {}).get("speculative")
        data = {"model": parsed.model, "precision": parsed.precision, "workload": parsed.workload, "slo": parsed.slo,
                "adapters": parsed.deployment.adapters,
                "speculative": parse_block(SpeculativeSpec, shared, "deployment.engine.speculative") if shared else None}
    m = load_model(model) if model else data.get("model")
    if m is None:
        raise ShardwiseError("serve plan needs --model (or a job file naming the model)")
    wl = workload or data.get("workload") or parse_block(WorkloadSpec, {"rate": rate or 1.0, "num_requests": 600}, "workload")
    target = rate if rate is not None else (wl.rate if wl.rate is not None else None)
    if target is None:
        raise ShardwiseError("serve plan needs --rate (req/s) or a workload with a rate")
    if not (math.isfinite(target) and target > 0):
        raise ShardwiseError(f"--rate must be a positive, finite number of requests/s, got {target}")
    slo = data.get("slo")
    fields = {"ttft_ms": ttft if ttft is not None else (slo.ttft_ms if slo else None),
              "tpot_ms": tpot if tpot is not None else (slo.tpot_ms if slo else None),
              "attainment": attainment if attainment is not None else (slo.attainment if slo else 0.9)}
    if fields["ttft_ms"] is None and fields["tpot_ms"] is None:
        raise ShardwiseError("serve plan needs an SLO: --slo-ttft-ms and/or --slo-tpot-ms (or slo: in the job file)")
    slo_spec = parse_block(SLOSpec, {k: v for k, v in fields.items() if v is not None}, "slo")
    try:
        prec = Precision.parse(precision) if precision else data.get("precision") or Precision()
    except ValueError as exc:
        raise ShardwiseError(f"--precision: {exc}") from None
    n = 600 if num_requests is None else num_requests
    if n < 50:
        raise ShardwiseError(f"--num-requests must be at least 50 for stable percentiles, got {n}")
    if n > MAX_PLAN_REQUESTS:
        raise ShardwiseError(
            f"--num-requests {shorten(n)} exceeds the limit of {MAX_PLAN_REQUESTS:,} (see Limits in the README): the planner "
            "runs hundreds of simulations of this size; the default 600 gives stable p90s"
        )
    adapters = data.get("adapters")
    if adapters is not None and model:
        adapters.packed_targets(m)  # --model overrides the job's model: it must have the adapted layers too
    spec = parse_speculative(speculative) if speculative else data.get("speculative")
    if spec is not None and wl.acceptance_for(spec.method) is None:
        raise ShardwiseError(f"speculative decoding ({spec.method}) needs the workload's acceptance_rate for it: add "
                             f"workload.acceptance_rate: {{{spec.method}: 0.7}} (your data's measured rate)")
    return PlanRequest(m, prec, float(target), slo_spec, parse_gpu_mix(gpu_mix), wl, n, base, adapters, (spec,) if spec else ())


def print_plan(result: ServePlanResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    from shardwise.console import make_console

    r = result.request
    console = make_console()
    slo = ", ".join(f"{k} {v:g}" for k, v in r.slo.model_dump().items() if v is not None and k != "attainment")
    console.print(f"[bold]{r.model.name}[/bold] ({r.precision.label}) at {r.rate:g} req/s, SLO {slo} for {r.slo.attainment:.0%} of requests; "
                  f"GPUs available: {', '.join(f'{n}x {g}' for g, n in r.gpus.items())}")
    if r.adapters is not None:
        a = r.adapters
        console.print(f"serving {a.count:,} LoRA adapters (rank {a.rank}, {a.popularity}) with {a.gpu_slots} GPU slots per replica")
    table = Table(title_justify="left")
    for col in ("", "deployment", "$/hour", "p90 TTFT ms", "p90 TPOT ms", "attainment", "$/M out tok"):
        table.add_column(col, justify="left" if col in ("", "deployment") else "right")

    def row(tag: str, c: Any) -> None:
        m = c.metrics
        if m:
            ttft, tpot, att, usd = (f"{m['ttft_ms']['p90']:.0f}", f"{m['tpot_ms']['p90']:.1f}", f"{m['slo_attainment']:.1%}",
                                    f"{m['cost_usd_per_mtok_output']:.3f}")
        else:  # not simulated as a whole: one instance's figures from the capacity search
            ttft = f"~{max(o.cap.p90_ttft_ms for o, _ in c.parts):.0f}"
            tpot = f"~{max(o.cap.p90_tpot_ms for o, _ in c.parts):.1f}"
            att, usd = "-", "-"
        table.add_row(tag, escape(c.describe()), f"{c.usd_per_hour:,.2f}", ttft, tpot, att, usd)

    if result.chosen is not None:
        table.title = "Cheapest deployment meeting the SLOs, then runners-up"
        row("chosen", result.chosen)
        for c in result.runners_up:
            row("", c)
    else:
        table.title = "No feasible deployment: the closest candidates"
        for c in result.closest:
            row("", c)
    console.print(table)
    if result.chosen is None:
        for c in result.closest:
            console.print(escape(f"  - {c.describe()}: {c.reason}"))
    if result.mix_note:
        console.print(escape(f"GPU mix: {result.mix_note}"))
    console.print(f"searched {len(result.options)} instance configs with {result.simulations} simulations in {result.seconds:.1f} s")


def gpu_mix_text(gpu: list[str] | None, gpus: str | None, gpu_mix: str | None) -> tuple[str, str | None]:
    """The GPU mix `serve plan` (CLI and web API alike) may use, from ``--gpu TYPE[,TYPE] --gpus N`` (N of each type) or
    ``--gpu-mix TYPE:N,TYPE:N``; returns (mix text, deprecation note or None). ``--gpus TYPE:N,...``, the
    old spelling of ``--gpu-mix``, still works with a note."""
    from shardwise.train.plan_inputs import split_list

    types = split_list(gpu)
    if gpus is not None and any(c.isalpha() for c in gpus):
        if types or gpu_mix:
            raise ShardwiseError(f"--gpus takes a number of GPUs, got {gpus!r}; write --gpu TYPE --gpus N or --gpu-mix TYPE:N,...")
        return gpus, f"--gpus {gpus} is the old spelling of --gpu-mix {gpus}; it will be removed"
    if gpu_mix is not None:
        if types or gpus is not None:
            raise ShardwiseError("give either --gpu-mix TYPE:N,... or --gpu TYPE --gpus N, not both")
        return gpu_mix, None
    if gpus is not None and not types:
        raise ShardwiseError(f"--gpus {gpus} needs --gpu TYPE (or use --gpu-mix TYPE:N,...)")
    if not types:
        return DEFAULT_GPU_MIX, None
    try:
        count = int(gpus) if gpus is not None else DEFAULT_GPUS_PER_TYPE
    except ValueError:
        raise ShardwiseError(f"--gpus takes a number of GPUs, got {gpus!r}") from None
    if count <= 0:
        raise ShardwiseError(f"--gpus must be positive, got {count}")
    return ",".join(f"{t}:{count}" for t in types), None
