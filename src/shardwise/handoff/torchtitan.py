"""torchtitan launch of a training plan.

0.3.x (default; pytorch/torchtitan 0.3.0 on PyPI): ``python -m torchtitan.train --module M --config C``
plus tyro flags ``--parallelism.*`` / ``--training.*`` (``config/configs.py``) and the activation
checkpointing subcommand ``activation-checkpoint:{none,selective,full}`` (``trainer.py``,
``Trainer.Config.activation_checkpoint``). The model comes from torchtitan's ``config_registry``; float8 is
a converter of that config, not a flag. 0.2.x (tag v0.2.2): one TOML job file (``config/job_config.py``:
``[model] name/flavor/converters``, ``[activation_checkpoint] mode``) passed as ``--job.config_file``.

What is made explicit so torchtitan runs the stages that were timed:
- the layer split: ``module_fqns_per_model_part`` lists each stage's modules (``tok_embeddings``,
  ``layers.i``, ``norm``, ``lm_head`` -- ``output`` in 0.2) as :func:`shardwise.train.stages.stage_contents`
  places them;
- the schedule: torch.distributed.pipelining's class by name where our IR equals it (``GPipe``, ``1F1B``,
  ``Interleaved1F1B``, ``LoopedBFS``, ``InterleavedZeroBubble``, ``ZBVZeroBubble``, ``DualPipeV``;
  tests/pipeline/test_sched_torch.py), otherwise our CSV in ``pipeline_parallel_schedule_csv`` (run by
  ``_PipelineScheduleRuntime``) with a class name that gives the same stage placement
  (``distributed/pipeline_parallel.py``: ``ZBVZeroBubble`` and ``DualPipeV`` place stages in a V);
- ``--training.disable_cuda_graphs`` when pp > 1 or ep > 1 (``Trainer.Config._validate_cuda_graphs``).

Batch identity (``TrainingConfig``): ``local_batch_size`` is per data-parallel rank per optimizer step
when pp > 1 (split into micro-batches of ``pipeline_parallel_microbatch_size``) and per
gradient-accumulation step otherwise; ``global_batch_size`` is the plan's global batch.
"""

from __future__ import annotations

from shardwise.engines.table import TORCHTITAN_MODELS, knob_env, knob_words
from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export, torchrun
from shardwise.pipeline import resolve, schedule_info
from shardwise.pipeline.schedule_info import V
from shardwise.specs.job import TrainJob
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.train.stages import stage_contents

#: Our presets -> torchtitan (module, 0.3 config function, 0.2 flavor): the engine-rules table's list.
MODELS = TORCHTITAN_MODELS
#: torchtitan's model_registry flavor of each 0.3 config function (models/*/__init__.py configs dicts).
FLAVORS = {"llama3_8b": "8B", "llama3_70b": "70B", "llama3_405b": "405B", "qwen3_30b_a3b": "30B-A3B",
           "deepseek_v3_671b": "671B"}
#: config functions whose model already carries a low-precision converter (llama3_405b applies float8)
CONVERTED = {"llama3_405b"}
RECOMPUTE = {"none": "none", "selective": "selective", "full": "full"}


def torchtitan_model(model: ModelSpec) -> tuple[str, str, str]:
    """torchtitan's (module, config, flavor) for ``model``: the config of the preset of the same
    architecture (:attr:`ModelSpec.architecture`), its own name's first; a model that only shares a
    preset's name is not that preset."""
    for name in sorted(MODELS, key=lambda n: n != model.name):
        if load_model(name).architecture == model.architecture:
            return MODELS[name]
    known = ", ".join(sorted({c for _, c, _ in MODELS.values()}))
    raise ShardwiseError(f"model {model.name}: torchtitan has no config with this architecture (it has {known}); "
                         "add one to torchtitan's config_registry or export to megatron/deepspeed")


def schedule_choice(name: str, pp: int, vpp: int) -> tuple[str, bool]:
    """(class name, needs our CSV). The class name sets the stage placement either way."""
    info = schedule_info(name)
    native = info.torch_class_at(vpp)  # ScheduleInfo.torch_class, where its order equals ours
    if native is not None:
        return native.removeprefix("Schedule"), False
    if info.placement_at(vpp) == V:
        return "ZBVZeroBubble", True
    return ("Interleaved1F1B" if vpp > 1 else "1F1B"), True


def stage_modules(model: ModelSpec, stages: int, output: str = "lm_head") -> list[list[str]]:
    """Module FQNs of each (virtual) stage, in model order."""
    out, first = [], 0
    for st in stage_contents(model, stages):
        mods = ["tok_embeddings"] if st.embedding else []
        mods += [f"layers.{i}" for i in range(first, first + st.layers)]
        first += st.layers
        if st.lm_head:
            mods += ["norm", output]
        out.append(mods)
    return out


