"""The engine-rules table: for each training engine and version, what it runs, why not otherwise, and where
that is written in the engine's own code.

One table answers for the planner (``train plan --runnable-on``, every candidate at once), the labels of
each ranked plan, the estimate's notes, every exporter and ``train run``. An entry is either

- a :class:`Rule`: a predicate over a :class:`~shardwise.engines.support.PlanView` (numpy operators, so
  one plan or millions), the one-line reason, what would run instead, and the source (a file of the
  engine at the pinned version, with a link); or
- a :class:`Knob`: one costed choice of the plan (a field of the view), the values each engine runs and
  the words (arguments, environment) each engine's launch writes for a value. Its refusals are derived (a value an engine does not
  run is refused with the knob's reason), and exporters take the words from it, so adding a knob to the
  hand-off is one entry here.

Engines: ``torch`` (``train run``, :mod:`shardwise.execute`), ``torchtitan``, ``megatron`` (Megatron-LM
``pretrain_gpt.py``), ``deepspeed``; the versions are pinned in :data:`VERSIONS` (pyproject's ``engines``
extra installs the same; a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.engines.targets import TARGETS, engine_label, engine_version, rule_engines, rules_key

if TYPE_CHECKING:
    from shardwise.engines.plan_view import PlanView
    from shardwise.specs.job import TrainJob

#: The engines the table answers for (``torch`` and every training export target, from the registry
#: :mod:`shardwise.engines.targets`: a target registered later is read from there at call time).
ENGINES = rule_engines()
#: How messages name each engine.
ENGINE_NAMES = {e: engine_label(e) for e in ENGINES}
#: The engine releases every rule was read at (``train export --engine-version`` picks another where rules
#: differ): each target's pinned version. torch: the build the executor runs on.
VERSIONS = {e: engine_version(e) for e in ENGINES}
#: The software stack (data/stacks.yaml, ``training.framework``) a plan offered for an engine is costed with;
#: torch (``train run``) checks numerics on CPUs and keeps the job's stack.
STACK = {n: t.stack for n, t in TARGETS.items() if t.kind == "training" and t.stack}

_TT = "https://github.com/pytorch/torchtitan/blob/v0.3.0/"
_TT02 = "https://github.com/pytorch/torchtitan/blob/v0.2.2/"
_MG = "https://github.com/NVIDIA/Megatron-LM/blob/core_r0.20.0/"
_DS = "https://github.com/deepspeedai/DeepSpeed/blob/v0.19.8/"
_PT = "https://github.com/pytorch/pytorch/blob/v2.13.0/"
_SW = "src/shardwise/"

#: Our presets -> torchtitan (module, config_registry function, 0.2 flavor). 0.3.0 ships config functions
#: for these (models/{llama3,qwen3,deepseek_v3}/config_registry.py); a model of the same shape maps too.
TORCHTITAN_MODELS = {
    "llama-3.1-8b": ("llama3", "llama3_8b", "8B"),
    "llama-3-8b": ("llama3", "llama3_8b", "8B"),
    "llama-3.1-70b": ("llama3", "llama3_70b", "70B"),
    "llama-3-70b": ("llama3", "llama3_70b", "70B"),
    "llama-3.1-405b": ("llama3", "llama3_405b", "405B"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b", None),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", "671B"),
}
#: Our presets -> DeepSpeed AutoEP ``expert_parallel.preset_model`` (module_inject/auto_ep_presets).
DEEPSPEED_AUTOEP = {"mixtral-8x7b": "mixtral", "mixtral-8x22b": "mixtral", "qwen3-30b-a3b": "qwen3_moe",
                    "qwen3-235b-a22b": "qwen3_moe", "deepseek-v3": "deepseek_v3"}


def version_key(text: str) -> tuple[int, ...]:
    """``"0.3.0"`` -> (0, 3, 0); ``"core_r0.20.0"`` -> (0, 20, 0); non-numbers are dropped."""
    digits = "".join(c if c.isdigit() or c == "." else " " for c in text).split()
    return tuple(int(x) for x in (digits[-1] if digits else "0").split(".") if x)


@dataclass(frozen=True)
class Rule:
    """``refuses(view)`` is true where ``engines`` cannot run the plan; ``reason`` says why (one line),
    ``instead`` what would run, ``source`` where the engine says so. ``versions``: (first, last) release
    the rule holds for (None: open)."""

    engines: tuple[str, ...]
    refuses: Callable[[PlanView], Any]
    reason: str
    instead: str
    source: str
    versions: tuple[str | None, str | None] = (None, None)

    def holds(self, engine: str, version: str | None) -> bool:
        if engine not in self.engines:
            return False
        lo, hi = self.versions
        v = version_key(version or engine_version(engine))
        return (lo is None or v >= version_key(lo)) and (hi is None or v <= version_key(hi))


Words = Callable[[Any, "TrainJob"], list[str]]
Env = Callable[[Any, "TrainJob"], dict[str, str]]


@dataclass(frozen=True)
class Knob:
    """A costed choice: ``field`` of the view holds its value (a name, or per plan an index into the
    view's ``names[field]``); ``runs[engine]`` the values the engine runs (missing: every value);
    ``words[engine](value, job)`` the arguments the engine's launch writes for it and ``env[engine](value,
    job)`` the environment; ``matters(view)`` where the choice applies (elsewhere any value runs);
    ``instead``: what would run (default: the values the engine runs)."""

    field: str
    runs: dict[str, tuple[str, ...]]
    words: dict[str, Words]
    reason: str  # "{engine}" and "{values}" are filled in
    source: dict[str, str]
    matters: Callable[[PlanView], Any] = lambda v: np.ones(len(v.tp), dtype=bool)
    versions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    env: dict[str, Env] = field(default_factory=dict)
    instead: str = ""

    def rule(self, engine: str) -> Rule:
        ok = self.runs[engine]
        return Rule((engine,), lambda v: self.matters(v) & ~v.value_in(self.field, ok),
                    self.reason.format(engine=engine_label(engine), values=", ".join(ok)),
                    self.instead or f"{self.field} " + " or ".join(ok),
                    self.source.get(engine, ""), self.versions.get(engine, (None, None)))


def _model(v: PlanView, test: Callable[[Any, PlanView], Any]) -> np.ndarray:
    """``test(model, view)`` where the model is known; false where it is not (the rule needs it)."""
    if v.model is None:
        return np.zeros(len(v.tp), dtype=bool)
    return np.broadcast_to(np.asarray(test(v.model, v), dtype=bool), v.tp.shape)


def _mapped(v: PlanView, names: dict) -> np.ndarray:
    """True where the model is neither one of ``names`` nor the same architecture as one
    (:attr:`ModelSpec.architecture`; a rule needs it)."""
    from shardwise.specs.model_ref import load_model

    if v.model is None:
        return np.zeros(len(v.tp), dtype=bool)
    m = v.model
    known = any(load_model(n).architecture == m.architecture for n in names)  # a name alone is not the preset
    return np.full(len(v.tp), not known)


def _split(v: PlanView) -> np.ndarray:
    return v.split()


def _moe(v: PlanView) -> np.ndarray:
    return _model(v, lambda m, _: m.is_moe)


def _a2a_overlap(v: PlanView) -> np.ndarray:
    """Megatron's expert all-to-all overlap is asked for (moe.overlap_a2a true) and applies (ep > 1)."""
    return (v.ep > 1) & v.value_in("overlap_a2a", ("on",))


