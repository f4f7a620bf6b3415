"""The checks that make a training plan runnable on a model, cluster and training setup: divisibility of
heads, GPUs, layers and sequence; experts and context parallelism; the GPU's precision. Each failure is a
:class:`~shardwise.errors.ShardwiseError` naming the job field and how to fix it.

Read by the job parser (:mod:`shardwise.specs.job`) and the heterogeneous layouts
(:mod:`shardwise.specs.hetero`), which therefore do not import each other for it.
"""

from __future__ import annotations

import math

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_PIPELINE_STAGES
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import RECIPE_ARCHS, TrainingSpec, TrainPlan


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
