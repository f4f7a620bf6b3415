"""Serve job files: the `shardwise serve simulate JOB` contract (keep these names; add, don't rename).

:class:`ServeJobSpec` is the file; its blocks are :class:`DeploymentSpec` (colocated replicas, a
prefill/decode split, or pools of :class:`PoolSpec` serving :class:`LengthClass` es), :class:`EngineSpec`,
:class:`~shardwise.serve.workload.WorkloadSpec` and :class:`SLOSpec`. The models describe every field;
the tables in docs/serving.md are generated from them (:mod:`shardwise.job_docs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_BLOCK_SIZE, MAX_NUM_SEQS, MAX_SEQUENCE_TOKENS, MAX_SERVE_ENGINES
from shardwise.serve import schedulers as _schedulers
from shardwise.serve.adapters import AdapterSpec
from shardwise.serve.precision import Precision, PrecisionSpec
from shardwise.serve.schedulers import SGLANG_OVERLAP, VLLM_ASYNC_DEFAULT, VLLM_V1_DEFAULT, VLLM_V1_ONLY  # noqa: F401 - kept importable here
from shardwise.serve.workload import SPEC_METHODS, WorkloadSpec  # noqa: F401 - SPEC_METHODS kept importable here
from shardwise.specs._loading import parse_block, read_document
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model

#: The scheduler policies a job may name (docs/serving.md), registered by name in
#: :mod:`shardwise.serve.schedulers`: vLLM's V1 engine (current), SGLang (0.4+ with its overlap scheduler and
#: radix cache; older releases replay their prefill-first scheduler), and vLLM's V0 engine, kept to replay
#: benchmarks of vLLM before 0.11.
SCHEDULERS = tuple(_schedulers.SCHEDULERS)


def _release(version: str) -> tuple[str, tuple[int, ...]]:
    """``"vllm-0.6.0"`` -> ("vllm", (0, 6, 0)); a bare number is a vLLM version."""
    name, _, number = version.strip().lower().rpartition("-")
    try:
        return name or "vllm", tuple(int(x) for x in number.lstrip("v").split("."))
    except ValueError:
        raise ValueError(f"version {version!r} is not ENGINE-X.Y.Z (e.g. vllm-0.6.0, sglang-0.3.0)") from None


class SpeculativeSpec(BaseModel):
    """Speculative decoding (vLLM --speculative-config, SGLang --speculative-algorithm): a cheap proposer
    drafts `num_tokens` tokens, the model verifies them in one forward pass (:mod:`shardwise.serve.speculative`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    method: Literal["draft", "eagle", "eagle3", "mtp", "ngram"] = Field(
        description="draft (a small model), eagle / eagle3 (a one-layer head on the model's features), mtp (the "
                    "model's multi-token-prediction layer, DeepSeek-V3), ngram (prompt lookup, no GPU work)")
    num_tokens: int = Field(default=3, gt=0, le=16, description="tokens drafted per step (vLLM num_speculative_tokens, "
                            "SGLang --speculative-num-steps)")
    draft_model: str | dict[str, Any] | None = Field(default=None, description="method draft: the draft model (a preset, "
                                                     "config.json path or mapping); eagle/eagle3/mtp: the head's Hugging Face "
                                                     "repository for the export (optional)")


class EngineSpec(BaseModel):
    """Engine knobs, named as vLLM's engine arguments. Current vLLM (V1) behaviour unless ``scheduler``
    names another engine or ``version`` an older release to replay."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    scheduler: Annotated[str, WithJsonSchema({"enum": list(SCHEDULERS), "type": "string"})] | None = Field(
        default=None, description="scheduler policy: vllm-v1 (current vLLM), sglang (SGLang 0.4+: overlap scheduler, "
                                  "radix cache), vllm-v0 (replay of vLLM before 0.11); default: from version, else vllm-v1")
    version: str | None = Field(default=None, description="engine release to replay (vllm-0.6.0, vllm-0.8.5, sglang-0.3.0); "
                                "default: the current release of the scheduler's engine")
    max_num_seqs: int = Field(default=256, gt=0, le=MAX_NUM_SEQS, description="most requests running at once")
    max_num_batched_tokens: int = Field(default=8192, gt=0, le=MAX_SEQUENCE_TOKENS, description="token budget of one iteration "
                                        "(decode tokens + prompt tokens)")
    chunked_prefill: bool = Field(default=True, description="true: mixed batches of decodes and prompt chunks "
                                  "(vLLM V1); false: prefill-first batches (vLLM V0, SGLang; needs version or scheduler)")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="share of GPU memory the engine "
                                          "takes; the KV cache gets what weights and activations leave")
    block_size: int = Field(default=16, gt=0, le=MAX_BLOCK_SIZE, description="tokens per KV-cache block")
    prefix_caching: bool | None = Field(default=None, description="reuse cached KV blocks of earlier prompts (LRU); default: "
                                        "on for sglang (radix cache), off otherwise")
    async_scheduling: bool | None = Field(default=None, description="schedule the next step while the GPU runs this one "
                                          "(vLLM --async-scheduling, SGLang's overlap scheduler); default: on for current "
                                          "vLLM (0.14+) and SGLang (0.4+)")
    num_scheduler_steps: int = Field(default=1, gt=0, le=1024, description="vLLM v0 multi-step: decode steps per scheduling round")
    max_model_len: int | None = Field(default=None, gt=1, le=2 * MAX_SEQUENCE_TOKENS, description="cap on prompt + output tokens; longer "
                                      "requests are truncated")
    speculative: SpeculativeSpec | None = Field(default=None, description="speculative decoding (draft model, EAGLE, MTP "
                                                "or n-gram); the acceptance rate comes from the workload")

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, name: str | None) -> str | None:
        if name is not None:
            _schedulers.scheduler(name)  # an unknown name lists the known ones
        return name

    @model_validator(mode="after")
    def _check(self) -> EngineSpec:
        if self.version is not None:
            engine, _ = _release(self.version)
            if self.scheduler is not None and engine != _schedulers.scheduler(self.scheduler).family:
                raise ValueError(f"scheduler {self.scheduler} and version {self.version} name different engines")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs ({self.max_num_seqs}), "
                "as vLLM requires; raise the token budget or lower max_num_seqs"
            )
        return self

    def family(self) -> str:
        """The engine this spec replays: "vllm" (the default, current vLLM) or "sglang"."""
        if self.version:
            return _release(self.version)[0]
        return _schedulers.scheduler(self.scheduler).family if self.scheduler else "vllm"

    def policy(self) -> str:
        """The scheduler policy: the named one, else vllm-v0 for vLLM before 0.8 (V1 became the default
        then), sglang for SGLang, vllm-v1 otherwise."""
        if self.scheduler is not None:
            return self.scheduler
        if self.version is None:
            return _schedulers.DEFAULT
        return _schedulers.for_version(*_release(self.version)).name

    def scheduler_policy(self) -> type[_schedulers.Scheduler]:
        """The :class:`~shardwise.serve.schedulers.Scheduler` class of :meth:`policy`."""
        return _schedulers.scheduler(self.policy())

    def release(self) -> tuple[int, ...]:
        """The replayed release number ((99,) for the current one)."""
        return _release(self.version)[1] if self.version else (99,)

    def async_output_processing(self) -> bool:
        """vLLM V0 from 0.6.0 on processes a step's outputs while the next step runs (PR #7049, on by
        default), so each token reaches the client one iteration after it is sampled."""
        return self.scheduler_policy().async_output(self.family(), self.release())

    def overlap_scheduling(self) -> bool:
        """The CPU work of a step overlaps the GPU's: vLLM V1's async scheduling (--async-scheduling, on by
        default from 0.14) and SGLang's overlap scheduler (on by default from 0.4)."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return self.scheduler_policy().overlaps(self.release())

    def caches_prefixes(self) -> bool:
        """Prefix caching in force: as given, else SGLang's radix cache (on by default; 0.3 benchmarks
        turned it off explicitly) and off for vLLM (the simulator's old default)."""
        if self.prefix_caching is not None:
            return self.prefix_caching
        return self.scheduler_policy().caches_prefixes()

    def check_current(self) -> None:
        """V0-only knobs need a scheduler that had them (current vLLM runs V1 only): the policy's check."""
        self.scheduler_policy().check(self)