def _reshards_after_forward(v: PlanView, keeps_with_pp: bool) -> np.ndarray:
    """ZeRO-3 (FSDP2) that frees the gathered parameters after each forward: the plan's
    reshard_after_forward, else the engine's default (torchtitan: kept under PP; the executor: freed)."""
    if v.reshard_after_forward is not None:
        return (v.zero == 3) & bool(v.reshard_after_forward)
    return (v.zero == 3) & ~((v.pp > 1) & keeps_with_pp)


# Adapter fine-tunes (training.method lora / qlora) are estimated and planned, but neither the executor
# nor the exporters write adapters or a quantized base: no engine runs them as is.
ADAPTERS = Rule(ENGINES, lambda v: np.full(len(v.tp), v.method != "full"),
                "adapter fine-tunes (method lora / qlora) are planned but not run or exported by shardwise",
                "method full, or the plan's degrees in a LoRA recipe (torchtune, PEFT + accelerate)",
                _SW + "handoff/__init__.py")

# torch's pipeline runtime computes a split backward's W from the parameters the stage module holds when
# I runs; FSDP2 with reshard_after_forward has swapped the gathered ones out by then, so W finds no graph
# for them (tests/execute/test_fsdp_split_backward.py shows the weight gradients missing, ZB-V on 2x2
# gloo ranks; reshard_after_forward=False and fused-backward schedules give the reference gradients).
FSDP_SPLIT = "stage_backward_input in torch/distributed/pipelining/_backward.py, called by PipelineStage"


def _fsdp_split_rule(engines: tuple[str, ...], keeps_with_pp: bool, instead: str) -> Rule:
    return Rule(engines, lambda v: _reshards_after_forward(v, keeps_with_pp) & (v.dp > 1) & _split(v),
                "FSDP2 that reshards after forward, with a schedule that splits backward into I and W, loses "
                "weight gradients in torch's pipeline runtime (W runs on parameters FSDP2 has already freed)",
                instead, _PT + "torch/distributed/pipelining/_backward.py (" + FSDP_SPLIT + ")")


RECOMPUTE_FULL = 2  # index of "full" in engines.support.RECOMPUTE (none, selective, full)


