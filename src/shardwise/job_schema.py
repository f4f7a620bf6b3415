"""JSON Schema of the job files, generated from the pydantic models that parse them.

`shardwise schema train|serve` prints them; ``schemas/*.schema.json`` holds the generated copies the
examples point editors at (``# yaml-language-server: $schema=...``, the YAML language server's
modeline), and a test keeps the copies equal to what this module generates.

Each section is the model the parser validates it with (:class:`ModelSpec`, :class:`ClusterSpec`,
:class:`TrainingSpec`, :class:`TrainPlan`; on a heterogeneous cluster :class:`GroupsSpec` and
:class:`HeteroLayoutSpec`; :class:`ServeJobSpec` and its blocks). The few fields that the
parser accepts in more shapes than their model's type are widened here to what the parser takes: a
model given by name or path, ``dp: auto``, a length given as a number of tokens or a distribution name,
and the engine blocks (kept as mappings by the parser, validated later as :class:`EngineSpec`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from shardwise.serve.config import DeploymentSpec, EngineSpec, PoolSpec, ServeJobSpec
from shardwise.serve.lengths import LengthSpec
from shardwise.serve.workload import WorkloadSpec
from shardwise.specs.hardware import GroupsSpec
from shardwise.specs.hetero import HeteroLayoutSpec
from shardwise.specs.job import ClusterSpec
from shardwise.specs.model import ModelSpec
from shardwise.specs.reliability import CheckpointSpec
from shardwise.specs.training import MoeSpec, TrainingSpec

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

ModelRef = Annotated[str | ModelSpec, Field(
    description="a preset name (shardwise.specs.model.preset_names()), a path to a Hugging Face config.json, "
                "a Hugging Face model id in the local cache (with huggingface_hub), or the architecture")]


class ParallelSection(HeteroLayoutSpec):
    """The `parallel:` section: a TrainPlan whose dp may be `auto`; on a cluster with groups also its
    layout over them (stage_groups or replicas)."""

    dp: Annotated[int, Field(gt=0)] | Literal["auto"] | None = Field(
        default=None, description="data-parallel degree; auto or left out: GPUs / (tp * pp * cp)")


class TrainJobFile(BaseModel):
    """One training job (`train estimate`, `train export`, `train run`; `train plan` searches what
    `parallel` leaves out)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    model: ModelRef
    cluster: ClusterSpec | GroupsSpec = Field(description="GPUs of one type (gpu, gpus), or groups of nodes that differ")
    training: TrainingSpec
    moe: MoeSpec | None = Field(default=None, description="MoE routing knobs (capacity factor or dropless imbalance, "
                                "dispatcher); the same as training.moe")
    parallel: ParallelSection | None = Field(
        default=None, description="required by train estimate, export and run; train plan searches what is left out")
    checkpoint: CheckpointSpec | None = Field(default=None, description="how the job saves its state (docs/goodput.md)")


Length = Annotated[int | Literal["fixed", "uniform", "sharegpt", "lognormal", "trace"] | LengthSpec, Field(
    description="tokens (a number), a distribution name, or {dist, value, min, max, median, sigma}")]


class WorkloadSection(WorkloadSpec):
    """The `workload:` block."""
    input_len: Length = "sharegpt"
    output_len: Length = "sharegpt"


class PoolSection(PoolSpec):
    """Identical replicas of one GPU type and parallel layout."""
    engine: EngineSpec | None = Field(default=None, description="overrides the deployment's engine knobs")


class DeploymentSection(DeploymentSpec):
    """Colocated replicas (gpu/tp/pp/replicas), a prefill/decode split, or several pools."""
    engine: EngineSpec | None = None
    prefill: PoolSection | None = None
    decode: PoolSection | None = None
    pools: list[PoolSection] | None = None


class ServeJobFile(ServeJobSpec):
    """A serving job (`serve simulate`, `serve plan`, `serve export`)."""

    model: ModelRef
    deployment: DeploymentSection
    workload: WorkloadSection


class TrainJobs(RootModel[TrainJobFile | list[TrainJobFile]]):
    """A training job file: one job or a list of jobs."""


def _schema(root: type[BaseModel], title: str) -> dict[str, Any]:
    body = root.model_json_schema()
    return {"$schema": SCHEMA_DIALECT, "title": title, **{k: v for k, v in body.items() if k != "title"}}


def job_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a ``train``, ``serve`` or ``rl`` job file."""
    if kind == "train":
        return _schema(TrainJobs, "Shardwise training job file (one job or a list)")
    if kind == "serve":
        return _schema(ServeJobFile, "Shardwise serving job file")
    if kind == "rl":
        from shardwise.rl.spec import RLJobSpec

        return _schema(RLJobSpec, "Shardwise RL post-training job file")
    from shardwise.errors import ShardwiseError

    raise ShardwiseError(f"schema: {kind!r} is not a job kind; use train or serve, or rl")


KINDS = ("train", "serve", "rl")