def export_torchtitan(job: TrainJob, version: str = "0.3.0") -> Export:
    from shardwise.engines.plan_view import PlanView
    from shardwise.engines.support import require_job
    from shardwise.pipeline import generate_schedule, write_csv_text

    p, model, tr = job.plan, job.model, job.training
    major = _version(version)
    require_job(job, "torchtitan", version)
    module, config, flavor = torchtitan_model(model)
    sched_name = resolve(p.schedule)
    vpp = schedule_info(sched_name).vpp_rule.held(p.pp, p.vpp)
    dp = p.dp or 1
    m = job.microbatches
    notes: list[str] = []
    recipe = PlanView.of_job(job).scalar("recipe")  # the costed low-precision recipe ("none": 16-bit)
    if p.zero == 0:
        dp_rep, dp_shard, reshard = dp, 1, None
    elif p.zero == 3:  # torchtitan's default keeps the stage gathered under PP, as the estimate does (cost/stack.py)
        dp_rep, dp_shard = 1, dp
        reshard = {None: "default", True: "always", False: "never"}[p.reshard_after_forward]
    else:
        dp_rep, dp_shard, reshard = 1, dp, "never"
    par: dict[str, object] = {
        "data_parallel_replicate_degree": dp_rep, "data_parallel_shard_degree": dp_shard,
        "tensor_parallel_degree": p.tp, "context_parallel_degree": p.cp,
        "expert_parallel_degree": p.ep, "pipeline_parallel_degree": p.pp,
    }
    if reshard and dp_shard > 1:
        par["fsdp_reshard_after_forward"] = reshard
    files: dict[str, str] = {}
    if p.pp > 1:
        cls, csv = schedule_choice(sched_name, p.pp, vpp)
        par["pipeline_parallel_schedule"] = cls
        par["pipeline_parallel_microbatch_size"] = p.micro_batch
        par["module_fqns_per_model_part"] = stage_modules(model, p.pp * vpp, "lm_head" if major >= (0, 3) else "output")
        if csv:
            fname = f"schedule-{sched_name}-pp{p.pp}-m{m}.csv"
            files[fname] = write_csv_text(generate_schedule(sched_name, p.pp, m, vpp if vpp > 1 else None))
            par["pipeline_parallel_schedule_csv"] = fname
    local = p.micro_batch * m if p.pp > 1 else p.micro_batch
    training = {"local_batch_size": local, "global_batch_size": tr.global_batch, "seq_len": tr.seq_len,
                "mixed_precision_param": "float32" if tr.precision == "fp32" else "bfloat16"}
    if p.offload == "optimizer+params":  # FSDP2 CPU offload of parameters, gradients and optimizer state
        training["enable_cpu_offload"] = True
    if p.tp > 1 and not p.sequence_parallel:
        if major >= (0, 3):
            par["enable_sequence_parallel"] = False
        else:
            notes.append("torchtitan 0.2 always uses sequence parallelism with TP")
    if p.recompute == "selective" and p.flash_attention:
        notes.append("selective recompute: torchtitan's per-op SAC also recomputes matmuls (memory lower than planned)")
    if major >= (0, 3):
        return _export_03(job, module, config, par, training, files, notes, version, recipe)
    return _export_02(job, module, flavor, par, training, files, notes, version, recipe)


def _version(text: str) -> tuple[int, int]:
    try:
        parts = [int(x) for x in text.strip().lstrip("v").split(".")[:2]]
    except ValueError:
        raise ShardwiseError(f"--engine-version: {text!r} is not a torchtitan version like 0.3.0 or 0.2.2") from None
    v = (parts + [0])[:2]
    if tuple(v) < (0, 2) or tuple(v) > (0, 3):
        raise ShardwiseError(f"--engine-version: torchtitan {text} is not supported; use 0.3.x (flags) or 0.2.x (TOML)")
    return v[0], v[1]


def _flag(section: str, key: str, value: object) -> list[str]:
    if isinstance(value, bool):
        return [f"--{section}.{key}" if value else f"--{section}.no_{key}"]
    if isinstance(value, list):
        return [f"--{section}.{key}", *(",".join(v) for v in value)]
    return [f"--{section}.{key}", str(value)]


CONFIG_MODULE = "shardwise_torchtitan_config"


def _converters(module: str, recipe: str, moe: bool) -> list[str]:
    """torchtitan 0.3 converters (components/quantization) that run ``recipe`` on the transformer blocks'
    linear layers (and, for MoE models, the experts' grouped GEMMs); the LM head and the router stay in
    16-bit, as the estimate assumes (cost/lowp.py)."""
    skip = '["lm_head", "router.gate"]' if moe else '["lm_head"]'
    if recipe == "rowwise":
        out = [f'Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns={skip}, model_compile_enabled=compiled)']
        return out + (["Float8GroupedExpertsConverter.Config(model_compile_enabled=compiled)"] if moe else [])
    if recipe == "mxfp8":
        out = ["MXFP8LinearConverter.Config(fqns=[\"layers\"], model_compile_enabled=compiled)"]
        return out + (["MXFP8GroupedExpertsConverter.Config(model_compile_enabled=compiled)"] if moe else [])
    if recipe == "nvfp4":
        return ['NVFP4LinearConverter.Config(fqns=["layers"], model_compile_enabled=compiled)']
    return []