def offloaded_layers(share: float, layers: int) -> int:
    """Megatron-LM's --cpu-offloading-num-layers for an activation-offload share: the nearest layer count, at
    least one (Megatron offloads whole layers' activations; the estimate prices the share)."""
    return max(1, round(share * layers))

_A2A_SRC = "megatron/core/transformer/transformer_config.py (overlap_moe_expert_parallel_comm asserts)"

RULES: tuple[Rule, ...] = (
    ADAPTERS,
    # torch: shardwise train run (the executor's own limits: execute/worker.py, execute/runners.py)
    Rule(("torch",), lambda v: v.cp > 1, "the executor does not run context parallelism", "cp 1",
         _SW + "execute/layout.py"),
    Rule(("torch",), lambda v: (v.ep > 1) | _model(v, lambda m, _: m.is_moe), "the executor runs dense models only",
         "a dense model with ep 1", _SW + "execute/model.py"),
    Rule(("torch",), lambda v: (v.zero == 1) & (v.tp > 1) & (v.dp > 1),
         "zero 1 with tp > 1 is not run by the executor (torch's ZeroRedundancyOptimizer takes plain tensors, "
         "not TP-sharded DTensors)", "zero 0, 2 or 3", _PT + "torch/distributed/optim/zero_redundancy_optimizer.py"),
    _fsdp_split_rule(("torch",), False, "zero 2, or a fused-backward schedule (gpipe, 1f1b, interleaved, bfs) with zero 3"),
    Rule(("torch",), lambda v: _model(v, lambda m, w: m.tied_embeddings & ((w.tp > 1) | (w.pp > 1))),
         "tied_embeddings runs only without TP and PP in the executor", "tied_embeddings: false", _SW + "execute/model.py"),
    Rule(("torch",), lambda v: _model(v, lambda m, w: m.n_kv_heads % w.tp != 0),
         "the executor splits KV heads across TP ranks: tp must divide the KV heads", "a tp that divides kv_heads",
         _SW + "execute/layout.py"),
    Rule(("torch",), lambda v: _model(v, lambda m, w: (m.ffn % w.tp != 0) | (m.vocab % w.tp != 0)),
         "tp must divide model.ffn and model.vocab in the executor", "sizes tp divides", _SW + "execute/layout.py"),
    Rule(("torch",), lambda v: _model(v, lambda m, w: m.layers < w.pp * w.vpp),
         "the executor needs at least one layer per stage", "fewer stages (pp*vpp <= layers)", _SW + "execute/model.py"),
    # torchtitan
    Rule(("torchtitan",), lambda v: _mapped(v, TORCHTITAN_MODELS),
         "torchtitan has no config_registry function for this architecture (0.3.0 ships Llama 3 8B/70B/405B, "
         "Qwen3-30B-A3B and DeepSeek-V3 671B at these sizes)", "one of those models, or add a config function",
         _TT + "torchtitan/models/llama3/config_registry.py"),
    Rule(("torchtitan",), lambda v: _mapped(v, {k: x for k, x in TORCHTITAN_MODELS.items() if x[2]}),
         "torchtitan 0.2 has no flavor for this architecture", "--engine-version 0.3",
         _TT02 + "torchtitan/models/llama3/__init__.py", versions=(None, "0.2.99")),
    Rule(("torchtitan",), lambda v: _model(v, lambda m, _: m.is_moe) & v.value_in("recipe", ("nvfp4",)),
         "torchtitan 0.3 converts linear layers to NVFP4, not the experts' grouped GEMMs", "fp8_recipe mxfp8 or rowwise",
         _TT + "torchtitan/components/quantization/nvfp4.py"),
    Rule(("torchtitan",), lambda v: v.zero == 1, "ZeRO-1 is not in torchtitan: its data parallelism is FSDP2, which "
         "either replicates everything or shards parameters, gradients and optimizer state together",
         "zero 0 (replicated), 2 (FSDP2 without resharding after forward) or 3 (FSDP2)",
         _TT + "torchtitan/config/configs.py (ParallelismConfig.data_parallel_shard_degree)"),
    Rule(("torchtitan",), lambda v: np.full(len(v.tp), v.precision == "fp16"),
         "torchtitan trains in bf16 or fp32 (mixed_precision_param has no float16)", "precision bf16",
         _TT + "torchtitan/config/configs.py (TrainingConfig.mixed_precision_param)"),
    _fsdp_split_rule(("torchtitan",), True, "parallel.reshard_after_forward false (torchtitan's default under PP), or "
                     "a fused-backward schedule"),
    Rule(("torchtitan",), lambda v: (v.cp > 1) & ~v.value_in("cp_comm", ("allgather",)),
         "torchtitan's context parallelism is torch's context_parallel with its default all-gather of K/V "
         "(0.3.0 sets no other rotate method; no ring or Ulysses option)", "cp_comm allgather",
         _TT + "torchtitan/distributed/context_parallel/api.py"),
    Rule(("torchtitan",), lambda v: (v.ep > 1) & (v.etp > 1),
         "torchtitan does not split experts by TP: expert parallelism borrows ranks from FSDP and TP "
         "(efsdp * ep = dp_shard * cp * tp)", "etp 1", _TT + "torchtitan/config/configs.py (expert_parallel_degree)"),
    Rule(("torchtitan",), lambda v: (v.ep > 1) & ((np.where(v.zero == 0, 1, v.dp) * v.cp * v.tp) % v.ep != 0),
         "torchtitan's ep must divide dp_shard * cp * tp (ZeRO 0 replicates over dp: dp_shard is 1)",
         "zero 2/3, or an ep dividing cp * tp", _TT + "torchtitan/distributed/parallel_dims.py"),
    Rule(("torchtitan",), lambda v: np.full(len(v.tp), v.offload_device == "nvme"),
         "torchtitan's FSDP2 CPU offload keeps the states in host memory only (no NVMe)", "offload_device cpu",
         _TT + "torchtitan/config/configs.py (enable_cpu_offload)"),
    Rule(("torchtitan",), lambda v: np.full(len(v.tp), v.offload == "optimizer"),
         "torchtitan offloads parameters, gradients and optimizer state together (FSDP2 CPU offload), not the "
         "optimizer alone", "offload optimizer+params", _TT + "torchtitan/config/configs.py (enable_cpu_offload)"),
    Rule(("torchtitan",), lambda v: np.full(len(v.tp), v.dp_shard is not None) & (v.zero > 0),
         "hybrid sharding (dp_shard) is not written by the torchtitan export", "parallel.dp_shard left out",
         _SW + "handoff/torchtitan.py"),
    Rule(("torchtitan",), lambda v: np.full(len(v.tp), v.offload_activations > 0),
         "torchtitan 0.3.0 has no activation offload (its CPU offload moves FSDP2 parameters, gradients and optimizer "
         "states)", "offload_activations 0", _TT + "torchtitan/config/configs.py (enable_cpu_offload)"),
    Rule(("torch",), lambda v: np.full(len(v.tp), v.offload_activations > 0),
         "train run does not offload activations", "offload_activations 0", _SW + "execute/"),
    # Megatron-LM
    Rule(("megatron",), lambda v: (v.offload_activations > 0) & (v.pp > 1),
         "Megatron-LM's CPU offloading (--cpu-offloading-num-layers) does not run with pipeline parallelism "
         "(TransformerConfig refuses it; fine-grained activation offloading is not written by the export)",
         "pp 1, or offload_activations 0",
         _MG + "megatron/core/transformer/transformer_config.py (cpu_offloading_num_layers)"),
    Rule(("megatron",), lambda v: (v.offload_activations > 0) & (v.rc != 0),
         "Megatron-LM's CPU offloading does not run with activation recomputation (recompute_granularity must be "
         "unset)", "recompute none, or offload_activations 0",
         _MG + "megatron/core/transformer/transformer_config.py (cpu_offloading_num_layers)"),
    Rule(("megatron",), lambda v: (v.offload_activations > 0)
         & np.full(len(v.tp), offloaded_layers(v.offload_activations, v.model.layers if v.model else 2) >=
                   (v.model.layers if v.model else 2)),
         "Megatron-LM offloads fewer layers than the model has (--cpu-offloading-num-layers < num_layers)",
         "a smaller offload_activations", _MG + "megatron/core/transformer/transformer_config.py (cpu_offloading_num_layers)"),
    Rule(("megatron",), lambda v: (v.pp > 1) & ~v.sched_in(("1f1b", "interleaved")),
         "Megatron-LM runs 1F1B and interleaved 1F1B only (no GPipe, BFS, zero-bubble or V schedules)",
         "schedule 1f1b (vpp 1) or interleaved (vpp > 1)", _MG + "megatron/core/pipeline_parallel/schedules.py"),
    Rule(("megatron",), lambda v: (v.pp > 1) & v.sched_in(("1f1b",)) & (v.vpp > 1),
         "Megatron-LM's 1F1B with several stages per rank is its interleaved schedule", "schedule interleaved",
         _MG + "megatron/core/pipeline_parallel/schedules.py"),
    Rule(("megatron",), lambda v: (v.pp > 1) & v.sched_in(("interleaved",)) & (v.vpp == 1),
         "interleaved 1F1B needs vpp > 1 in Megatron-LM", "schedule 1f1b", _MG + "megatron/core/pipeline_parallel/schedules.py"),
    Rule(("megatron",), lambda v: np.full(len(v.tp), v.offload_device == "nvme"),
         "Megatron-LM offloads the optimizer to host memory only (--optimizer-cpu-offload; no NVMe)", "offload_device cpu",
         _MG + "megatron/training/arguments.py (--optimizer-cpu-offload)"),
    Rule(("megatron",), lambda v: np.full(len(v.tp), v.offload == "optimizer+params"),
         "Megatron-LM offloads optimizer state only (--optimizer-cpu-offload), not parameters",
         "offload optimizer", _MG + "megatron/training/arguments.py (--optimizer-cpu-offload)"),
    Rule(("megatron",), lambda v: (np.full(len(v.tp), v.offload != "none")) & (v.zero == 0),
         "--optimizer-cpu-offload needs the distributed optimizer (zero >= 1)", "zero 1",
         _MG + "megatron/training/arguments.py"),
    Rule(("megatron",), lambda v: np.full(len(v.tp), v.dp_shard is not None) & (v.zero > 0),
         "hybrid sharding (dp_shard) is not written by the Megatron-LM export", "parallel.dp_shard left out",
         _SW + "handoff/megatron.py"),
    Rule(("megatron",), lambda v: np.full(len(v.tp), v.reshard_after_forward is False) & (v.zero == 3),
         "Megatron-FSDP optim_grads_params reshards after forward (keeping them is its optim_grads, zero 2)",
         "zero 2", _MG + "megatron/core/distributed/fsdp"),
    Rule(("megatron",), lambda v: np.full(len(v.tp), v.microbatch_group is not None) & (v.pp > 1)
         & (np.asarray(v.microbatch_group or 0) < v.pp),
         "Megatron-LM's interleaved schedule needs pp <= microbatch_group <= micro-batches", "microbatch_group >= pp",
         _MG + "megatron/core/pipeline_parallel/schedules.py"),
    # Megatron-LM's expert all-to-all overlap (--overlap-moe-expert-parallel-comm): TransformerConfig's asserts
    Rule(("megatron",), lambda v: _a2a_overlap(v) & ~v.value_in("dispatcher", ("alltoall", "deepep")),
         "Megatron-LM overlaps the expert all-to-alls with the alltoall or flex (DeepEP) dispatcher only",
         "moe.dispatcher alltoall or deepep", _MG + _A2A_SRC),
    Rule(("megatron",), lambda v: _a2a_overlap(v) & (v.rc == RECOMPUTE_FULL),
         "Megatron-LM's expert all-to-all overlap refuses full recompute", "recompute selective or none",
         _MG + _A2A_SRC),
    Rule(("megatron",), lambda v: _a2a_overlap(v) & (v.pp > 1) & (v.vpp == 1),
         "Megatron-LM's expert all-to-all overlap with pipeline parallelism needs a virtual pipeline (interleaved "
         "1F1B)", "schedule interleaved with vpp > 1, or moe.overlap_a2a unset", _MG + _A2A_SRC),
    Rule(("megatron",), lambda v: _a2a_overlap(v) & np.full(len(v.tp), v.precision == "fp32"),
         "Megatron-LM's expert all-to-all overlap needs a bf16 or fp16 model", "precision bf16", _MG + _A2A_SRC),
    # DeepSpeed
    Rule(("deepspeed",), lambda v: np.full(len(v.tp), v.precision in ("fp8", "fp4")),
         "DeepSpeed has no fp8/fp4 training switch in ds_config (low-precision GEMMs come from the model code, e.g. "
         "Transformer Engine layers)", "precision bf16", _DS + "deepspeed/runtime/config.py"),
    Rule(("deepspeed",), lambda v: (v.cp > 1) & ~v.value_in("cp_comm", ("a2a",)),
         "DeepSpeed's context parallelism is Ulysses (all-to-all over heads, sequence_parallel_size), not ring or "
         "all-gather attention", "cp_comm a2a", _DS + "deepspeed/runtime/sequence_parallel/ulysses_sp.py"),
    Rule(("deepspeed",), lambda v: (v.cp > 1) & ((v.tp > 1) | (v.pp > 1)),
         "DeepSpeed's Ulysses builds its groups over sequence x data parallelism only (no AutoTP, no pipeline)",
         "tp 1 and pp 1 with cp > 1", _DS + "deepspeed/runtime/sequence_parallel/parallel_state_sp.py"),
    Rule(("deepspeed",), lambda v: (v.ep > 1) & _mapped(v, DEEPSPEED_AUTOEP),
         "DeepSpeed's config-level expert parallelism (AutoEP) knows Mixtral, Qwen3-MoE and DeepSeek-V2/V3 layouts "
         "(preset_model)", "one of those models, or ep 1 (deepspeed.moe in the model code)",
         _DS + "deepspeed/module_inject/auto_ep_presets/registry.py"),
    Rule(("deepspeed",), lambda v: (v.ep > 1) & (v.etp > 1),
         "DeepSpeed AutoEP reserves expert_tensor_parallel_size (experts are not TP-split)", "etp 1",
         _DS + "deepspeed/module_inject/auto_ep_folding.py (validate_folding_global)"),
    Rule(("deepspeed",), lambda v: (v.ep > 1) & (v.pp > 1),
         "DeepSpeed AutoEP runs without pipeline parallelism here (AutoEP+AutoTP folding supports pp 1 only)", "pp 1",
         _DS + "deepspeed/module_inject/auto_ep_folding.py (validate_folding_global)"),
    Rule(("deepspeed",), lambda v: (v.ep > 1) & (v.zero == 3) & (v.cp > 1),
         "AutoEP with ZeRO-3 does not support sequence parallelism yet", "zero 1/2", _DS + "deepspeed/runtime/engine.py"),
    Rule(("deepspeed",), lambda v: (v.pp > 1) & (v.zero >= 2), "ZeRO-2 and ZeRO-3 are incompatible with DeepSpeed's "
         "pipeline engine", "zero 0 or 1 with pp > 1, or pp 1 with zero 2/3", _DS + "deepspeed/runtime/pipe/engine.py"),
    Rule(("deepspeed",), lambda v: (v.pp > 1) & ~(v.sched_in(("1f1b",)) & (v.vpp == 1)),
         "DeepSpeed's pipeline engine runs its own 1F1B TrainSchedule (its DualPipeV keeps W inside the backward, "
         "not the split dualpipev that was costed)", "schedule 1f1b with vpp 1",
         _DS + "deepspeed/runtime/pipe/schedule.py"),
    Rule(("deepspeed",), lambda v: (v.pp > 1) & (v.tp > 1), "DeepSpeed's pipeline engine does not combine with AutoTP "
         "tensor parallelism", "tp 1 with pp > 1, or pp 1 with tp > 1", _DS + "deepspeed/__init__.py (initialize)"),
    Rule(("deepspeed",), lambda v: (v.tp > 1) & (v.sp == 1), "DeepSpeed AutoTP keeps activations replicated across "
         "TP ranks (no sequence parallelism)", "sequence_parallel false",
         _DS + "deepspeed/runtime/tensor_parallel/config.py"),
    Rule(("deepspeed",), lambda v: (v.rc == 1) & (not v.flash_attention),
         "DeepSpeed checkpoints whole layers (no selective recompute of attention alone)", "recompute full or none",
         _DS + "deepspeed/runtime/activation_checkpointing/checkpointing.py"),
    Rule(("deepspeed",), lambda v: (v.offload_activations > 0) & ((v.rc != RECOMPUTE_FULL) | (v.offload_activations < 1.0)),
         "DeepSpeed offloads activations only as cpu_checkpointing: every checkpointed layer input of full "
         "recompute goes to host memory (share 1)", "recompute full with offload_activations 1, or 0",
         _DS + "deepspeed/runtime/activation_checkpointing/checkpointing.py (CPU_CHECKPOINT)"),
    Rule(("deepspeed",), lambda v: np.full(len(v.tp), v.offload_activations > 0)
         & (v.pp > 1) & (v.offload_activations_policy == "selective"),
         "DeepSpeed's cpu_checkpointing offloads on every pipeline stage alike (no per-stage selection)",
         "offload_activations_policy uniform", _DS + "deepspeed/runtime/activation_checkpointing/checkpointing.py (CPU_CHECKPOINT)"),
    Rule(("deepspeed",), lambda v: np.full(len(v.tp), v.offload == "optimizer+params") & (v.zero < 3),
         "DeepSpeed offloads parameters with ZeRO-3 only (offload_param)", "zero 3, or offload optimizer",
         _DS + "deepspeed/runtime/zero/config.py"),
    Rule(("deepspeed",), lambda v: np.full(len(v.tp), v.dp_shard is not None) & (v.zero > 0),
         "hybrid sharding is DeepSpeed MiCS (mics_shard_size), which the export does not write",
         "parallel.dp_shard left out", _SW + "handoff/deepspeed.py"),
    Rule(("deepspeed",), lambda v: np.full(len(v.tp), v.reshard_after_forward is False) & (v.zero == 3),
         "keeping ZeRO-3 parameters gathered for the step is not written by the DeepSpeed export", "zero 2",
         _SW + "handoff/deepspeed.py"),
)


