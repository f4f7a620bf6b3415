"""Software-stack profiles: the kernels, fusion and overlap of Megatron-LM, torchtitan, FSDP loops,
DeepSpeed, Composer and MaxText, as a few explicit knobs (``data/stacks.yaml``, each tagged cited /
assumed / fitted; fitted values are overlaid from :func:`shardwise.cost.constants.default_constants`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import Any

from shardwise.cost.constants import Constants, default_constants
from shardwise.errors import ShardwiseError
from shardwise.memo import IdentityMemo, cached_hash, dataclass_getstate
from shardwise.specs._loading import data_path, load_yaml
from shardwise.specs.training import TrainingSpec, TrainPlan

FITTED_KNOBS = ("tp_comm_overlap", "dp_overlap", "fsdp_prefetch_overlap")


@dataclass(frozen=True)
class StackProfile:
    """What one software stack does to the per-op costs of a plan (see data/stacks.yaml)."""

    __hash__ = cached_hash  # keys the layer, rank and comm caches: hashed once per object (shardwise/memo.py)
    __getstate__ = dataclass_getstate

    name: str
    attention_kernel: str  # "fa3" or "fa2" on this GPU generation
    fusion: str  # "fused", "eager" or "compiled"
    elementwise_traffic: float  # multiplier on the fused elementwise bytes
    kernels_per_layer: float  # forward kernels of one layer (the backward launches twice as many)
    selective_recompute_gemms: float
    tp_comm_overlap: float
    dp_overlap: float
    fsdp_prefetch_overlap: float
    zero3_unit: str = "layer"  # "layer" or "module": what one ZeRO-3 gather holds
    fp8_recipe: str = "tensorwise"  # what training.fp8_recipe: auto means for fp8
    fp8_all_gather: tuple[str, ...] = ()  # recipes whose ZeRO-3/FSDP gathers move FP8 weights
    fp8_weight_cache: bool = False  # FP8 weights cast once per step and kept (else cast at every use)
    fp8_saved_inputs: bool = False  # GEMM inputs saved for the backward in FP8
    ep_comm_overlap: float = 0.0  # share of the expert-parallel all-to-all hidden under compute
    zero1_comm: str = "reduce_scatter"  # ZeRO-1/2: "reduce_scatter" (+ all-gather) or "all_reduce_broadcast"
    param_sync_overlap: bool = True  # the ZeRO-1/2 parameter gather hides under the next forward
    grad_bucket_elements: float = 0.0  # gradient bucket size in elements; 0: Megatron-LM's rule
    mx_cast_per_layout: bool = False  # MX operands quantised once per layout (two passes), not both in one
    host_step_overhead: bool = True  # the host's per-step work (optimizer launch, logging syncs) is exposed
    expandable_segments: bool = False  # the caching allocator runs with expandable segments by default
    tp_overlap_modes: tuple[str, ...] = ("none",)  # TP overlap modes the stack runs; the first is its default
    fsdp_unsharded_with_pp: bool = False  # ZeRO-3 under PP keeps gathered parameters and unsharded gradients

    def knobs(self) -> dict[str, Any]:
        """The knobs as printed with an estimate."""
        return dict(self._knobs)  # a copy: the caller's own

    @cached_property
    def _knobs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _KNOB_NAMES}


_KNOB_NAMES = tuple(f.name for f in fields(StackProfile))


@lru_cache(maxsize=1)
def _raw() -> dict[str, dict[str, Any]]:
    return load_yaml(data_path("stacks.yaml"))


def framework_names() -> list[str]:
    return list(_raw())


def host_overhead_stacks() -> tuple[str, ...]:
    """The stacks whose per-step host work adds to the step (knob host_step_overhead)."""
    return tuple(name for name, raw in _raw().items() if raw.get("host_step_overhead", True))


def stack_profile(framework: str, arch: str, compile: bool | None = None, constants: Constants | None = None) -> StackProfile:
    """The profile of `framework` on a GPU generation `arch`; `compile` overrides the stack's default."""
    raw = _raw().get(framework)
    if raw is None:
        raise ShardwiseError(f"training.framework: unknown stack {framework!r}; use one of {', '.join(framework_names())}")
    consts = constants or default_constants()
    return _PROFILES(_profile, (consts,), framework, arch, compile)


#: Profiles by (the constants object, framework, arch, compile): a handful per run (shardwise/memo.py).
_PROFILES = IdentityMemo(64)