class LengthClass(BaseModel):
    """Requests with input in [lo, hi] and output in [lo, hi] tokens (bounds inclusive)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    input: tuple[int, int] = Field(default=(1, 10**9), description="[lowest, highest] prompt tokens")
    output: tuple[int, int] = Field(default=(1, 10**9), description="[lowest, highest] output tokens")
    share: float = Field(default=1.0, gt=0, le=1, description="fraction of this class the pool takes")


class PoolSpec(BaseModel):
    """Identical replicas of one GPU type and parallel layout."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu: str = Field(description="GPU type: a name or alias from data/gpus.yaml")
    tp: int = Field(default=1, gt=0, description="tensor-parallel GPUs per replica")
    pp: int = Field(default=1, gt=0, description="pipeline stages per replica")
    replicas: int = Field(default=1, gt=0, le=MAX_SERVE_ENGINES, description="identical replicas (data parallel)")
    dp_attention: int = Field(default=1, gt=0, le=1024, description="MoE: data-parallel attention ranks per replica, "
                              "each tp GPUs, whose MoE layers run expert-parallel over tp x dp_attention GPUs")
    expert_parallel: bool = Field(default=False, description="MoE: experts spread whole over the replica's tp x "
                                  "dp_attention GPUs with all-to-all dispatch (vLLM --enable-expert-parallel, SGLang --ep-size)")
    expert_imbalance: float = Field(default=1.0, ge=1.0, le=100.0, description="MoE with expert_parallel: load of the "
                                    "busiest GPU over uniform routing's (1: uniform routing's own spread)")
    engine: dict[str, Any] | None = Field(default=None, description="engine knobs of this pool, over the "
                                          "deployment's `engine`")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="$ per GPU-hour; default: the GPU's "
                                                 "list price")
    classes: list[LengthClass] | None = Field(default=None, description="length classes this pool serves "
                                              "(default: every request)")


