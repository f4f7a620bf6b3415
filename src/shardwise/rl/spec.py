"""RL job files (`shardwise rl estimate|plan JOB`): one post-training job of GRPO or PPO.

A job has these sections (keep the names; add, don't rename): ``policy`` (the model being trained: a preset,
a config.json path or a mapping, as a training job's ``model``), optional ``reference``, ``reward`` and
``critic`` models, ``algorithm`` (:class:`AlgorithmSpec`), ``rollout`` (:class:`RolloutSpec`: the batch's
lengths and the generation engine, whose knobs are the serving model's :class:`~shardwise.serve.config.EngineSpec`),
``cluster`` (a training job's :class:`~shardwise.specs.job.ClusterSpec`), ``training`` (:class:`RLTrainingSpec`)
and ``parallel`` (a training job's :class:`~shardwise.specs.training.TrainPlan`, for every model trained or
run forward on the training GPUs), and ``placement`` (:class:`PlacementSpec`). The models describe every
field; docs/rl.md's tables are generated from them (:mod:`shardwise.job_docs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_CLUSTER_GPUS, MAX_SEQUENCE_TOKENS, MAX_SERVE_REQUESTS
from shardwise.serve.config import EngineSpec, engine_spec, parse_block
from shardwise.serve.lengths import LengthSpec
from shardwise.specs._loading import read_document
from shardwise.specs.hardware import Cluster
from shardwise.specs.job import cluster_from_mapping
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import Framework, TrainPlan

Mode = Literal["sync", "stream", "one_step_off", "async"]
PlacementKind = Literal["colocated", "split"]
Offload = Literal["auto", "none", "all"]


def _length(v: Any) -> Any:
    """A length given as a number of tokens or a distribution name (as a serve workload takes it)."""
    if isinstance(v, bool):
        raise ValueError("give a number of tokens or {dist: ...}")
    if isinstance(v, int | float):
        return {"dist": "fixed", "value": v}
    if isinstance(v, str):
        return {"dist": v}
    return v


class AlgorithmSpec(BaseModel):
    """What one RL iteration does: how many prompts and responses, how many optimizer steps, which passes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Literal["grpo", "ppo"] = Field(default="grpo", description="grpo (group-relative advantages, no critic) "
                                         "or ppo (a critic model trained beside the policy)")
    prompts_per_step: int = Field(default=512, gt=0, le=MAX_SERVE_REQUESTS, description="prompts per iteration")
    responses_per_prompt: int | None = Field(default=None, gt=0, le=4096, description="responses sampled per prompt "
                                             "(GRPO's group size); default 8 for grpo, 1 for ppo")
    mini_batches: int = Field(default=1, gt=0, le=4096, description="optimizer steps per epoch: the batch split into "
                              "this many mini-batches (verl's train_batch_size / ppo_mini_batch_size)")
    epochs: int = Field(default=1, gt=0, le=64, description="passes over the batch per iteration (PPO epochs)")
    recompute_logprobs: bool = Field(default=True, description="a forward pass of the policy on the training GPUs "
                                     "for the old log-probabilities (verl, OpenRLHF); false: the generator's are used")
    max_staleness: int = Field(default=1, ge=0, le=64, description="policy versions a response may lag behind the "
                               "trainer (0: on-policy only; one_step_off needs 1; async needs placement.staleness <= this)")

    @property
    def group_size(self) -> int:
        return self.responses_per_prompt or (8 if self.name == "grpo" else 1)

    @property
    def samples(self) -> int:
        return self.prompts_per_step * self.group_size


