"""Request bodies of the web API: their fields (pydantic models, also the OpenAPI schema), what a server
must not accept that the CLI does (paths to files on the server), and the bounds that keep one request
from taking the server down. Everything else is checked by the code the CLI runs, so a bad input gets
the CLI's one-line message."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardwise.engines.targets import choices_help
from shardwise.errors import ShardwiseError
from shardwise.specs._loading import format_validation_error
from shardwise.specs.hf_config import spec_from_hf_dict
from shardwise.specs.model_ref import load_model

# Bounds of the web API (the CLI has none: a user's own machine is theirs to tie up).
MAX_PIPELINE_CELLS = 1_000_000  # pipeline stages x micro-batches of one estimate
MAX_TIMELINE_CELLS = 50_000  # stages x micro-batches of a schedule whose timeline is sent back
MAX_TRACE_BYTES = 16 * 2**20
MAX_REQUESTS = 100_000  # requests of one serving simulation
MAX_RL_SAMPLES = 100_000  # responses generated in one RL iteration (prompts x responses per prompt)
# Keys that mark a Hugging Face config.json (a ModelSpec mapping uses layers/hidden/heads).
HF_KEYS = frozenset({"num_hidden_layers", "n_layer", "hidden_size", "n_embd", "model_type", "architectures"})

M = TypeVar("M", bound=BaseModel)


def validate(cls: type[M], body: Any) -> M:
    """Parse a request body into `cls`; a problem is one ShardwiseError line naming the field."""
    if not isinstance(body, dict):
        raise ShardwiseError(f"the request body must be a JSON object with the fields of {cls.__name__}, got {type(body).__name__}")
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, "").lstrip(".")) from None


def model_ref(value: Any, where: str = "model") -> Any:
    """A preset name, a ModelSpec mapping, or a pasted Hugging Face config.json (turned into a ModelSpec
    mapping); never a path on the server."""
    if isinstance(value, str):
        load_model(value, allow_paths=False)  # a preset, or the CLI's "unknown model" message
        return value
    if isinstance(value, dict) and HF_KEYS & set(value):
        return spec_from_hf_dict(value, Path("config.json")).model_dump()
    return value


def with_model(doc: Any) -> Any:
    """A job document whose `model` is checked by :func:`model_ref`."""
    if isinstance(doc, dict) and "model" in doc:
        return {**doc, "model": model_ref(doc["model"])}
    return doc


def pipeline_cells(pp: int, vpp: int, microbatches: int) -> int:
    return pp * vpp * microbatches


def check_cells(cells: int, limit: int, field: str) -> None:
    if cells > limit:
        raise ShardwiseError(f"{field}: {cells:,} pipeline stages x micro-batches; the web planner simulates at most "
                             f"{limit:,} (use fewer micro-batches, or the CLI for larger ones)")


@contextlib.contextmanager
def trace_file(text: str | None) -> Iterator[str | None]:
    """An uploaded CSV trace as a temporary file for the length of a request."""
    if text is None:
        yield None
        return
    if len(text.encode()) > MAX_TRACE_BYTES:
        raise ShardwiseError(f"trace_csv: {len(text.encode()):,} bytes; the web planner takes traces up to {MAX_TRACE_BYTES:,}")
    fd, path = tempfile.mkstemp(prefix="shardwise-trace-", suffix=".csv")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        yield path
    finally:
        os.unlink(path)


def serve_workload(block: Any, trace: str | None, where: str = "workload") -> Any:
    """A `workload:` block with the uploaded trace as its path; a path the request names is refused."""
    if block is None and trace is None:
        return None
    block = dict(block) if isinstance(block, dict) else ({} if block is None else block)
    if not isinstance(block, dict):
        return block  # the CLI's parser names the problem
    if isinstance(block.get("num_requests"), int) and block["num_requests"] > MAX_REQUESTS:
        raise ShardwiseError(f"{where}.num_requests: {block['num_requests']:,}; the web planner simulates at most {MAX_REQUESTS:,} requests")
    if block.get("path") is not None:
        raise ShardwiseError(f"{where}.path: the web API reads no file on the server; upload the trace as trace_csv")
    if trace is not None:
        block.setdefault("arrival", "trace")
        block["path"] = trace
    return block


# --- request bodies (validated here; job documents are validated by the CLI's parsers) -------------------

ModelRef = str | dict[str, Any]
Times = float | list[float] | str


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainPlanBody(_Body):
    """`train plan`: a job document, or the options (the CLI's flags, with underscores)."""

    job: dict[str, Any] | None = Field(default=None, description="a job document whose `parallel` may be partly or wholly left out (replaces model, gpu, gpus, seq_len, global_batch)")
    model: ModelRef | None = Field(default=None, description="preset name, ModelSpec mapping or a pasted config.json")
    gpu: str | list[str] | None = Field(default=None, description="GPU type(s): a list or comma-separated, to compare types")
    gpus: int | None = Field(default=None, description="number of GPUs; left out, the smallest count of each GPU type "
                             "that fits (with days: that trains tokens in time)")
    seq_len: int | None = None
    global_batch: int | None = Field(default=None, description="sequences per optimizer step")
    days: float | None = Field(default=None, gt=0, description="deadline in days (without gpus, with tokens)")
    max_gpus: int = Field(default=1024, ge=1, le=65536, description="largest count tried when sizing the cluster")
    objective: str = Field(default="throughput", description="throughput | cost | memory")
    max_memory_gib: float | None = Field(default=None, description="reject plans above this peak per GPU")
    schedules: str | list[str] | None = Field(default=None, description="schedules to search (default: all)")
    top: int = Field(default=5, ge=1, le=50, description="how many plans to return")
    tokens: float | None = Field(default=None, description="tokens to train: adds days and dollars")
    precision: str | None = Field(default=None, description="bf16 | fp16 | fp8 | fp4 | fp32; fp8 and fp4 search their "
                                  "scaling recipes (those the GPU runs)")
    fp8_recipes: str | list[str] | None = Field(
        default=None, description="recipes an fp8/fp4 search tries (a list or comma-separated): tensorwise, rowwise, "
        "blockwise, mxfp8, delayed; nvfp4, mxfp4. Default: all of the precision's")
    moe_dispatchers: str | list[str] | None = Field(
        default=None, description="MoE token dispatchers to try (a list or comma-separated): alltoall, allgather, deepep. "
        "Default: the job's")
    exact_budget: int = Field(default=128, ge=1, le=1024, description="most exact estimates per GPU type")


class TrainExportBody(_Body):
    """`train export`: a job document and the engine to launch it in."""

    job: dict[str, Any] = Field(description="a training job document (model, cluster, training, parallel)")
    to: str = Field(description=choices_help("training"))
    engine_version: str | None = Field(default=None, description="engine release to target (default: the pinned one)")
    format: str = Field(default="script", description="args | script | file")


class ScheduleSimulateBody(_Body):
    """`schedule simulate`: a named schedule (or an uploaded PyTorch CSV) and its stage times."""

    schedule: str = Field(default="1f1b", description="schedule name (GET /api/catalog lists them)")
    pp: int = Field(default=4, ge=1, le=256, description="pipeline ranks")
    microbatches: int = Field(default=8, ge=1, le=16384)
    vpp: int | None = Field(default=None, ge=1, le=64, description="stages per rank (interleaved/bfs; V schedules use 2)")
    f: Times = Field(default=1.0, description="forward time of a rank's slice, as schedule compare takes it: a number or "
                     "pp per-rank values (split over the rank's stages), or pp*vpp per-stage values")
    i: Times = Field(default=1.0, description="input-gradient (I) time of a rank's slice (as f)")
    w: Times = Field(default=1.0, description="weight-gradient (W) time of a rank's slice (as f)")
    comm: float = Field(default=0.0, description="time per cross-rank hop")
    mem_cap: float | None = Field(default=None, description="auto: per-rank activation cap in micro-batches")
    placement: Literal["loop", "v"] | None = Field(default=None, description="auto: loop or v (default: v with vpp 2, else loop)")
    w_retained: float = Field(default=1.0, description="fraction of a micro-batch's activations held from I to W")
    csv: str | None = Field(default=None, max_length=MAX_TRACE_BYTES, description="a schedule CSV in PyTorch's layout (replaces schedule, pp, microbatches, vpp)")


class ScheduleCompareBody(_Body):
    """`schedule compare`: every schedule (or a subset) on the same stage times."""

    pp: int = Field(default=4, ge=1, le=256)
    microbatches: int = Field(default=8, ge=1, le=16384)
    vpp: int = Field(default=2, ge=1, le=64, description="stages per rank for interleaved and bfs")
    f: Times = Field(default=1.0, description="forward time of a rank's slice (number or per-rank list)")
    i: Times = 1.0
    w: Times = 1.0
    comm: float = 0.0
    mem_cap: float | None = None
    w_retained: float = 1.0
    schedules: str | list[str] | None = Field(default=None, description="a subset (default: all)")


class ServeSimulateBody(_Body):
    """`serve simulate`: a serve job document, and an uploaded trace for `workload.arrival: trace`."""

    model: ModelRef
    precision: str | dict[str, Any] = "bf16"
    deployment: dict[str, Any]
    workload: dict[str, Any]
    slo: dict[str, Any] | None = None
    name: str | None = None
    trace_csv: str | None = Field(default=None, description="CSV trace (Azure layout: TIMESTAMP,ContextTokens,GeneratedTokens)")


class ServePlanBody(_Body):
    """`serve plan`: options (the CLI's flags, with underscores) and/or a job document."""

    job: dict[str, Any] | None = Field(default=None, description="model, precision, workload, slo (its deployment is ignored)")
    model: ModelRef | None = None
    rate: float | None = Field(default=None, description="target request rate (req/s)")
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    attainment: float | None = Field(default=None, description="fraction of requests that must meet the SLOs (default 0.9)")
    gpu: list[str] | str | None = Field(default=None, description="GPU types the deployment may use (the CLI's --gpu; "
                                        "a list or comma-separated)")
    gpus: int | str | None = Field(default=None, description="GPUs available of each `gpu` type (the CLI's --gpus; default 8); "
                                   "TYPE:N,... is the old spelling of gpu_mix, accepted with a note")
    gpu_mix: str | None = Field(default=None, description="GPU types with the count available of each, e.g. "
                                "h100:8,a100-80gb:16 (the CLI's --gpu-mix; default h100:8,a100-80gb:8)")
    workload: dict[str, Any] | None = Field(default=None, description="a `workload:` block")
    trace_csv: str | None = Field(default=None, description="CSV trace (Azure layout); replaces the workload's arrivals and lengths")
    precision: str | None = None
    disaggregation: bool = True
    mix: bool = True
    num_requests: int | None = Field(default=None, le=20000, description="requests per candidate simulation (default 600)")



class RLPlanBody(_Body):
    """`rl plan`: an RL job document and the CLI's options (with underscores)."""

    job: dict[str, Any] = Field(description="an RL job document (policy, cluster, algorithm, rollout, ...); its placement, "
                                "rollout tp/pp and parallel are searched")
    top: int = Field(default=5, ge=1, le=50, description="candidates shown")
    max_staleness: int | None = Field(default=None, description="policy versions a response may lag (default: the job's "
                                      "algorithm.max_staleness)")


RL_MODEL_FIELDS = ("policy", "reference", "critic")


def rl_document(doc: Any, where: str = "") -> Any:
    """An RL job document whose models are checked by :func:`model_ref` (never a path on the server), with the
    CLI's messages (the job's own fields are checked first, as the CLI does), and within the web's bounds."""
    from shardwise.rl.spec import RLJobSpec
    from shardwise.serve.config import parse_block

    if not isinstance(doc, dict) or any(k not in doc for k in ("policy", "cluster")):
        return doc  # the CLI's parser names the problem
    spec = parse_block(RLJobSpec, doc, where)
    out = dict(doc)
    for key in RL_MODEL_FIELDS:
        if isinstance(out.get(key), str | dict):
            try:
                out[key] = model_ref(out[key])
            except ShardwiseError as exc:
                raise ShardwiseError(f"{where}{key}: {exc}") from None
    reward = out.get("reward")
    if isinstance(reward, dict) and isinstance(reward.get("model"), str | dict):
        try:
            out["reward"] = {**reward, "model": model_ref(reward["model"])}
        except ShardwiseError as exc:
            raise ShardwiseError(f"{where}reward.model: {exc}") from None
    samples = spec.algorithm.samples
    if samples > MAX_RL_SAMPLES:
        raise ShardwiseError(f"{where}algorithm: {samples:,} responses per iteration (prompts_per_step x responses_per_prompt); "
                             f"the web planner simulates at most {MAX_RL_SAMPLES:,} (use the CLI for larger ones)")
    return out