class DeploymentSpec(BaseModel):
    """Colocated replicas (gpu/tp/pp/replicas), a prefill/decode split, or several pools."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu: str | None = Field(default=None, description="colocated: GPU type (a name or alias from data/gpus.yaml)")
    tp: int = Field(default=1, gt=0, description="colocated: tensor-parallel GPUs per replica")
    pp: int = Field(default=1, gt=0, description="colocated: pipeline stages per replica")
    replicas: int = Field(default=1, gt=0, le=MAX_SERVE_ENGINES, description="colocated: identical replicas behind the router")
    dp_attention: int = Field(default=1, gt=0, le=1024, description="colocated MoE: data-parallel attention ranks per "
                              "replica, each tp GPUs, whose MoE layers run expert-parallel over tp x dp_attention GPUs")
    expert_parallel: bool = Field(default=False, description="colocated MoE: experts spread whole over the replica's "
                                  "tp x dp_attention GPUs with all-to-all dispatch (vLLM --enable-expert-parallel, SGLang --ep-size)")
    expert_imbalance: float = Field(default=1.0, ge=1.0, le=100.0, description="colocated MoE with expert_parallel: "
                                    "load of the busiest GPU over uniform routing's (1: uniform routing's own spread)")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="colocated: $ per GPU-hour; "
                                                 "default: the GPU's list price")
    engine: dict[str, Any] | None = Field(default=None, description="engine knobs shared by every pool")
    router: Literal["round_robin", "least_outstanding"] = Field(default="round_robin", description="how "
                                                                "requests are spread over the replicas")
    prefill: PoolSpec | None = Field(default=None, description="disaggregated: the pool that runs the prompts")
    decode: PoolSpec | None = Field(default=None, description="disaggregated: the pool that generates the tokens")
    kv_link_gbps: float = Field(default=400.0, gt=0, description="disaggregated: prefill->decode KV transfer "
                                "bandwidth per GPU pair, Gbit/s")
    pools: list[PoolSpec] | None = Field(default=None, description="pools serving length classes (a GPU mix)")
    adapters: AdapterSpec | None = Field(default=None, description="LoRA adapters served on the base model "
                                         "(every pool serves them; docs/serving.md)")

    @model_validator(mode="after")
    def _check(self) -> DeploymentSpec:
        kinds = [self.gpu is not None, self.prefill is not None or self.decode is not None, self.pools is not None]
        if sum(kinds) != 1:
            raise ValueError("give exactly one of: gpu (colocated replicas), prefill + decode (disaggregated), or pools")
        if kinds[1] and (self.prefill is None or self.decode is None):
            raise ValueError("a disaggregated deployment needs both prefill and decode pools")
        if kinds[2] and not self.pools:
            raise ValueError("pools must list at least one pool")
        return self

    @property
    def kind(self) -> str:
        if self.gpu is not None:
            return "colocated"
        return "disaggregated" if self.prefill is not None else "pools"


class SLOSpec(BaseModel):
    """Per-request latency targets, as `vllm bench serve --goodput ttft:X tpot:Y e2el:Z` (ms)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token, ms")
    tpot_ms: float | None = Field(default=None, gt=0, description="time per output token after the first, ms")
    e2e_ms: float | None = Field(default=None, gt=0, description="end-to-end latency, ms")
    attainment: float = Field(default=0.9, gt=0, le=1, description="fraction of requests that must meet every target (DistServe: 90%)")

    @model_validator(mode="after")
    def _check(self) -> SLOSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("an slo needs at least one of ttft_ms, tpot_ms, e2e_ms")
        return self