def _profile(consts: Constants, framework: str, arch: str, compile: bool | None) -> StackProfile:
    raw = _raw()[framework]
    fusion = raw["fusion"]
    if fusion != "fused" and (raw["compile"] if compile is None else compile):
        fusion = "compiled"
    fc = consts.fusion
    traffic = {"fused": 1.0, "eager": fc.eager_traffic, "compiled": fc.compiled_traffic}[fusion]
    kernels = {"fused": fc.fused_kernels_per_layer, "eager": fc.eager_kernels_per_layer, "compiled": fc.compiled_kernels_per_layer}[fusion]
    profile = StackProfile(
        name=framework,
        attention_kernel=raw["attention"].get(arch, "fa2"),
        fusion=fusion,
        elementwise_traffic=traffic,
        kernels_per_layer=kernels,
        selective_recompute_gemms=float(raw["selective_recompute_gemms"]),
        zero3_unit=raw.get("zero3_unit", "layer"),
        fp8_recipe=raw.get("fp8_recipe", "tensorwise"),
        fp8_all_gather=tuple(raw.get("fp8_all_gather") or ()),
        fp8_weight_cache=bool(raw.get("fp8_weight_cache", False)),
        fp8_saved_inputs=bool(raw.get("fp8_saved_inputs", False)),
        ep_comm_overlap=float(raw.get("ep_comm_overlap", 0.0)),
        zero1_comm=raw.get("zero1_comm", "reduce_scatter"),
        param_sync_overlap=bool(raw.get("param_sync_overlap", True)),
        grad_bucket_elements=float(raw.get("grad_bucket_elements") or 0.0),
        mx_cast_per_layout=bool(raw.get("mx_cast_per_layout", False)),
        host_step_overhead=bool(raw.get("host_step_overhead", True)),
        expandable_segments=bool(raw.get("expandable_segments", False)),
        tp_overlap_modes=tuple(raw.get("tp_overlap_modes") or ("none",)),
        fsdp_unsharded_with_pp=bool(raw.get("fsdp_unsharded_with_pp", False)),
        **{k: float(raw[k]) for k in FITTED_KNOBS},
    )
    over = consts.stacks.get(framework, {})
    return replace(profile, **{k: v for k, v in over.items() if k in FITTED_KNOBS}) if over else profile


def attention_kernel(training: TrainingSpec, stack: StackProfile) -> str:
    """The attention kernel a job runs: its own choice, else its stack's for the GPU generation."""
    choice = getattr(training, "attention_kernel", "auto")
    return stack.attention_kernel if choice == "auto" else choice


def expandable_segments(training: TrainingSpec, stack: StackProfile) -> bool:
    """Whether the job's caching allocator uses expandable segments: its own setting, else its stack's."""
    choice = getattr(training, "expandable_segments", None)
    return stack.expandable_segments if choice is None else bool(choice)


def keeps_unsharded(plan: TrainPlan, stack: StackProfile) -> bool:
    """Whether a ZeRO-3 plan keeps each layer's gathered parameters for the step (reshard_after_forward off):
    the plan's setting, else the stack's rule (data/stacks.yaml fsdp_unsharded_with_pp: off under PP)."""
    if plan.zero != 3:
        return False
    if plan.reshard_after_forward is not None:
        return not plan.reshard_after_forward
    return stack.fsdp_unsharded_with_pp and plan.pp > 1


def tp_overlap_mode(plan: TrainPlan, stack: StackProfile) -> str:
    """The plan's tensor-parallel overlap mode (auto: the stack's default); a mode the stack does not run, or
    a split mode without sequence parallelism (Megatron-LM validate_args: 'Tensor parallel communication/GEMM
    overlap can happen only when sequence parallelism is enabled'; torchtitan's async TP works on the
    sequence-parallel all-gathers and reduce-scatters), is a ShardwiseError."""
    mode = stack.tp_overlap_modes[0] if plan.tp_overlap == "auto" else plan.tp_overlap
    if plan.tp == 1 or mode == "none":
        return "none"
    if mode not in stack.tp_overlap_modes:
        raise ShardwiseError(f"parallel.tp_overlap: {stack.name} does not run {mode!r} overlap; use one of "
                             f"{', '.join(stack.tp_overlap_modes)} (or auto)")
    if not plan.sp:
        raise ShardwiseError(f"parallel.tp_overlap: {mode} overlap needs sequence parallelism; set sequence_parallel: true")
    return mode
