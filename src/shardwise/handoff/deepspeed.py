"""DeepSpeed ``ds_config.json`` and launcher for a training plan.

Keys (DeepSpeed 0.19.8, ``deepspeed/runtime/config.py`` and the ``zero``, ``activation_checkpointing``,
``tensor_parallel`` and ``expert_parallel`` config modules). The batch identity is the one
``deepspeed.initialize`` checks (``DeepSpeedConfig._batch_assertion``): ``train_batch_size`` =
``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x the world size its config sees.
Without an mpu that is every rank for AutoTP (``tensor_parallel.autotp_size``: the TP ranks of one
data-parallel replica read the same samples, so the config gives only the micro-batch and accumulation
steps and DeepSpeed derives its count), the ranks over ``sequence_parallel_size`` for Ulysses context
parallelism, and the pipeline module's data-parallel size for a ``PipelineModule``. ``bf16``/``fp16``
``enabled``; ``zero_optimization.stage`` 0-3 with ``overlap_comm``, ``offload_optimizer`` /
``offload_param`` for ZeRO-Offload (``device: cpu``) and ZeRO-Infinity (``device: nvme`` with ``nvme_path``,
``parallel.offload_device: nvme``; ``deepspeed/runtime/zero/offload_config.py``); experts as AutoEP (``expert_parallel``: ``autoep_size``, the model's
``preset_model``, ``comm_backend`` comm (all-to-all) or deepep); ``activation_checkpointing`` configures
``deepspeed.checkpointing``, which the training script applies per layer (full recompute). Pipeline
parallelism is a ``PipelineModule(num_stages=pp)`` built by the training script; its engine runs 1F1B
(``runtime/pipe/schedule.py`` ``TrainSchedule``).
"""

from __future__ import annotations

import json

from shardwise.engines.table import DEEPSPEED_AUTOEP, knob_env
from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export
from shardwise.specs.job import TrainJob
from shardwise.specs.model_ref import load_model

VERSION = "0.19.8"
#: Where the ZeRO-Infinity export points DeepSpeed's NVMe swap files: a local NVMe mount (edit to the
#: node's; DeepSpeed's offload_config.py requires nvme_path with device nvme).
NVME_PATH = "/local_nvme"


def autoep_preset(job: TrainJob) -> str:
    """AutoEP's preset_model for the job's model: the preset of the same architecture
    (:attr:`ModelSpec.architecture`), its own name's first (the engine rules checked there is one)."""
    m = job.model
    for name in sorted(DEEPSPEED_AUTOEP, key=lambda n: n != m.name):
        if load_model(name).architecture == m.architecture:
            return DEEPSPEED_AUTOEP[name]
    raise ShardwiseError(f"model {m.name}: DeepSpeed AutoEP has no preset of this architecture")


def ds_config(job: TrainJob) -> dict:
    p, tr = job.plan, job.training
    cfg: dict = {"train_micro_batch_size_per_gpu": p.micro_batch, "gradient_accumulation_steps": job.microbatches}
    if p.tp == 1:  # DeepSpeed's data-parallel count is the plan's: give the global batch too
        cfg = {"train_batch_size": tr.global_batch, **cfg}
    zero: dict = {"stage": p.zero, "overlap_comm": bool(p.overlap_grad_reduce), "contiguous_gradients": True}
    if p.offload != "none":  # ZeRO-Offload to host DRAM, or ZeRO-Infinity to NVMe (zero 3 only)
        where = {"device": p.offload_device, "pin_memory": True}
        if p.offload_device == "nvme":
            where["nvme_path"] = NVME_PATH
        zero["offload_optimizer"] = dict(where)
        if p.offload == "optimizer+params":
            zero["offload_param"] = dict(where)
    cfg |= {
        "gradient_clipping": 1.0,
        "bf16": {"enabled": tr.precision == "bf16"},
        "fp16": {"enabled": tr.precision == "fp16"},
        "zero_optimization": zero,
        "steps_per_print": 10,
    }
    if p.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
    if p.cp > 1:  # Ulysses: all-to-all over heads (the table admits cp_comm a2a only)
        cfg["sequence_parallel_size"] = p.cp
    if job.model.is_moe and p.ep > 1:
        cfg["expert_parallel"] = {"enabled": True, "autoep_size": p.ep, "preset_model": autoep_preset(job),
                                  "comm_backend": "deepep" if tr.moe.dispatcher == "deepep" else "comm"}
        if not tr.moe.grouped_gemm:  # the sequential expert loop (auto_ep_config.py use_grouped_mm)
            cfg["expert_parallel"]["use_grouped_mm"] = False
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": p.offload_activations > 0}
    return cfg


def export_deepspeed(job: TrainJob, version: str = VERSION) -> Export:
    from shardwise.engines.support import require_job

    require_job(job, "deepspeed", version)
    p = job.plan
    notes = []
    if p.tp > 1:
        notes.append(f"AutoTP: DeepSpeed counts all {job.cluster.num_gpus} ranks in train_batch_size (its config has no "
                     f"mpu); the {p.tp} TP ranks of a replica read the same samples, so {job.training.global_batch} "
                     "distinct sequences make one step")
    if p.cp > 1:
        notes.append(f"Ulysses: register the attention with deepspeed.runtime.sequence_parallel.ulysses_sp."
                     f"UlyssesSPAttentionHF.register_with_transformers(..., sequence_parallel_size={p.cp}, "
                     f"micro_batch_size={p.micro_batch}) and pass its mpu to deepspeed.initialize")
    if job.plan.pp > 1:
        notes.append(f"pp {job.plan.pp}: build the model as deepspeed.pipe.PipelineModule(layers, num_stages={job.plan.pp}); "
                     "its engine runs 1F1B")
    if job.plan.recompute == "full":
        notes.append("recompute full: wrap each transformer layer in deepspeed.checkpointing.checkpoint")
    cfg = ds_config(job)
    text = json.dumps(cfg, indent=2) + "\n"
    per_node = min(job.cluster.gpus_per_node, job.cluster.num_gpus)
    launcher = ["deepspeed", "--num_nodes", str(job.cluster.nodes), "--num_gpus", str(per_node)]
    if job.cluster.nodes > 1:
        launcher += ["--hostfile", "${HOSTFILE:-hostfile}"]
    launcher.append("${TRAIN_SCRIPT:-train.py}")
    env = knob_env("deepspeed", job, version)
    files = {}
    if env and job.cluster.nodes > 1:  # the launcher ships .deepspeed_env to every node (launcher/runner.py)
        files[".deepspeed_env"] = "".join(f"{k}={v}\n" for k, v in env.items())
    return Export("deepspeed", version, ["--deepspeed", "--deepspeed_config", "ds_config.json"], launcher, env,
                  files, ("ds_config.json", text), notes, title=job.name)