class ServeJobSpec(BaseModel):
    """A serve job file."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | dict[str, Any] = Field(description="a preset name, a path to a Hugging Face config.json, or "
                                        "the architecture as a mapping")
    precision: Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"] | PrecisionSpec = Field(
        default="bf16", description="weights and KV cache: bf16, fp16, fp8 (FP8 weights and KV cache), int8 / int4 "
                                    "(weight-only), fp4 (NVFP4), or {weights, kv_cache}")
    deployment: DeploymentSpec = Field(description="colocated replicas, a prefill/decode split, or pools")
    workload: WorkloadSpec = Field(description="arrivals and lengths of the requests")
    slo: SLOSpec | None = Field(default=None, description="latency targets (goodput and attainment)")
    name: str | None = Field(default=None, description="label in reports; default: the model's name")

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any) -> Any:
        if not isinstance(v, str | dict) or isinstance(v, str) and not v.strip():
            raise ValueError(f"give a preset name, a config.json path or a mapping, got {shorten(v)}")
        return v


@dataclass(frozen=True)
class ServeJob:
    """A parsed job: the model resolved; deployment, workload and SLO as validated specs."""

    model: ModelSpec
    precision: Precision
    deployment: DeploymentSpec
    workload: WorkloadSpec
    slo: SLOSpec | None
    name: str = "serve"
    base_dir: Path | None = None


def engine_spec(*layers: dict[str, Any] | None, where: str = "deployment.engine") -> EngineSpec:
    """Engine knobs from the shared block overlaid by a pool's own block."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    spec = parse_block(EngineSpec, merged, where)
    try:
        spec.check_current()
    except ValueError as exc:
        raise ShardwiseError(f"{where}: {exc}") from None
    return spec


def parse_serve_job(data: Any, base_dir: Path | None = None, where: str = "job") -> ServeJob:
    """Validate a job mapping (see the module docstring) into a :class:`ServeJob`."""
    if not isinstance(data, dict):
        raise ShardwiseError(f"{where}: a serve job must be a mapping with model, deployment and workload, got {type(data).__name__}")
    missing = [k for k in ("model", "deployment", "workload") if k not in data]
    if missing:
        raise ShardwiseError(f"{where}: missing {', '.join(missing)}; a serve job needs model, deployment and workload")
    spec = parse_block(ServeJobSpec, data, "")
    model = load_model(spec.model)
    dep = spec.deployment
    engine_spec(dep.engine)  # validate the shared engine block early
    if dep.adapters is not None:
        dep.adapters.packed_targets(model)  # the model has the targeted layers (and is dense)
    for name, pool in (("prefill", dep.prefill), ("decode", dep.decode)):
        if pool is not None:
            engine_spec(dep.engine, pool.engine, where=f"deployment.{name}.engine")
    return ServeJob(model, Precision.parse(spec.precision), dep, spec.workload, spec.slo, spec.name or model.name, base_dir)


def load_serve_job(path: str | Path) -> ServeJob:
    """Read a YAML/JSON serve job file."""
    p = Path(path)
    return parse_serve_job(read_document(p), base_dir=p.expanduser().resolve().parent)