def config_module(module: str, config: str, recipe: str, moe: bool) -> str:
    """A config_registry module (``--module shardwise_torchtitan_config``) whose function is torchtitan's
    ``config`` with the model's converters set to the costed recipe (none for a 16-bit plan)."""
    conv = _converters(module, recipe, moe)
    classes = sorted({c.split(".")[0] for c in conv})
    lines = [f'"""torchtitan config written by shardwise: {config} with low-precision recipe {recipe}."""', ""]
    if classes:
        lines.append(f"from torchtitan.components.quantization import {', '.join(classes)}")
    lines += [f"from torchtitan.models.{module} import model_registry",
              f"from torchtitan.models.{module}.config_registry import {config}", "", "",
              f"def shardwise_{config}():", f"    config = {config}()",
              '    compiled = config.compile.enable and "model" in config.compile.components',
              f'    config.model_spec = model_registry("{FLAVORS[config]}", converters=[' + ", ".join(conv) + "])",
              "    return config", ""]
    return "\n".join(lines)


def _export_03(job: TrainJob, module: str, config: str, par: dict[str, object], training: dict[str, object],
               files: dict[str, str], notes: list[str], version: str, recipe: str) -> Export:
    p = job.plan
    env = knob_env("torchtitan", job, version)  # expandable segments, as the estimate costed the allocator
    if recipe != "none" or config in CONVERTED:  # the recipe is a converter of the config: our own config module
        files[f"{CONFIG_MODULE}.py"] = config_module(module, config, recipe, job.model.is_moe)
        args = ["--module", CONFIG_MODULE, "--config", f"shardwise_{config}"]
        env["PYTHONPATH"] = ".${PYTHONPATH:+:$PYTHONPATH}"
        if recipe != "none":
            notes.append(f"{recipe}: the converters in {CONFIG_MODULE}.py need torchao and a GPU that runs the recipe")
    else:
        args = ["--module", module, "--config", config]
    for k, v in par.items():
        args += _flag("parallelism", k, v)
    for k, v in training.items():
        args += _flag("training", k, v)
    if p.pp > 1 or p.ep > 1:
        args.append("--training.disable_cuda_graphs")
    args += knob_words("torchtitan", job, version)  # TP overlap (async TP)
    args.append(f"activation-checkpoint:{RECOMPUTE[p.recompute]}")
    return Export("torchtitan", version, args, _launcher(job, "torchtitan.train"), env, files, None, notes, title=job.name)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _export_02(job: TrainJob, module: str, flavor: str, par: dict[str, object], training: dict[str, object],
               files: dict[str, str], notes: list[str], version: str, recipe: str) -> Export:
    p = job.plan
    model: dict[str, object] = {"name": module, "flavor": flavor}
    quantize: dict[str, object] = {}
    if recipe in ("tensorwise", "rowwise"):  # job_config.py Float8Linear.recipe_name (None is tensorwise)
        model["converters"] = ["quantize.linear.float8"]
        quantize = {"recipe_name": recipe, "filter_fqns": ["output"]}
    elif recipe == "mxfp8":
        model["converters"] = ["quantize.linear.mx"]
    par = {k: v for k, v in par.items() if k != "enable_sequence_parallel"}
    sections = {"model": model, "training": training, "parallelism": par,
                "activation_checkpoint": {"mode": RECOMPUTE[p.recompute]}}
    if quantize:
        sections["quantize.linear.float8"] = quantize
    if p.tp_overlap == "async" and p.tp > 1:  # 0.2: [compile] enable, [parallelism] enable_async_tensor_parallel
        sections["compile"] = {"enable": True, "components": ["model", "loss"]}
        par["enable_async_tensor_parallel"] = True
    text = "# torchtitan <= 0.2 job config written by shardwise\n"
    for name, body in sections.items():
        text += f"\n[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in body.items())
    fname = f"{job.name}-torchtitan.toml"
    return Export("torchtitan", version, ["--job.config_file", fname], _launcher(job, "torchtitan.train"),
                  knob_env("torchtitan", job, version), files, (fname, text), notes, title=job.name)


def _launcher(job: TrainJob, module: str) -> list[str]:
    per_node = min(job.cluster.gpus_per_node, job.cluster.num_gpus)
    return torchrun(per_node, job.cluster.nodes, module=module)
