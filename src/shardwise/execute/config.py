"""What one executor run does: a job's plan turned into a checked, picklable run configuration.

No torch here: the configuration is validated in the CLI process (so layout mistakes are one-line
errors before any process starts) and handed to every worker. Rank layout follows
:class:`~shardwise.specs.training.TrainPlan`: TP innermost, then DP, PP outermost (Megatron-LM's
``tp-cp-ep-dp-pp`` order with cp = ep = 1), i.e. ``rank = (pp_rank * dp + dp_rank) * tp + tp_rank``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_RUN_PARAMS, MAX_RUN_PROCESSES, MAX_RUN_STEPS
from shardwise.specs.job import TrainJob

if TYPE_CHECKING:
    from shardwise.specs.hetero import HeteroJob
from shardwise.specs.model import ModelSpec

#: Faults the executor can inject on purpose, to show that ``--check`` catches a broken layout.
FAULTS = {
    "skip-dp-grad-reduce": "gradients are not reduced across data-parallel ranks",
    "crash-last-rank": "the last rank raises in its first step (the others then block in a collective)",
}

def one_stage_per_rank() -> tuple[str, ...]:
    """Schedules ``train run`` splits layers unevenly with, one stage per pipeline rank (an uneven layer
    split maps onto ranks one to one): those whose ``ScheduleInfo.uneven_split`` is set."""
    from shardwise.pipeline import list_schedules, schedule_info

    return tuple(n for n in list_schedules() if schedule_info(n).uneven_split)

#: Optimizer of every run and of the reference: torch.optim.SGD with momentum. Its update is linear in
#: the gradient, so a last-bit difference stays one; AdamW's normalised update m/sqrt(v) amplifies them
#: step after step (measured: 1e-7 -> 3e-3 in three steps), which would blur the numerics check.
SGD = {"lr": 0.5, "momentum": 0.9}


@dataclass(frozen=True)
class RunConfig:
    """One run: model, degrees, schedule, steps and what to record. ``microbatches`` is per DP rank."""

    model: ModelSpec
    tp: int
    pp: int
    dp: int
    zero: int
    micro_batch: int
    microbatches: int
    seq_len: int
    schedule: str | None  # canonical schedule name; None when pp == 1
    vpp: int | None  # stages per rank asked of the generator (None: the schedule's default)
    steps: int = 3
    backend: str = "gloo"
    seed: int = 0
    check: bool = False
    calibrate: bool = False
    calib_steps: int = 3
    fault: str | None = None
    timeout_s: float = 300.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: uneven layouts (a heterogeneous cluster's, docs/hetero.md): layers per pipeline rank, and
    #: micro-batches per DP rank (None: even split / ``microbatches`` on every DP rank)
    layer_split: tuple[int, ...] | None = None
    dp_microbatches: tuple[int, ...] | None = None
    #: zero 3: FSDP2 frees the gathered parameters after each forward (parallel.reshard_after_forward)
    reshard_after_forward: bool = True

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all DP ranks."""
        return self.micro_batch * sum(self.local_microbatches(d) for d in range(self.dp))

    @property
    def local_batch(self) -> int:
        """Sequences per step on DP rank 0."""
        return self.micro_batch * self.local_microbatches(0)

    def local_microbatches(self, dp_rank: int) -> int:
        """Micro-batches per step on DP rank ``dp_rank``."""
        return self.microbatches if self.dp_microbatches is None else self.dp_microbatches[dp_rank]

    def rows(self, dp_rank: int) -> slice:
        """The rows of the global batch DP rank ``dp_rank`` takes (contiguous, in DP-rank order)."""
        start = self.micro_batch * sum(self.local_microbatches(d) for d in range(dp_rank))
        return slice(start, start + self.micro_batch * self.local_microbatches(dp_rank))

    def loss_weight(self, dp_rank: int) -> float:
        """Factor on DP rank ``dp_rank``'s mean loss so that averaging gradients over the DP ranks gives
        the global batch's mean: dp x local / global (1 on an even split)."""
        if self.dp_microbatches is None:
            return 1.0
        return self.dp * self.local_microbatches(dp_rank) / sum(self.dp_microbatches)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_rank, dp_rank, tp_rank) of global ``rank``."""
        return rank // (self.dp * self.tp), (rank // self.tp) % self.dp, rank % self.tp

    def describe(self) -> str:
        parts = [f"dp={self.dp}", f"tp={self.tp}", f"pp={self.pp}", f"zero={self.zero}"]
        if self.pp > 1:
            parts.append(f"schedule={self.schedule}")
        if self.dp_microbatches is not None:
            parts.append(f"micro_batch={self.micro_batch}x[{'/'.join(map(str, self.dp_microbatches))}] per DP rank")
        else:
            parts.append(f"micro_batch={self.micro_batch}x{self.microbatches}")
        if self.layer_split is not None:
            parts.append(f"layers={'/'.join(map(str, self.layer_split))}")
        return " ".join(parts)


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ShardwiseError(msg)


def config_from_job(
    job: TrainJob,
    nproc: int | None = None,
    steps: int = 3,
    backend: str = "gloo",
    check: bool = False,
    calibrate: bool = False,
    seed: int = 0,
    fault: str | None = None,
    timeout_s: float = 300.0,
    schedule: str | None = None,
    layer_split: tuple[int, ...] | None = None,
    dp_microbatches: tuple[int, ...] | None = None,
) -> RunConfig:
    """Check that the executor can lay out ``job``'s plan on ``nproc`` processes and build the config.

    ``schedule`` overrides the plan's schedule; ``layer_split`` / ``dp_microbatches`` lay it out unevenly
    (see :func:`config_from_hetero_job`). Every knob the executor does not apply (precision,
    recompute, sequence parallelism) becomes a note in the output rather than being dropped silently.
    """
    from shardwise.engines.support import require
    from shardwise.pipeline import generate_schedule, resolve
    from shardwise.specs.hetero import HeteroJob

    if isinstance(job, HeteroJob):  # a cluster with groups: its layout, split as the estimate splits it
        return config_from_hetero_job(job, nproc=nproc, steps=steps, backend=backend, check=check, calibrate=calibrate,
                                      seed=seed, fault=fault, timeout_s=timeout_s, schedule=schedule)

    p, m = job.plan, job.model
    dp = p.dp or 1
    world = p.tp * p.pp * dp
    nproc = world if nproc is None else nproc
    # What the executor cannot run is stated once, with every engine's limits (engines/support.py).
    require(p if schedule is None else p.model_copy(update={"schedule": schedule}), "torch", m, job.training,
            label="train run", arch=job.cluster.gpu.arch)
    _need(nproc == job.cluster.num_gpus,
          f"--nproc {nproc} does not match cluster.gpus {job.cluster.num_gpus} of the job (tp*pp*dp = "
          f"{p.tp}*{p.pp}*{dp}); set cluster.gpus: {nproc} in the job file or pass --nproc {job.cluster.num_gpus}")
    _need(nproc == world, f"--nproc {nproc} is not tp*pp*dp = {world}; change the plan or --nproc")
    _need(nproc <= MAX_RUN_PROCESSES, f"--nproc {nproc} exceeds the limit of {MAX_RUN_PROCESSES} local processes (see Limits "
          "in the README): train run checks a plan at small scale; shrink the job's degrees")
    _need(1 <= steps <= MAX_RUN_STEPS, f"--steps must be in 1..{MAX_RUN_STEPS:,}, got {steps}")
    _need(seed >= 0, f"--seed must be a non-negative integer, got {seed}")
    _need(math.isfinite(timeout_s) and timeout_s > 0, f"--timeout must be a positive number of seconds, got {timeout_s}")
    _need(m.params_total <= MAX_RUN_PARAMS,
          f"model: {m.params_total / 1e9:.2f}B parameters exceed the limit of {MAX_RUN_PARAMS / 1e6:.0f}M for train run, which "
          "builds the model for real on this machine (see Limits in the README); use an inline mapping of a small model")
    _need(backend in ("gloo", "nccl"), f"--backend must be gloo or nccl, got {backend!r}")
    _need(fault is None or fault in FAULTS, f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    notes: list[str] = []
    if job.training.precision != "fp32":
        notes.append(f"precision {job.training.precision} -> ran in fp32 (the numerics check needs fp32)")
    if p.recompute != "none":
        notes.append(f"recompute {p.recompute!r} not applied (it changes memory, not numerics)")
    if p.sp:
        notes.append("sequence_parallel not applied (TP runs with replicated activations)")
    if p.zero >= 2 and dp == 1:
        notes.append(f"zero {p.zero} with dp=1 shards nothing: ran without a data-parallel wrapper")
    mb = job.microbatches
    sched_name, vpp = None, None
    if p.pp > 1:
        sched_name = resolve(schedule or p.schedule)
        vpp = p.vpp if p.vpp > 1 else None
        generate_schedule(sched_name, p.pp, mb, vpp)  # raises for (pp, m, vpp) it does not admit
    elif schedule or p.schedule not in ("1f1b",):
        notes.append(f"schedule {schedule or p.schedule!r} ignored: pp=1 has no pipeline")
    if layer_split is not None:
        _need(p.pp > 1 and sum(layer_split) == m.layers and len(layer_split) == p.pp and min(layer_split) >= 0,
              f"parallel.layer_split: {list(layer_split)} must give each of the {p.pp} pipeline ranks its layers ({m.layers} in all)")
        _need(vpp is None and sched_name in one_stage_per_rank(),
              f"parallel.layer_split: train run splits layers unevenly with one stage per rank ({', '.join(one_stage_per_rank())}); "
              f"schedule {sched_name!r} holds several: use one of those")
    if dp_microbatches is not None:
        _need(len(dp_microbatches) == dp and min(dp_microbatches) >= 1,
              f"parallel.batch_split: {list(dp_microbatches)} must give each of the {dp} DP ranks 1 or more micro-batches")
        _need(p.pp == 1, "parallel.batch_split: train run runs an uneven batch split with pp = 1 (one schedule per "
              "pipeline); use pp: 1 to check it")
    return RunConfig(
        model=m, tp=p.tp, pp=p.pp, dp=dp, zero=p.zero, micro_batch=p.micro_batch, microbatches=mb,
        reshard_after_forward=p.reshard_after_forward is not False,
        seq_len=job.training.seq_len, schedule=sched_name, vpp=vpp, steps=steps, backend=backend, seed=seed,
        check=check, calibrate=calibrate, fault=fault, timeout_s=timeout_s, notes=tuple(notes),
        layer_split=None if layer_split is None else tuple(layer_split),
        dp_microbatches=None if dp_microbatches is None else tuple(dp_microbatches),
    )


def config_from_hetero_job(job: HeteroJob, **kw: Any) -> RunConfig:
    """The run of a heterogeneous job's layout on local processes (every process alike: the run checks
    the layout's numerics, the GPU types are the estimate's business). The splits are the ones the
    estimate costs (given, or balanced by speed): layers per pipeline rank, or micro-batches per
    replica, replicas in group order."""
    from shardwise.train.hetero.estimate import hetero_estimate

    layout = hetero_estimate(job).layout
    p = layout.plan
    stand_in = job.cluster.groups[0].cluster.model_copy(update={"num_gpus": layout.num_gpus})
    base = TrainJob(job.model, stand_in, job.training, p, job.name)
    if layout.kind == "pipeline":
        return config_from_job(base, layer_split=layout.layer_split, **kw)
    per_rank = tuple(m for (_, d), m in zip(layout.replicas, layout.batch_split, strict=True) for _ in range(d))
    return config_from_job(base, dp_microbatches=per_rank, **kw)
