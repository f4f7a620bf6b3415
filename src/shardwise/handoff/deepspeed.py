"""DeepSpeed ``ds_config.json`` and launcher for a training plan.

Keys (DeepSpeed 0.19.8, ``deepspeed/runtime/config.py`` and the ``zero``, ``activation_checkpointing`` and
``tensor_parallel`` config modules): ``train_batch_size`` = ``train_micro_batch_size_per_gpu`` x
``gradient_accumulation_steps`` x data-parallel size (asserted by ``DeepSpeedConfig._batch_assertion``);
``bf16``/``fp16`` ``enabled``; ``zero_optimization.stage`` 0-3 with ``overlap_comm``; tensor parallelism as
AutoTP (``tensor_parallel.autotp_size``); ``activation_checkpointing`` configures
``deepspeed.checkpointing``, which the training script applies per layer (full recompute). Pipeline
parallelism is a ``PipelineModule(num_stages=pp)`` built by the training script; its engine runs 1F1B
(``runtime/pipe/schedule.py`` ``TrainSchedule``), so the config only carries the batch identity.
"""

from __future__ import annotations

import json

from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export
from shardwise.specs.job import TrainJob

VERSION = "0.19.8"


def ds_config(job: TrainJob) -> dict:
    p, tr = job.plan, job.training
    cfg: dict = {
        "train_batch_size": tr.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": job.microbatches,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": tr.precision == "bf16"},
        "fp16": {"enabled": tr.precision == "fp16"},
        "zero_optimization": {"stage": p.zero, "overlap_comm": bool(p.overlap_grad_reduce), "contiguous_gradients": True},
        "steps_per_print": 10,
    }
    if p.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    return cfg


def export_deepspeed(job: TrainJob, version: str = VERSION) -> Export:
    from shardwise.engines.support import require

    require(job.plan, "deepspeed", job.model, job.training)
    if job.plan.tp_overlap not in ("auto", "none") and job.plan.tp > 1:
        raise ShardwiseError(f"DeepSpeed cannot run tp_overlap {job.plan.tp_overlap}; would run: tp_overlap none")
    notes = []
    if job.training.precision == "fp8":
        notes.append("fp8: DeepSpeed has no fp8 switch in ds_config; the config trains in bf16 (use Transformer Engine layers in the model for fp8)")
    if job.plan.pp > 1:
        notes.append(f"pp {job.plan.pp}: build the model as deepspeed.pipe.PipelineModule(layers, num_stages={job.plan.pp}); "
                     "its engine runs 1F1B")
    if job.plan.recompute == "full":
        notes.append("recompute full: wrap each transformer layer in deepspeed.checkpointing.checkpoint")
    cfg = ds_config(job)
    if job.training.precision == "fp8":
        cfg["bf16"]["enabled"] = True
    text = json.dumps(cfg, indent=2) + "\n"
    per_node = min(job.cluster.gpus_per_node, job.cluster.num_gpus)
    launcher = ["deepspeed", "--num_nodes", str(job.cluster.nodes), "--num_gpus", str(per_node)]
    if job.cluster.nodes > 1:
        launcher += ["--hostfile", "${HOSTFILE:-hostfile}"]
    launcher.append("${TRAIN_SCRIPT:-train.py}")
    return Export("deepspeed", version, ["--deepspeed", "--deepspeed_config", "ds_config.json"], launcher, {},
                  {}, ("ds_config.json", text), notes, title=job.name)
