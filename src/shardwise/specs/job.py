"""Training job files (YAML or JSON; one job or a list): parsing and the checks that make a plan runnable.

A job has four sections (keep these names): ``model`` (a preset name, a path to a Hugging Face
config.json, or a :class:`~shardwise.specs.model.ModelSpec` mapping), ``cluster`` (:class:`ClusterSpec`),
``training`` (:class:`~shardwise.specs.training.TrainingSpec`) and ``parallel``
(:class:`~shardwise.specs.training.TrainPlan`). The models describe every field; the README's tables are
generated from them (:mod:`shardwise.job_docs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_CLUSTER_GPUS
from shardwise.specs._loading import format_validation_error, read_document
from shardwise.specs.hardware import (
    Cluster,
    GroupsSpec,
    HeteroCluster,
    HostSpec,
    NetworkSpec,
    make_cluster,
    make_hetero_cluster,
)
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.plan_check import check_plan
from shardwise.specs.reliability import CheckpointSpec, ReliabilitySpec, Resilience, StorageSpec
from shardwise.specs.training import TrainingSpec, TrainPlan

if TYPE_CHECKING:
    from shardwise.specs.hetero import HeteroJob


class ClusterSpec(BaseModel):
    """The `cluster` section: GPUs of one type in nodes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu: str = Field(description="GPU type: a name or alias from data/gpus.yaml (h100, a100-80gb, ...)")
    gpus: int = Field(gt=0, le=MAX_CLUSTER_GPUS, description="GPUs in the job (`train run`: processes)")
    gpus_per_node: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_GPUS, description="GPUs per node; default: the GPU's in data/gpus.yaml")
    inter_node_gbps: float | None = Field(default=None, gt=0, le=1e5, description="scale-out bandwidth per GPU, Gbit/s "
                                          "(older field; network.nic_gbps is per NIC); default: the GPU's in data/gpus.yaml")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="$ per GPU-hour; default: the GPU's "
                                                 "list price in data/gpus.yaml")
    power_limit_w: float | None = Field(default=None, gt=0, le=1e5, description="enforced power limit per GPU, W "
                                        "(below the board power: lower peak throughput)")
    network: NetworkSpec | None = Field(default=None, description="what differs from the GPU's catalog network")
    memory_headroom: float | None = Field(default=None, ge=0, lt=1, description="share of GPU memory a plan must leave "
                                          "free to fit (allocator fragmentation, spikes); default 0.05")
    host: HostSpec | None = Field(default=None, description="memory tiers below HBM that differ from the GPU's "
                                  "catalog system: host link per GPU, host DRAM and NVMe per node (docs/offload.md)")
    reliability: ReliabilitySpec | None = Field(default=None, description="failure rates, restart and spares (docs/goodput.md)")
    storage: StorageSpec | None = Field(default=None, description="where checkpoints are written (docs/goodput.md)")


def cluster_from_mapping(data: dict[str, Any], where: str = "cluster") -> Cluster | HeteroCluster:
    """Build a cluster from a job file's `cluster` mapping: ClusterSpec's fields, or `groups` of nodes
    (GroupsSpec; one group gives the same Cluster as the flat form)."""
    if "groups" in data:
        return make_hetero_cluster(_build(GroupsSpec, data, where), where)
    c: ClusterSpec = _build(ClusterSpec, data, where)
    return make_cluster(c.gpu, c.gpus, c.gpus_per_node, c.inter_node_gbps, c.price_usd_per_gpu_hour, c.network, c.power_limit_w,
                        gpu_field=f"{where}.gpu", memory_headroom=c.memory_headroom, host=c.host)


@dataclass(frozen=True)
class TrainJob:
    """A fully resolved job: model, cluster, training spec and a checked plan (dp resolved)."""

    model: ModelSpec
    cluster: Cluster
    training: TrainingSpec
    plan: TrainPlan
    name: str = "job"
    resilience: Resilience = Resilience()  # failures, storage and checkpoints (docs/goodput.md)

    @property
    def microbatches(self) -> int:
        return self.training.global_batch // (self.plan.micro_batch * (self.plan.dp or 1))


