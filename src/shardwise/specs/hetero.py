"""Heterogeneous layouts: how one plan is laid over the groups of a :class:`HeteroCluster`.

A job whose `cluster` has several `groups` takes in `parallel` the usual knobs (tp, cp, vpp, zero,
recompute, micro_batch, schedule, ...) and one of two layouts:

- **pipeline across groups** (`stage_groups`: the group of each pipeline rank, in pipeline order): dp
  identical replicas of a pipeline whose stages sit on different GPU types, with `layer_split` layers
  per pipeline rank, uneven so that faster or larger GPUs hold more (Holmes' cross-cluster pipeline
  with a speed-proportional partition: Yang et al. 2024, ICPP, Sec. 3; HexiScale's asymmetric
  pipeline partition: Yan et al. 2024, arXiv 2409.01143). Data-parallel groups stay inside a group.
- **data parallel across groups** (`replicas`: replicas per group): d_g replicas of the same
  (tp, pp, cp) pipeline in group g, each taking `batch_split[g]` micro-batches per step (more on
  faster GPUs), gradients reduced over every replica; ZeRO/FSDP states shared out by memory, apart
  from the batch (`state_split: memory`; Cephalo decides the compute share and the state share
  separately: Guo et al. 2025, ICS, arXiv 2411.01075, Sec. 3).

Tensor and context parallel groups stay inside one node of one GPU type: tp * cp divides the node size
of every group used (their collectives sit on the critical path of every layer). Expert parallelism,
offloading and hybrid sharding (dp_shard) are not modelled across groups and are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import HeteroCluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.plan_check import check_plan
from shardwise.specs.training import TrainingSpec, TrainPlan


class HeteroLayoutFields(BaseModel):
    """What the `parallel` section adds on a cluster with groups: the layout over them."""

    stage_groups: list[str] | None = Field(
        default=None, description="pipeline across groups: the group of each pipeline rank, in pipeline order "
        "(pp = its length)")
    layer_split: list[int] | None = Field(
        default=None, description="transformer layers per pipeline rank; default: balanced by each rank's speed")
    replicas: dict[str, int] | None = Field(
        default=None, description="data parallel across groups: replicas of the pipeline per group (dp = their sum)")
    batch_split: dict[str, int] | None = Field(
        default=None, description="micro-batches per replica of each group; default: in proportion to speed")
    state_split: Literal["memory", "even"] = Field(
        default="memory", description="ZeRO/FSDP shares of the model states across groups: by free memory "
        "(Cephalo) or even")


class HeteroLayoutSpec(TrainPlan, HeteroLayoutFields):
    """The `parallel` section of a job on a heterogeneous cluster: a plan plus its layout over groups."""


@dataclass(frozen=True)
class HeteroLayout:
    """A checked heterogeneous layout. `plan` holds the shared knobs with pp and dp resolved (dp: all
    replicas); `batch_split` lists micro-batches per replica for each entry of `replicas`."""

    plan: TrainPlan
    kind: Literal["pipeline", "data"]
    stage_groups: tuple[str, ...] = ()
    layer_split: tuple[int, ...] | None = None
    replicas: tuple[tuple[str, int], ...] = ()
    batch_split: tuple[int, ...] | None = None
    state_split: str = "memory"

    def gpus_per_group(self) -> dict[str, int]:
        p = self.plan
        out: dict[str, int] = {}
        if self.kind == "pipeline":
            for g in self.stage_groups:
                out[g] = out.get(g, 0) + p.tp * p.cp * (p.dp or 1)
        else:
            for g, d in self.replicas:
                out[g] = d * p.tp * p.cp * p.pp
        return out

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_group().values())

    def to_dict(self) -> dict[str, Any]:
        """The `parallel` mapping that reproduces this layout."""
        d = self.plan.model_dump(exclude_defaults=True, exclude={"dp"} if self.kind == "data" else set())
        d.update(tp=self.plan.tp, pp=self.plan.pp, micro_batch=self.plan.micro_batch, schedule=self.plan.schedule)
        if self.kind == "pipeline":
            d["stage_groups"] = list(self.stage_groups)
            d["dp"] = self.plan.dp
            if self.layer_split is not None:
                d["layer_split"] = list(self.layer_split)
        else:
            d["replicas"] = dict(self.replicas)
            if self.batch_split is not None:
                d["batch_split"] = {g: m for (g, _), m in zip(self.replicas, self.batch_split, strict=True)}
        if self.state_split != "memory":
            d["state_split"] = self.state_split
        return d

    def label(self) -> str:
        p = self.plan
        head = f"tp{p.tp}" + (f" cp{p.cp}" if p.cp > 1 else "")
        if self.kind == "pipeline":
            runs, last = [], None
            for g in self.stage_groups:
                if g == last:
                    runs[-1][1] += 1
                else:
                    runs.append([g, 1])
                last = g
            stages = "+".join(f"{n}x{g}" for g, n in runs)
            split = "/".join(map(str, self.layer_split)) if self.layer_split else "balanced"
            body = f"pp[{stages}] layers {split} dp{p.dp}"
        else:
            reps = "+".join(f"{d}x{g}" for g, d in self.replicas)
            body = f"pp{p.pp} dp[{reps}]"
            if self.batch_split:
                body += " mbs " + "/".join(map(str, self.batch_split))
        extra = f" v{p.vpp}" if p.vpp > 1 else ""
        rc = f" rc={p.recompute}" if p.recompute != "none" else ""
        return f"{head} {body}{extra} z{p.zero} mb{p.micro_batch} {p.schedule}{rc}"


@dataclass(frozen=True)
class HeteroJob:
    """A job on a heterogeneous cluster; `layout` is None when `train plan` is to search it."""

    model: ModelSpec
    cluster: HeteroCluster
    training: TrainingSpec
    layout: HeteroLayout | None
    name: str = "job"


def one_gpu_type(job: Any, command: str) -> Any:
    """`job` itself when its cluster is of one GPU type; otherwise the error `command` reports (it does
    not take clusters with groups yet)."""
    if isinstance(job, HeteroJob):
        raise ShardwiseError(f"cluster.groups: {command} takes a cluster of one GPU type (gpu, gpus); "
                             "`train estimate`, `train plan` and `train run` take clusters with groups")
    return job


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ShardwiseError(msg)


def check_node_fit(cluster: HeteroCluster, groups: list[str], tp: int, cp: int) -> None:
    """Tensor and context parallel groups stay inside one node of one GPU type (module docstring)."""
    for name in groups:
        per_node = cluster.group(name).cluster.gpus_per_node
        _need(per_node % (tp * cp) == 0,
              f"parallel.tp: tp*cp = {tp}*{cp} = {tp * cp} does not divide the {per_node} GPUs per node of group "
              f"{name!r}: tensor and context parallel groups stay inside one node of one GPU type; use tp*cp "
              f"dividing {per_node}")


def check_layout(model: ModelSpec, cluster: HeteroCluster, training: TrainingSpec, spec: HeteroLayoutSpec) -> HeteroLayout:
    """Resolve and check a layout; raise ShardwiseError naming the field otherwise."""
    _need((spec.stage_groups is None) != (spec.replicas is None),
          "parallel: on a cluster with groups give stage_groups (pipeline stages across groups) or replicas "
          "(data-parallel replicas per group), exactly one of them")
    _need(spec.ep == 1, "parallel.ep: expert parallelism across GPU groups is not modelled; use ep: 1")
    _need(spec.offload == "none", "parallel.offload: offloading is not modelled on heterogeneous clusters; use offload: none")
    _need(spec.offload_activations == 0, "parallel.offload_activations: activation offload is not modelled on "
          "heterogeneous clusters; leave it out")
    _need(spec.dp_shard is None, "parallel.dp_shard: hybrid sharding is not modelled across groups; leave it out "
          "(state_split chooses how the ZeRO shards are shared)")
    base = spec.model_dump(include=set(TrainPlan.model_fields))
    if spec.stage_groups is not None:
        groups = list(spec.stage_groups)
        _need(len(groups) > 0, "parallel.stage_groups: give the group of each pipeline rank (at least one)")
        for i, g in enumerate(groups):
            cluster.group(g, f"parallel.stage_groups[{i}]")
        _need("pp" not in spec.model_fields_set or spec.pp == len(groups),
              f"parallel.pp: {spec.pp} but stage_groups names {len(groups)} pipeline ranks; leave pp out or set pp: {len(groups)}")
        _need(spec.batch_split is None, "parallel.batch_split: goes with replicas (data parallel across groups); "
              "with stage_groups every replica takes the same micro-batches")
        pp, dp = len(groups), spec.dp or 1
        plan = TrainPlan(**{**base, "pp": pp, "dp": dp})
        check_node_fit(cluster, sorted(set(groups)), plan.tp, plan.cp)
        plan = check_plan(model, _used(cluster, plan.tp * plan.cp * pp * dp), training, plan)
        split = None
        if spec.layer_split is not None:
            split = tuple(spec.layer_split)
            _need(len(split) == pp, f"parallel.layer_split: {len(split)} entries for {pp} pipeline ranks; give one per rank")
            _need(all(n >= 0 for n in split), "parallel.layer_split: layer counts must be >= 0")
            _need(sum(split) == model.layers,
                  f"parallel.layer_split: sums to {sum(split)} but {model.name} has {model.layers} layers")
            _need(all(n >= plan.vpp for n in split[1:-1]) or plan.vpp == 1,
                  f"parallel.layer_split: with vpp {plan.vpp} every middle rank needs at least {plan.vpp} layers")
        layout = HeteroLayout(plan, "pipeline", stage_groups=tuple(groups), layer_split=split, state_split=spec.state_split)
    else:
        reps = dict(spec.replicas or {})
        _need(len(reps) > 0, "parallel.replicas: give the replicas of each group used, e.g. {h100: 2, a100: 4}")
        for g, d in reps.items():
            cluster.group(g, f"parallel.replicas.{g}")
            _need(d > 0, f"parallel.replicas.{g}: {d} replicas; give at least 1 (or leave the group out)")
        _need(spec.layer_split is None, "parallel.layer_split: goes with stage_groups; replicas split the layers evenly")
        dp = sum(reps.values())
        _need(spec.dp is None or spec.dp == dp, f"parallel.dp: {spec.dp} but replicas add up to {dp}; leave dp out")
        plan = TrainPlan(**{**base, "dp": dp})
        check_node_fit(cluster, list(reps), plan.tp, plan.cp)
        plan = check_plan(model, _used(cluster, plan.tp * plan.cp * plan.pp * dp), training, plan, check_batch=False)
        _need(training.global_batch % plan.micro_batch == 0,
              f"training.global_batch: {training.global_batch} is not a multiple of micro_batch {plan.micro_batch}")
        split = None
        if spec.batch_split is not None:
            extra = set(spec.batch_split) - set(reps)
            _need(not extra, f"parallel.batch_split.{sorted(extra)[0] if extra else ''}: no replicas of that group; "
                  "batch_split names the groups of replicas")
            missing = [g for g in reps if g not in spec.batch_split]
            _need(not missing, f"parallel.batch_split: missing group {missing[0] if missing else ''}; give every group of replicas")
            split = tuple(int(spec.batch_split[g]) for g in reps)
            _need(all(m > 0 for m in split), "parallel.batch_split: every replica takes at least one micro-batch")
            seqs = sum(d * m for d, m in zip(reps.values(), split, strict=True)) * plan.micro_batch
            _need(seqs == training.global_batch,
                  f"parallel.batch_split: {' + '.join(f'{d} x {m}' for d, m in zip(reps.values(), split, strict=True))} "
                  f"micro-batches of {plan.micro_batch} = {seqs} sequences, not the global batch {training.global_batch}")
        layout = HeteroLayout(plan, "data", replicas=tuple(reps.items()), batch_split=split, state_split=spec.state_split)
    for g, n in layout.gpus_per_group().items():
        have = cluster.group(g).num_gpus
        field = "stage_groups" if layout.kind == "pipeline" else f"replicas.{g}"
        _need(n <= have, f"parallel.{field}: the layout puts {n} GPUs on group {g!r}, which has {have}")
    return layout


def _used(cluster: HeteroCluster, gpus: int) -> Any:
    """A stand-in cluster of `gpus` GPUs for the structural checks of :func:`check_plan` (which look at
    the GPU count only)."""
    return cluster.groups[0].cluster.model_copy(update={"num_gpus": gpus})


def hetero_job(model: ModelSpec, cluster: HeteroCluster, training: TrainingSpec, raw_plan: dict[str, Any] | None,
               name: str, require_plan: bool = True) -> HeteroJob:
    """Build the job of a heterogeneous cluster from its parsed `parallel` mapping."""
    from pydantic import ValidationError

    from shardwise.specs._loading import format_validation_error

    if not require_plan:
        return HeteroJob(model, cluster, training, None, name)
    try:
        spec = HeteroLayoutSpec(**(raw_plan or {}))
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, "parallel")) from None
    return HeteroJob(model, cluster, training, check_layout(model, cluster, training, spec), name)