class RewardSpec(BaseModel):
    """The reward: a model run forward on the training GPUs, or a rule (a verifier) on the CPUs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | dict[str, Any] | None = Field(default=None, description="reward model (preset, config.json path or "
                                               "mapping); none: a rule-based reward")
    cpu_s_per_sample: float = Field(default=0.0, ge=0, le=3600, description="rule-based reward: CPU seconds to score "
                                    "one response (a math checker, a unit-test run)")
    cpu_workers: int = Field(default=64, gt=0, le=1_000_000, description="rule-based reward: responses scored at once")


class RolloutSpec(BaseModel):
    """The generation phase: the batch's lengths and the inference engine that generates it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    input_len: LengthSpec = Field(default_factory=lambda: LengthSpec(dist="fixed", value=512), description="prompt "
                                  "tokens: a number or a length mapping (lognormal with median, sigma, max)")
    output_len: LengthSpec = Field(default_factory=lambda: LengthSpec(dist="lognormal", median=1024, sigma=1.0, max=8192),
                                   description="response tokens: a heavy-tailed length mapping with the maximum "
                                   "response length as max")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="random seed of the lengths")
    tp: int = Field(default=1, gt=0, le=64, description="tensor-parallel GPUs per inference replica")
    pp: int = Field(default=1, gt=0, le=64, description="pipeline stages per inference replica")
    precision: Literal["bf16", "fp16", "fp8"] = Field(default="bf16", description="weights and KV cache of the engine")
    engine: dict[str, Any] | None = Field(default=None, description="engine knobs as a serve job's `deployment.engine` "
                                          "(vLLM names: max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, ...)")

    @model_validator(mode="before")
    @classmethod
    def _lengths(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {k: _length(v) if k in ("input_len", "output_len") else v for k, v in data.items()}
        return data


class RLTrainingSpec(BaseModel):
    """How the training GPUs run the policy (and critic) update and the forward passes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    precision: Literal["bf16", "fp16", "fp8"] = Field(default="bf16", description="GEMM precision of the training step")
    framework: Framework = Field(default="fsdp", description="software stack of the training step (data/stacks.yaml); "
                                 "verl and OpenRLHF run fsdp or deepspeed, NeMo-RL and slime megatron")
    compile: bool | None = Field(default=None, description="torch.compile; None = the stack's default")
    packing: bool = Field(default=True, description="run prompt+response sequences without padding in micro-batches "
                          "of a token budget, attention within each sequence (verl use_remove_padding and "
                          "use_dynamic_bsz, OpenRLHF packing_samples); false: one padded row each")
    pack_len: int | None = Field(default=None, gt=0, le=MAX_SEQUENCE_TOKENS, description="micro-batch token budget per "
                                 "data-parallel rank, times parallel.micro_batch (verl: ppo_max_token_len_per_gpu x the "
                                 "Ulysses degree); default: the longest prompt + response of the batch")


class PlacementSpec(BaseModel):
    """Where generation and training run, and how their phases overlap."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: PlacementKind = Field(default="colocated", description="colocated: every model time-shares every GPU "
                                "(verl's hybrid engine); split: a rollout pool and a training pool")
    rollout_gpus: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS, description="split: GPUs of the rollout "
                                     "pool (the rest train)")
    mode: Mode = Field(default="sync", description="sync (generate, then train), stream (on-policy: the training pool "
                       "starts on the responses that are done while the rest generate; StreamRL's stream generation, verl "
                       "fully_async with staleness 0), one_step_off (generate batch k+1 while training on batch k), async "
                       "(streaming generation, bounded staleness); all but sync need split")
    staleness: int = Field(default=2, gt=0, le=64, description="async: policy versions the generator may run ahead "
                           "(AReaL's eta)")
    offload: Offload = Field(default="auto", description="colocated: none (every model's states stay on the GPU), all "
                             "(only the running phase's model is on the GPU; the rest wait in host memory) or auto "
                             "(none when it fits)")

    @model_validator(mode="after")
    def _check(self) -> PlacementSpec:
        if self.kind == "split" and self.rollout_gpus is None:
            raise ValueError("a split placement needs rollout_gpus (the rest of the cluster trains)")
        if self.kind == "colocated" and self.rollout_gpus is not None:
            raise ValueError("rollout_gpus is for kind: split; a colocated job generates on every GPU")
        if self.kind == "colocated" and self.mode != "sync":
            raise ValueError(f"mode {self.mode} overlaps generation with training, which colocated GPUs cannot "
                             "(they time-share); use kind: split, or mode: sync")
        return self