def _megatron_fp8(recipe: str, job: TrainJob) -> list[str]:
    if recipe == "none":
        return []
    if recipe == "nvfp4":  # transformer_config.py fp4_recipe; --fp4-format e2m1
        return ["--fp4-format", "e2m1", "--fp4-recipe", recipe]
    return ["--fp8-format", "hybrid", "--fp8-recipe", recipe]


def _megatron_tp_overlap(mode: str, job: TrainJob) -> list[str]:
    if mode in ("bulk", "pipelined") and job.plan.tp > 1:  # Transformer Engine userbuffers
        return ["--tp-comm-overlap"] + (["--disable-tp-comm-overlap-ag", "--disable-tp-comm-overlap-rs"] if mode == "bulk" else [])
    return []


def _torchtitan_tp_overlap(mode: str, job: TrainJob) -> list[str]:
    if mode == "async" and job.plan.tp > 1:  # async TP runs under torch.compile (CompileConfig.__post_init__)
        return ["--compile.enable", "--compile.enable_async_tensor_parallel"]
    return []


def _microbatch_group(n: Any, job: TrainJob) -> list[str]:
    return [] if n in (None, "none") or job.plan.pp == 1 else ["--microbatch-group-size-per-virtual-pipeline-stage", str(n)]


def _megatron_grouped_gemm(value: str, job: TrainJob) -> list[str]:
    return ["--moe-grouped-gemm"] if value == "on" and job.model.is_moe else []  # off: SequentialMLP, a loop


