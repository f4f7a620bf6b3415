"""Training job files (YAML or JSON; one job or a list): parsing and the checks that make a plan runnable.

A job has four sections (keep these names): ``model`` (a preset name, a path to a Hugging Face
config.json, or a :class:`~shardwise.specs.model.ModelSpec` mapping), ``cluster`` (:class:`ClusterSpec`),
``training`` (:class:`~shardwise.specs.training.TrainingSpec`) and ``parallel``
(:class:`~shardwise.specs.training.TrainPlan`). The models describe every field; the README's tables are
generated from them (:mod:`shardwise.job_docs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_CLUSTER_GPUS, MAX_PIPELINE_STAGES
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
from shardwise.specs.model import ModelSpec, load_model
from shardwise.specs.reliability import CheckpointSpec, ReliabilitySpec, Resilience, StorageSpec
from shardwise.specs.training import RECIPE_ARCHS, TrainingSpec, TrainPlan

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


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and d <= 64)


def check_plan(model: ModelSpec, cluster: Cluster, training: TrainingSpec, plan: TrainPlan, check_batch: bool = True) -> TrainPlan:
    """Resolve dp and check that the plan can run; raise ShardwiseError naming the field otherwise.
    `check_batch=False` leaves the global batch to the caller (an uneven split over replicas)."""
    p = plan
    if model.heads % p.tp:
        raise ShardwiseError(f"parallel.tp: {p.tp} does not divide the {model.heads} attention heads of {model.name}; use one of {_divisors(model.heads)}")
    kv = model.n_kv_heads
    if kv % p.tp and p.tp % kv:
        raise ShardwiseError(f"parallel.tp: {p.tp} neither divides nor is a multiple of the {kv} KV heads of {model.name}")
    denom = p.tp * p.pp * p.cp
    if cluster.num_gpus % denom:
        raise ShardwiseError(f"cluster.gpus: {cluster.num_gpus} is not divisible by tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {denom}")
    dp = cluster.num_gpus // denom
    if p.dp is not None and p.dp != dp:
        raise ShardwiseError(
            f"parallel.dp: tp*pp*cp*dp = {denom * p.dp} but the cluster has {cluster.num_gpus} GPUs; set dp: auto or dp: {dp}"
        )
    if p.pp * p.vpp > MAX_PIPELINE_STAGES:
        raise ShardwiseError(
            f"parallel.vpp: pp x vpp = {p.pp * p.vpp:,} virtual stages exceed the limit of {MAX_PIPELINE_STAGES:,} "
            "(see Limits in the README); use fewer pipeline ranks or virtual stages per rank"
        )
    if model.layers + 2 < p.pp * p.vpp:
        raise ShardwiseError(
            f"parallel.pp: {p.pp} stages x vpp {p.vpp} = {p.pp * p.vpp} virtual stages for {model.layers} layers; "
            "at most layers + 2 (the first and last stage may hold only the embedding and the LM head)"
        )
    if p.vpp > 1 and p.pp == 1:
        raise ShardwiseError("parallel.vpp: virtual stages need pp > 1; set vpp: 1")
    if training.seq_len % p.cp:
        raise ShardwiseError(f"parallel.cp: {p.cp} does not divide seq_len {training.seq_len}")
    p = _check_experts(model, p, dp)
    p = _check_context(model, cluster, training, p)
    _check_precision(cluster, training)
    if p.dp_shard is not None and (dp * p.cp) % p.dp_shard:
        raise ShardwiseError(
            f"parallel.dp_shard: {p.dp_shard} does not divide the data-parallel group dp*cp = {dp * p.cp}; "
            f"use one of {_divisors(dp * p.cp)} (or leave it out to shard over the whole group)"
        )
    if p.reshard_after_forward is not None and p.zero != 3:
        raise ShardwiseError(f"parallel.reshard_after_forward: only ZeRO-3 / FSDP gathers parameters (zero is {p.zero}); "
                             "set zero: 3 or leave it out")
    if p.offload != "none" and p.zero == 0:
        raise ShardwiseError("parallel.offload: offloading model states needs ZeRO (zero: 1, 2 or 3)")
    if p.offload_device == "nvme":
        if p.offload == "none":
            raise ShardwiseError("parallel.offload_device: nvme names where offloaded states live; set offload: optimizer "
                                 "or optimizer+params, or leave offload_device out")
        if p.zero != 3:
            raise ShardwiseError("parallel.offload_device: NVMe offload (ZeRO-Infinity) needs zero: 3 "
                                 f"(zero is {p.zero}); set zero: 3 or offload_device: cpu")
        host = cluster.host
        missing = [k for k in ("nvme_tb", "nvme_read_gbyte_s", "nvme_write_gbyte_s") if not getattr(host, k)]
        if missing:
            raise ShardwiseError(f"parallel.offload_device: the catalog has no NVMe {', '.join(missing)} for "
                                 f"{cluster.gpu.name} nodes; set cluster.host.{missing[0]} (and the others: docs/offload.md)")
    if training.adapter is not None:
        training.adapter.shapes(model)  # adapters need a dense, standard-attention model with those layers
        if p.offload == "optimizer+params":
            raise ShardwiseError("parallel.offload: an adapter fine-tune keeps its frozen base on the GPU; use offload: "
                                 "optimizer (or training.lora.paged_optimizer) for the adapters' optimizer states")
    per_step = p.micro_batch * dp
    if check_batch and training.global_batch % per_step:
        raise ShardwiseError(
            f"training.global_batch: {training.global_batch} is not a multiple of micro_batch*dp = {p.micro_batch}*{dp} = {per_step}"
        )
    return p.model_copy(update={"dp": dp})


def _check_experts(model: ModelSpec, p: TrainPlan, dp: int) -> TrainPlan:
    """Expert parallelism folded over the tp*cp*dp ranks of a pipeline stage (Liu et al. 2025, MoE Parallel
    Folding Sec. 3: the expert layers re-split those ranks as etp x ep x expert-dp)."""
    if not model.is_moe:
        if p.ep > 1:
            raise ShardwiseError(f"parallel.ep: {p.ep} > 1 but {model.name} is dense; use ep: 1")
        if p.etp is not None and p.etp != p.tp:
            raise ShardwiseError(f"parallel.etp: {model.name} is dense (no experts to split); leave etp out")
        return p
    if model.experts % p.ep:
        raise ShardwiseError(f"parallel.ep: {p.ep} does not divide the {model.experts} experts of {model.name}; "
                             f"use one of {_divisors(model.experts)}")
    ranks, etp = p.tp * p.cp * dp, p.expert_tp
    if ranks % (p.ep * etp):
        raise ShardwiseError(
            f"parallel.ep: ep*etp = {p.ep}*{etp} must divide the tp*cp*dp = {ranks} ranks of a pipeline stage "
            f"(the expert layers re-split them as etp x ep x expert-dp); use one of ep: {_divisors(ranks // etp)}")
    return p


def _check_context(model: ModelSpec, cluster: Cluster, training: TrainingSpec, p: TrainPlan) -> TrainPlan:
    """cp_comm rules: Ulysses all-to-all splits the heads of each TP rank over its ranks (Jacobs et al. 2023,
    DeepSpeed-Ulysses Sec. 3), so it needs heads/tp divisible by them."""
    if p.ulysses is not None and p.cp_comm != "a2a+p2p":
        raise ShardwiseError(f"parallel.ulysses: only used with cp_comm a2a+p2p (cp_comm is {p.cp_comm}); leave it out")
    if p.cp == 1:
        return p
    if p.cp_comm == "a2a+p2p" and p.ulysses is None:
        in_domain = cluster.tier_for(p.cp, p.tp).per_domain
        p = p.model_copy(update={"ulysses": math.gcd(p.cp, in_domain)})
    a2a = p.cp_a2a
    if p.cp_comm == "a2a+p2p" and p.cp % a2a:
        raise ShardwiseError(f"parallel.ulysses: {a2a} does not divide cp {p.cp}")
    heads = model.heads // p.tp
    if not a2a_splits_heads(heads, a2a):
        what = "cp" if p.cp_comm == "a2a" else "ulysses"
        raise ShardwiseError(f"parallel.cp_comm: {p.cp_comm} needs the {heads} attention heads per TP rank divisible by "
                             f"{what} = {a2a}; use cp_comm p2p or allgather, or a {what} dividing {heads}")
    return p


def a2a_splits_heads(heads_per_tp_rank, a2a_ranks):
    """Whether a Ulysses all-to-all over `a2a_ranks` ranks (TrainPlan.cp_a2a) can split the attention heads of a
    TP rank between them: each takes heads / a2a_ranks whole heads (Jacobs et al. 2023, DeepSpeed-Ulysses Sec. 3).
    Integers or numpy arrays (the planner checks every plan at once)."""
    return heads_per_tp_rank % a2a_ranks == 0


def _check_precision(cluster: Cluster, training: TrainingSpec) -> None:
    """The GPU must run the precision and its recipe (RECIPE_ARCHS)."""
    gpu = cluster.gpu
    if training.precision in ("fp8", "fp4") and training.precision not in gpu.tflops:
        raise ShardwiseError(f"training.precision: {gpu.name} has no {training.precision} tensor cores in the catalog; "
                             "use bf16")
    archs = RECIPE_ARCHS.get(training.fp8_recipe)
    if archs and gpu.arch not in archs:
        raise ShardwiseError(f"training.fp8_recipe: {training.fp8_recipe} needs a {' or '.join(sorted(archs))} GPU "
                             f"({gpu.name} is {gpu.arch}); use tensorwise, rowwise or delayed")


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