class RLJobSpec(BaseModel):
    """An RL job file."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str | None = Field(default=None, description="label in reports; default: the policy's name")
    policy: str | dict[str, Any] = Field(description="the model trained: a preset, a config.json path or a mapping")
    reference: bool | str | dict[str, Any] | None = Field(default=None, description="reference model for the KL term: "
                                                          "true (a frozen copy of the policy), a model, or false; "
                                                          "default true")
    reward: RewardSpec = Field(default_factory=RewardSpec, description="reward model or rule")
    critic: bool | str | dict[str, Any] | None = Field(default=None, description="ppo: the value model (true: the "
                                                       "policy's architecture); default true for ppo, none for grpo")
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, description="GRPO or PPO and the batch")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="lengths and the generation engine")
    cluster: dict[str, Any] = Field(description="the GPUs, as a training job's cluster")
    training: RLTrainingSpec = Field(default_factory=RLTrainingSpec, description="the training step's stack")
    parallel: dict[str, Any] | None = Field(default=None, description="layout of the training GPUs, as a training "
                                            "job's parallel (dp: auto); default fsdp: zero 3 over every training GPU")
    placement: PlacementSpec = Field(default_factory=PlacementSpec, description="colocated or split, and the mode")


@dataclass(frozen=True)
class RLJob:
    """A parsed RL job: models resolved, every block validated."""

    name: str
    policy: ModelSpec
    reference: ModelSpec | None
    reward: ModelSpec | None
    critic: ModelSpec | None
    spec: RLJobSpec
    cluster: Cluster
    plan: TrainPlan
    engine: EngineSpec

    @property
    def algorithm(self) -> AlgorithmSpec:
        return self.spec.algorithm

    @property
    def rollout(self) -> RolloutSpec:
        return self.spec.rollout

    @property
    def training(self) -> RLTrainingSpec:
        return self.spec.training

    @property
    def placement(self) -> PlacementSpec:
        return self.spec.placement

    def with_placement(self, placement: PlacementSpec, plan: TrainPlan | None = None, tp: int | None = None,
                       offload: Offload | None = None) -> RLJob:
        """The same job with another placement, training layout or rollout TP (the planner's candidates)."""
        spec = self.spec.model_copy(update={
            "placement": placement if offload is None else placement.model_copy(update={"offload": offload}),
            "rollout": self.rollout if tp is None else self.rollout.model_copy(update={"tp": tp}),
        })
        return RLJob(self.name, self.policy, self.reference, self.reward, self.critic, spec, self.cluster,
                     plan or self.plan, self.engine)


DEFAULT_PARALLEL = {"zero": 3, "recompute": "full"}  # verl/OpenRLHF FSDP: full sharding, gradient checkpointing


def _model_or_copy(value: Any, policy: ModelSpec, where: str, default: bool) -> ModelSpec | None:
    """A model field: true (the policy's architecture), false/None (none unless `default`), or a model."""
    if value is None:
        value = default
    if value is False:
        return None
    if value is True:
        return policy
    try:
        return load_model(value)
    except ShardwiseError as exc:
        raise ShardwiseError(f"{where}: {exc}") from None


def parse_rl_job(data: Any, base_dir: Path | None = None) -> RLJob:
    """Validate an RL job mapping into an :class:`RLJob` (one ShardwiseError naming the field otherwise)."""
    if not isinstance(data, dict):
        raise ShardwiseError(f"an RL job must be a mapping with policy and cluster, got {type(data).__name__}")
    missing = [k for k in ("policy", "cluster") if k not in data]
    if missing:
        raise ShardwiseError(f"RL job: missing {', '.join(missing)}; an RL job needs at least policy and cluster")
    spec = parse_block(RLJobSpec, data, "")
    try:
        policy = load_model(spec.policy)
    except ShardwiseError as exc:
        raise ShardwiseError(f"policy: {exc}") from None
    if policy.is_moe:
        raise ShardwiseError(f"policy: {policy.name} is a mixture-of-experts model; `rl` models dense policies for now")
    reference = _model_or_copy(spec.reference, policy, "reference", True)
    reward = _model_or_copy(spec.reward.model, policy, "reward.model", False) if spec.reward.model is not None else None
    critic = _model_or_copy(spec.critic, policy, "critic", spec.algorithm.name == "ppo")
    if critic is not None and spec.algorithm.name == "grpo":
        raise ShardwiseError("critic: GRPO has no value model (its advantages are group-relative); drop critic or use algorithm.name: ppo")
    cluster = cluster_from_mapping(data["cluster"] if isinstance(data["cluster"], dict) else {}, "cluster")
    if not isinstance(cluster, Cluster):
        raise ShardwiseError("cluster: `rl` takes one GPU type (cluster.gpu, cluster.gpus); groups are not modelled for RL")
    raw = dict(DEFAULT_PARALLEL) if spec.parallel is None else dict(spec.parallel)
    if raw.get("dp") == "auto":
        raw["dp"] = None
    plan = parse_block(TrainPlan, raw, "parallel")
    engine = engine_spec(spec.rollout.engine, where="rollout.engine")
    p = spec.placement
    if p.kind == "split" and p.rollout_gpus is not None and p.rollout_gpus >= cluster.num_gpus:
        raise ShardwiseError(f"placement.rollout_gpus: {p.rollout_gpus} leaves no training GPUs of the cluster's "
                             f"{cluster.num_gpus}; give fewer")
    if p.mode == "one_step_off" and spec.algorithm.max_staleness < 1:
        raise ShardwiseError("placement.mode: one_step_off trains on responses one policy version old, but "
                             "algorithm.max_staleness is 0; raise it to 1 or use mode: sync")
    if p.mode == "async" and p.staleness > spec.algorithm.max_staleness:
        raise ShardwiseError(f"placement.staleness: {p.staleness} exceeds algorithm.max_staleness "
                             f"{spec.algorithm.max_staleness}; lower it or raise the limit")
    for which, length in (("input_len", spec.rollout.input_len), ("output_len", spec.rollout.output_len)):
        if length.dist in ("sharegpt", "trace"):
            raise ShardwiseError(f"rollout.{which}: {{dist: {length.dist}}} is a serving workload; give a number, "
                                 "uniform or lognormal (with max) lengths")
    name = spec.name or f"{spec.algorithm.name} {policy.name}"
    return RLJob(name, policy, reference, reward, critic, spec, cluster, plan, engine)


def with_max_staleness(job: RLJob, max_staleness: int) -> RLJob:
    """The job with another algorithm.max_staleness (`rl plan --max-staleness`)."""
    algo = parse_block(AlgorithmSpec, {**job.algorithm.model_dump(), "max_staleness": max_staleness}, "options")
    return RLJob(job.name, job.policy, job.reference, job.reward, job.critic, job.spec.model_copy(update={"algorithm": algo}),
                 job.cluster, job.plan, job.engine)


def load_rl_job(path: str | Path) -> RLJob:
    """Read a YAML/JSON RL job file."""
    p = Path(path)
    doc = read_document(p)
    if isinstance(doc, list):
        raise ShardwiseError(f"{shorten(str(p))}: holds a list; an RL job file holds one job")
    return parse_rl_job(doc, base_dir=p.expanduser().resolve().parent)