def _megatron_a2a_overlap(value: str, job: TrainJob) -> list[str]:
    return ["--overlap-moe-expert-parallel-comm"] if value == "on" and job.plan.ep > 1 else []


def _allocator_env(name: str) -> Env:
    """The caching allocator's expandable segments, in the variable ``name`` (torch reads PYTORCH_ALLOC_CONF,
    and still the older PYTORCH_CUDA_ALLOC_CONF, which the releases before it read)."""
    return lambda value, job: {name: "expandable_segments:True"} if value == "on" else {}


def _megatron_dispatcher(name: str, job: TrainJob) -> list[str]:
    if not job.model.is_moe:
        return []
    if name == "deepep":  # the flex dispatcher with DeepEP's kernels
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    return ["--moe-token-dispatcher-type", name]


ALL_RECIPES = ("none", "tensorwise", "rowwise", "blockwise", "mxfp8", "delayed", "nvfp4", "mxfp4")
KNOBS: tuple[Knob, ...] = (
    Knob("recipe", {"torch": ALL_RECIPES,  # the executor checks numerics in fp32 (a note says so)
                    "torchtitan": ("none", "rowwise", "mxfp8", "nvfp4"),
                    "megatron": ("none", "tensorwise", "delayed", "blockwise", "mxfp8", "nvfp4"),
                    "deepspeed": ALL_RECIPES},  # its precision rule refuses fp8/fp4 first
         {"megatron": _megatron_fp8},  # torchtitan: a converter in the config module it is given
         "{engine} runs the low-precision recipes {values} only",
         {"torchtitan": _TT + "torchtitan/components/quantization/float8.py (Float8LinearConverter.Config.recipe_name)",
          "megatron": _MG + "megatron/core/transformer/transformer_config.py (fp8_recipe, fp4_recipe)"},
         versions={"torchtitan": ("0.3", None)}),
    Knob("recipe", {"torchtitan": ("none", "tensorwise", "rowwise", "mxfp8")}, {},
         "{engine} 0.2 runs the low-precision recipes {values} only",
         {"torchtitan": _TT02 + "torchtitan/config/job_config.py (Float8Linear.recipe_name, MXLinear)"},
         versions={"torchtitan": (None, "0.2.99")}),
    Knob("tp_overlap", {"torch": ("none", "bulk", "pipelined", "async"),  # TP runs un-overlapped on CPUs
                        "megatron": ("none", "bulk", "pipelined"), "torchtitan": ("none", "async"),
                        "deepspeed": ("none",)},
         {"megatron": _megatron_tp_overlap, "torchtitan": _torchtitan_tp_overlap},
         "{engine} runs tp_overlap {values} only",
         {"megatron": _MG + "megatron/core/model_parallel_config.py (tp_comm_overlap)",
          "torchtitan": _TT + "torchtitan/config/configs.py (CompileConfig.enable_async_tensor_parallel)",
          "deepspeed": _DS + "deepspeed/runtime/tensor_parallel/config.py"},
         matters=lambda v: v.tp > 1),
    Knob("microbatch_group", {"torch": ("none",), "torchtitan": ("none",), "deepspeed": ("none",)},
         {"megatron": _microbatch_group},
         "{engine} takes no micro-batch group size (Megatron-LM's interleaved-schedule knob)",
         {"torchtitan": _PT + "torch/distributed/pipelining/schedules.py (Interleaved1F1B rounds of pp)",
          "megatron": _MG + "megatron/training/arguments.py (--microbatch-group-size-per-virtual-pipeline-stage)"},
         matters=lambda v: v.pp > 1),
    Knob("dispatcher", {"torchtitan": ("alltoall",), "megatron": ("alltoall", "allgather", "deepep"),
                        "deepspeed": ("alltoall", "deepep")},
         {"megatron": _megatron_dispatcher},  # DeepSpeed: expert_parallel.comm_backend in ds_config
         "{engine} dispatches MoE tokens by {values} only",
         {"torchtitan": _TT + "torchtitan/models/qwen3/config_registry.py (all-to-all; DeepEP needs its own config)",
          "megatron": _MG + "megatron/training/arguments.py (--moe-token-dispatcher-type, --moe-flex-dispatcher-backend)",
          "deepspeed": _DS + "deepspeed/module_inject/auto_ep_config.py (comm_backend)"},
         matters=lambda v: v.ep > 1),
    Knob("grouped_gemm", {"torch": ("on", "off"), "torchtitan": ("on",), "megatron": ("on", "off"),
                          "deepspeed": ("on", "off")},
         {"megatron": _megatron_grouped_gemm},  # DeepSpeed: expert_parallel.use_grouped_mm in ds_config
         "{engine} runs the experts' GEMMs as grouped GEMMs only (no per-expert loop)",
         {"torchtitan": _TT + "torchtitan/models/common/moe.py (GroupedExperts: torch._grouped_mm)",
          "megatron": _MG + "megatron/training/arguments.py (--moe-grouped-gemm; without it SequentialMLP)",
          "deepspeed": _DS + "deepspeed/module_inject/auto_ep_config.py (use_grouped_mm)"},
         matters=_moe, instead="moe.grouped_gemm true"),
    Knob("overlap_a2a", {"torch": ("default", "on", "off"), "torchtitan": ("default", "off"),
                         "megatron": ("default", "on", "off"), "deepspeed": ("default", "off")},
         {"megatron": _megatron_a2a_overlap},
         "{engine} has no switch that hides the expert all-to-alls under another micro-batch's compute",
         {"torchtitan": _TT + "torchtitan/models/common/token_dispatcher.py (the all-to-alls run inside the layer, no cross-micro-batch overlap)",
          "megatron": _MG + "megatron/training/arguments.py (--overlap-moe-expert-parallel-comm)",
          "deepspeed": _DS + "deepspeed/module_inject/auto_ep_config.py (no overlap setting)"},
         matters=lambda v: v.ep > 1, instead="moe.overlap_a2a unset or false"),
    Knob("expandable_segments", {e: ("on", "off") for e in ENGINES}, {},
         "{engine} runs the caching allocator either way", {}, env={
             "torchtitan": _allocator_env("PYTORCH_ALLOC_CONF"),  # as torchtitan's run_train.sh exports it
             "megatron": _allocator_env("PYTORCH_CUDA_ALLOC_CONF"), "deepspeed": _allocator_env("PYTORCH_CUDA_ALLOC_CONF")}),
)


