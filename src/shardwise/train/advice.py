"""What to change when no plan fits: the closest plans and by how many GiB each misses, and the levers that
would make the job fit, each priced by the fastest plan it leaves (an exact estimate), ranked.

The levers (each one change, the rest of the job as asked):
- offload the optimizer states, or the optimizer states and the parameters, to host memory (ZeRO-Offload,
  Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021): the same GPUs, a slower step; its slowdown is
  the step time over that of the same plan without offload (were memory no object);
- offload the activations to host memory (parallel.offload_activations at the planner's shares, 0.5 and 1,
  the faster that fits; PipeOffload: Wan et al. 2025; :mod:`shardwise.cost.act_offload`), where the job did
  not set a share: the same GPUs, its slowdown priced the same way; the fallback search when nothing fits
  retries with it where it is the fastest offload lever (:func:`offload_fallback`);
- full recompute, micro-batch 1, or the job's other fixed plan fields freed (only where the job fixed them);
- more GPUs of the same type: the smallest count that fits (:func:`shardwise.train.smallest.smallest_fit`);
- another GPU type with more memory, at the same count;
- a shorter sequence: the longest of seq/2, seq/4, ... (at least 512 tokens) that fits, same batch in sequences.

Ranking: a lever that keeps the GPUs and the job first (what a user with a fixed budget can do today), then
one that changes the hardware, then one that changes what is trained; within each, by dollars per million
tokens (by step time per GPU where there is no price).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import Cluster, get_gpu, gpu_names, make_cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.training import TrainingSpec
from shardwise.train.estimate import estimate
from shardwise.train.plan_label import plan_label
from shardwise.train.planner import ACT_OFFLOAD_SHARES, NothingFits, job_from_plan, plan_search, usd_per_million_tokens
from shardwise.train.result import GIB, Estimate
from shardwise.train.search_space import EVERY_PLAN
from shardwise.train.smallest import _breakdown, memory_floor_bytes, smallest_fit

Schedules = tuple[str, ...] | None
SAME_JOB, HARDWARE, WORKLOAD = 0, 1, 2
KIND_WORDS = {SAME_JOB: "same GPUs and job", HARDWARE: "other hardware", WORKLOAD: "a different job"}
MIN_SEQ_LEN = 512
#: Exact estimates per lever (the fastest plan it leaves; the screen orders them).
LEVER_EXACT = 12


@dataclass
class Lever:
    """One change and the fastest plan that fits with it (None: it does not make the job fit)."""

    name: str
    change: str
    kind: int
    best: Estimate | None = None
    gpus: int | None = None
    slowdown: float | None = None  # offload: step time over the same plan's without offload, minus 1
    usd_per_mtok: float | None = None
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.best is not None

    def to_dict(self) -> dict[str, Any]:
        b = self.best
        return {"lever": self.name, "change": self.change, "kind": KIND_WORDS[self.kind], "fits": self.fits,
                "gpu": None if b is None else b.gpu, "gpus": self.gpus, "plan": None if b is None else plan_label(b.plan),
                "parallel": None if b is None else b.plan,
                "step_time_s": None if b is None else b.step_time_s,
                "tokens_per_s_per_gpu": None if b is None else b.tokens_per_s_per_gpu,
                "peak_memory_gib": None if b is None else b.peak_memory_gib, "slowdown": self.slowdown,
                "usd_per_million_tokens": self.usd_per_mtok, "note": self.note}


@dataclass
class Advice:
    """Why nothing fits on `gpus` x `gpu` and what would make it fit."""

    gpu: str
    gpus: int
    usable_gib: float
    message: str
    closest: list[dict[str, Any]]
    levers: list[Lever] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "gpus": self.gpus, "usable_gib": self.usable_gib, "message": self.message,
                "closest": self.closest, "levers": [lv.to_dict() for lv in self.levers]}

    def best_offload(self) -> Lever | None:
        """The fastest offload lever that fits on the same GPUs (model states or activations), if any."""
        offloads = [lv for lv in self.levers if lv.fits and (lv.name.startswith("offload") or lv.name == "activation offload")]
        return min(offloads, key=lambda lv: lv.best.step_time_s) if offloads else None


def _fastest(model: ModelSpec, cluster: Cluster, training: TrainingSpec, fixed: dict[str, Any], schedules: Schedules,
             constants: Constants | None) -> Estimate | None:
    try:
        return plan_search(model, cluster, training, top_k=1, max_exact=LEVER_EXACT, schedules=schedules, fixed=fixed,
                           constants=constants).top[0]
    except ShardwiseError:
        return None


def _price(e: Estimate | None, cluster: Cluster) -> float | None:
    return None if e is None else usd_per_million_tokens(e, cluster.price_usd_per_gpu_hour)


def what_to_change(model: ModelSpec, training: TrainingSpec, nf: NothingFits, fixed: dict[str, Any] | None = None,
                   schedules: tuple[str, ...] | None = None, constants: Constants | None = None,
                   max_gpus: int = 4096) -> Advice:
    """The closest plans of the failed search `nf` (exact estimates) and every lever, ranked (module docstring)."""
    cluster, fixed = nf.cluster, dict(fixed or {})
    usable = cluster.usable_memory_bytes / GIB
    closest = []
    for plan, _screened in nf.closest:
        e = estimate(job_from_plan(model, cluster, training, plan, nf.extra), constants)
        closest.append({"plan": plan_label(e.plan), "parallel": e.plan, "peak_memory_gib": e.peak_memory_gib,
                        "misses_by_gib": e.peak_memory_gib - usable, "breakdown_gib": e.memory.gib(), "what": _breakdown(e)})
    closest.sort(key=lambda c: c["peak_memory_gib"])
    levers: list[Lever] = []
    if fixed.get("offload", "none") == "none":
        choices = [("optimizer", "cpu", "offload the optimizer states to host memory (ZeRO-Offload)"),
                   ("optimizer+params", "cpu", "offload the optimizer states and the parameters to host memory "
                                               "(ZeRO-Infinity, host tier)")]
        h = cluster.host
        if h.nvme_tb and h.nvme_read_gbyte_s and h.nvme_write_gbyte_s:  # the drives are known: the NVMe tier too
            choices.append(("optimizer+params", "nvme", "offload the optimizer states and the parameters to the "
                                                        "node's NVMe (ZeRO-Infinity, ZeRO-3)"))
        for offload, device, words in choices:
            where = {"offload": offload} | ({"offload_device": device} if device != "cpu" else {})
            best = _fastest(model, cluster, training, fixed | where, schedules, constants)
            name = f"offload {offload}" + (f" to {device}" if device != "cpu" else "")
            lever = Lever(name, words, SAME_JOB, best, cluster.num_gpus, usd_per_mtok=_price(best, cluster))
            if best is not None:
                plain = estimate(job_from_plan(model, cluster, training, {**best.plan, "offload": "none", "offload_device": "cpu"}),
                                 constants)
                lever.slowdown = best.step_time_s / plain.step_time_s - 1
                lever.note = (f"{lever.slowdown:.0%} slower than the same plan without offload "
                              f"(which would need {plain.peak_memory_gib:.1f} GiB)")
            levers.append(lever)
    if not fixed.get("offload_activations"):  # activation offload (cost/act_offload.py): the planner's shares, the fastest
        tries = [_fastest(model, cluster, training, fixed | {"offload_activations": x}, schedules, constants)
                 for x in ACT_OFFLOAD_SHARES]
        fitting = [e for e in tries if e is not None]
        best = min(fitting, key=lambda e: e.step_time_s) if fitting else None
        share = best.plan["offload_activations"] if best is not None else ACT_OFFLOAD_SHARES[-1]
        lever = Lever("activation offload", f"offload the activations to host memory (parallel.offload_activations "
                      f"{share:g}; PipeOffload)", SAME_JOB, best, cluster.num_gpus, usd_per_mtok=_price(best, cluster))
        if best is not None:
            plain = estimate(job_from_plan(model, cluster, training, {**best.plan, "offload_activations": 0.0}), constants)
            lever.slowdown = best.step_time_s / plain.step_time_s - 1
            lever.note = (f"{lever.slowdown:.0%} slower than the same plan without it (which would need "
                          f"{plain.peak_memory_gib:.1f} GiB); a smaller share may fit too")
        levers.append(lever)
    for key, value, words in (("recompute", "full", "recompute every layer's activations (full recompute)"),
                              ("micro_batch", 1, "micro-batch 1")):
        if key in fixed and fixed[key] != value:
            best = _fastest(model, cluster, training, fixed | {key: value}, schedules, constants)
            levers.append(Lever(f"{key} {value}", words, SAME_JOB, best, cluster.num_gpus, usd_per_mtok=_price(best, cluster)))
    searched = {k: v for k, v in fixed.items() if k not in EVERY_PLAN}
    if searched:
        best = _fastest(model, cluster, training, {k: v for k, v in fixed.items() if k in EVERY_PLAN}, schedules, constants)
        levers.append(Lever("free the fixed fields", f"let the search choose {', '.join(sorted(searched))}", SAME_JOB, best,
                            cluster.num_gpus, usd_per_mtok=_price(best, cluster)))
    levers.append(_more_gpus(model, cluster, training, fixed, schedules, constants, max_gpus))
    levers += _other_gpus(model, cluster, training, fixed, schedules, constants)
    levers.append(_shorter_sequence(model, cluster, training, fixed, schedules, constants))

    def rank(lv: Lever) -> tuple:
        cost = lv.usd_per_mtok if lv.usd_per_mtok is not None else (lv.best.step_time_s * (lv.gpus or 1) if lv.best else 0.0)
        return (not lv.fits, lv.kind, cost)

    levers.sort(key=rank)
    return Advice(cluster.gpu.name, cluster.num_gpus, usable, str(nf), closest, levers)


def _more_gpus(model: ModelSpec, cluster: Cluster, training: TrainingSpec, fixed: dict[str, Any], schedules: Schedules,
               constants: Constants | None, max_gpus: int) -> Lever:
    gpu = cluster.gpu.name
    n, _ = smallest_fit(model, gpu, training, max_gpus, cluster.memory_headroom, schedules, constants, fixed,
                        host=cluster.host_spec)
    if n is None:
        return Lever("more GPUs", f"no count of {gpu} up to {max_gpus:,} fits", HARDWARE)
    bigger = make_cluster(gpu, n, memory_headroom=cluster.memory_headroom, host=cluster.host_spec)
    best = _fastest(model, bigger, training, fixed, schedules, constants)
    return Lever("more GPUs", f"{n} x {gpu} (the smallest count that fits; {n - cluster.num_gpus:+d} GPUs)", HARDWARE, best, n,
                 usd_per_mtok=_price(best, bigger))


def _other_gpus(model: ModelSpec, cluster: Cluster, training: TrainingSpec, fixed: dict[str, Any], schedules: Schedules,
                constants: Constants | None, keep: int = 2) -> list[Lever]:
    """The `keep` cheapest GPU types with more memory that fit at the same count."""
    out = []
    for g in (get_gpu(name) for name in gpu_names()):
        if g.memory_gib <= cluster.gpu.memory_gib or g.name == cluster.gpu.name:
            continue
        try:  # a part without this precision's tensor cores (V100: no BF16) is no lever
            g.peak_flops(training.precision)
            g.peak_flops("bf16" if training.low_precision else training.precision)
        except ShardwiseError:
            continue
        usable = g.memory_gib * GIB * (1 - cluster.memory_headroom)
        if memory_floor_bytes(model, training, cluster.num_gpus, fixed.get("offload", "none"), constants) > usable:
            continue  # the model states alone cannot fit (smallest.memory_floor_bytes)
        try:
            other = make_cluster(g.name, cluster.num_gpus, memory_headroom=cluster.memory_headroom)
        except ShardwiseError:
            continue
        best = _fastest(model, other, training, fixed, schedules, constants)
        if best is not None:
            out.append(Lever("another GPU", f"{cluster.num_gpus} x {g.name} ({g.memory_gib:.0f} GiB each)", HARDWARE, best,
                             cluster.num_gpus, usd_per_mtok=_price(best, other)))
    out.sort(key=lambda lv: (lv.usd_per_mtok is None, lv.usd_per_mtok or 0.0, lv.best.step_time_s))
    return out[:keep] or [Lever("another GPU", f"no GPU type with more memory fits at {cluster.num_gpus} GPUs", HARDWARE)]


def _shorter_sequence(model: ModelSpec, cluster: Cluster, training: TrainingSpec, fixed: dict[str, Any], schedules: Schedules,
                      constants: Constants | None) -> Lever:
    seq = training.seq_len // 2
    while seq >= MIN_SEQ_LEN and training.seq_len % seq == 0:
        shorter = training.model_copy(update={"seq_len": seq})
        best = _fastest(model, cluster, shorter, fixed, schedules, constants)
        if best is not None:
            return Lever("shorter sequence", f"sequences of {seq:,} tokens instead of {training.seq_len:,} (same batch in "
                         "sequences)", WORKLOAD, best, cluster.num_gpus, usd_per_mtok=_price(best, cluster))
        seq //= 2
    return Lever("shorter sequence", f"no sequence down to {MIN_SEQ_LEN} tokens fits", WORKLOAD)


class NoPlanFits(ShardwiseError):
    """Nothing fits and no offload makes it fit on these GPUs: the advice says what would."""

    def __init__(self, advice: Advice) -> None:
        super().__init__(advice.message.replace("`train plan` prices what would fit", "what would fit is printed above"))
        self.advice = advice


def offload_fallback(model: ModelSpec, training: TrainingSpec, nf: NothingFits, fixed: dict[str, Any] | None = None,
                     schedules: tuple[str, ...] | None = None, constants: Constants | None = None,
                     max_gpus: int = 4096) -> tuple[dict[str, str], Advice]:
    """When nothing fits: (the offload fields the search should retry with: offload and offload_device, or
    offload_activations where offloading the activations is the fastest lever that fits; the advice); raises
    :class:`NoPlanFits` when the job fixed its offload or no offload fits these GPUs."""
    advice = what_to_change(model, training, nf, fixed, schedules, constants, max_gpus)
    lever = advice.best_offload()
    if lever is None or (fixed or {}).get("offload", "none") != "none":
        raise NoPlanFits(advice)
    if lever.name == "activation offload":
        return {"offload_activations": lever.best.plan["offload_activations"]}, advice
    return {"offload": lever.best.plan["offload"], "offload_device": lever.best.plan.get("offload_device", "cpu")}, advice