def _section(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        raise ShardwiseError(f"{where}: missing '{key}' section")
    if not isinstance(value, dict):
        raise ShardwiseError(f"{where}.{key}: must be a mapping, got {type(value).__name__}")
    return value


def _training_section(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """The training section with the job's top-level `moe:` section folded in (TrainingSpec.moe)."""
    training = dict(_section(doc, "training", where))
    moe = doc.get("moe")
    if moe is not None:
        if "moe" in training:
            raise ShardwiseError(f"{where}: moe given twice (top level and training.moe); keep the top-level moe: section")
        if not isinstance(moe, dict):
            raise ShardwiseError(f"{where}.moe: must be a mapping (capacity_factor, imbalance, dispatcher), got {type(moe).__name__}")
        training["moe"] = moe
    return training


def _build(cls: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    try:
        return cls(**data)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, where)) from None


def job_from_mapping(doc: Any, where: str = "job", require_plan: bool = True) -> TrainJob | HeteroJob:
    """Build and check one job from its parsed mapping (a :class:`~shardwise.specs.hetero.HeteroJob`
    when the cluster has several groups)."""
    if not isinstance(doc, dict):
        raise ShardwiseError(f"{where}: a job must be a mapping with model, cluster, training, parallel")
    unknown = set(doc) - {"name", "model", "cluster", "training", "parallel", "moe", "checkpoint"}
    if unknown:
        raise ShardwiseError(f"{where}: unknown section(s) {', '.join(sorted(unknown))}; expected model, cluster, training, "
                             "parallel (and moe, checkpoint)")
    if "model" not in doc:
        raise ShardwiseError(f"{where}: missing 'model' (a preset name, a config.json path or a mapping)")
    model = load_model(doc["model"])
    cluster = cluster_from_mapping(_section(doc, "cluster", where), f"{where}.cluster" if where != "job" else "cluster")
    training = _build(TrainingSpec, _training_section(doc, where), "training")
    raw_plan = dict(_section(doc, "parallel", where)) if require_plan or doc.get("parallel") is not None else {}
    if isinstance(cluster, HeteroCluster):
        from shardwise.specs.hetero import hetero_job

        return hetero_job(model, cluster, training, raw_plan, str(doc.get("name", model.name)), require_plan)
    if raw_plan.get("dp") == "auto":
        raw_plan["dp"] = None
    plan = _build(TrainPlan, raw_plan, "parallel")
    if require_plan:
        plan = check_plan(model, cluster, training, plan)
    return TrainJob(model=model, cluster=cluster, training=training, plan=plan, name=str(doc.get("name", model.name)),
                    resilience=resilience_from_mapping(doc, where))


def resilience_from_mapping(doc: dict[str, Any], where: str = "job") -> Resilience:
    """The job's `cluster.reliability`, `cluster.storage` and `checkpoint` sections (cluster_from_mapping
    has already checked the first two)."""
    cluster = doc.get("cluster") or {}
    checkpoint = doc.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise ShardwiseError(f"{where}.checkpoint: must be a mapping (mode, every_steps, replicas, reshard), "
                             f"got {type(checkpoint).__name__}")
    return Resilience(ReliabilitySpec(**(cluster.get("reliability") or {})), StorageSpec(**(cluster.get("storage") or {})),
                      _build(CheckpointSpec, checkpoint or {}, "checkpoint"))


def jobs_or_errors(doc: Any, source: str = "job") -> list[TrainJob | HeteroJob | ShardwiseError]:
    """Build and check the jobs of a parsed document (one job mapping or a list of them); in a list, a job
    that cannot be built is its error in place, so the others still run. A single job raises."""
    docs = doc if isinstance(doc, list) else [doc]
    if not docs:
        raise ShardwiseError(f"{source}: the document holds an empty list; give at least one job")
    out: list[TrainJob | HeteroJob | ShardwiseError] = []
    for i, d in enumerate(docs):
        try:
            out.append(job_from_mapping(d, where=f"job[{i}]" if len(docs) > 1 else "job"))
        except ShardwiseError as exc:
            if len(docs) == 1:
                raise
            out.append(exc)
    return out


def jobs_from_document(doc: Any, source: str = "job") -> list[TrainJob | HeteroJob]:
    """Build and check the jobs of a parsed document: one job mapping or a list of them (the first bad
    job raises)."""
    jobs = jobs_or_errors(doc, source)
    for j in jobs:
        if isinstance(j, ShardwiseError):
            raise j
    return jobs  # type: ignore[return-value]


def load_jobs(path: str | Path) -> list[TrainJob | HeteroJob]:
    """Read a YAML/JSON file holding one job or a list of jobs (a HeteroJob where the cluster has groups)."""
    return jobs_from_document(read_document(path), str(path))