def _rules_of(engine: str, version: str | None) -> tuple[str, str | None]:
    key = rules_key(engine)
    return (engine, version) if key == engine else (key, None)


def rules(engine: str, version: str | None = None) -> tuple[Rule, ...]:
    """Every rule that holds for ``engine`` at ``version`` (default: the pinned one), knobs' included. A
    target registered with another engine's rules (``ExportTarget.rules``) gets that engine's, at its pin."""
    engine, version = _rules_of(engine, version)
    out = [r for r in RULES if r.holds(engine, version)]
    out += [k.rule(engine) for k in KNOBS if engine in k.runs and k.rule(engine).holds(engine, version)]
    return tuple(out)


def knob_words(engine: str, job: TrainJob, version: str | None = None) -> list[str]:
    """What ``engine``'s launch writes for the plan's costed choices (the knobs' words, in table order)."""
    from shardwise.engines.plan_view import PlanView

    view = PlanView.of_job(job)
    out: list[str] = []
    for k in KNOBS:
        if engine in k.words and (engine not in k.runs or k.rule(engine).holds(engine, version)):
            out += k.words[engine](view.scalar(k.field), job)
    return out


def knob_env(engine: str, job: TrainJob, version: str | None = None) -> dict[str, str]:
    """The environment ``engine``'s launch sets for the plan's costed choices (expandable segments)."""
    from shardwise.engines.plan_view import PlanView

    view = PlanView.of_job(job)
    out: dict[str, str] = {}
    for k in KNOBS:
        if engine in k.env and (engine not in k.runs or k.rule(engine).holds(engine, version)):
            out |= k.env[engine](view.scalar(k.field), job)
    return out


def runs_values(field: str, engine: str, version: str | None = None) -> tuple[str, ...] | None:
    """The values of knob ``field`` that ``engine`` runs (None: every value)."""
    engine, version = _rules_of(engine, version)
    for k in KNOBS:
        if k.field == field and engine in k.runs and k.rule(engine).holds(engine, version):
            return k.runs[engine]
    return None


def tp_overlap_modes(engine: str) -> tuple[str, ...]:
    """The TP overlap modes ``engine`` runs (what the planner may choose for it)."""
    engine = _rules_of(engine, None)[0]
    return next(k.runs.get(engine, ("none",)) for k in KNOBS if k.field == "tp_overlap")
