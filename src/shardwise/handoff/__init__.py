"""Hand-off: a plan as the launch of the engine that will run it.

Training (:func:`export_train`): torchtitan, Megatron-LM, DeepSpeed; serving (:func:`export_serve`):
vLLM, SGLang. Plans an engine cannot run are refused with one line saying why and what would run
(:mod:`shardwise.engines.support`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.errors import ShardwiseError
from shardwise.handoff.common import FORMATS, Export

if TYPE_CHECKING:
    from shardwise.serve.config import ServeJob
    from shardwise.specs.job import TrainJob

TRAIN_ENGINES = ("torchtitan", "megatron", "deepspeed")
SERVE_ENGINES = ("vllm", "sglang")


def export_train(job: TrainJob, to: str, version: str | None = None) -> Export:
    """The launch of ``job``'s plan in engine ``to`` (optionally at ``version``)."""
    from shardwise.specs.hetero import one_gpu_type

    one_gpu_type(job, "train export")
    key = (to or "").strip().lower()
    if key == "torchtitan":
        from shardwise.handoff.torchtitan import export_torchtitan as fn
    elif key == "megatron":
        from shardwise.handoff.megatron import export_megatron as fn
    elif key == "deepspeed":
        from shardwise.handoff.deepspeed import export_deepspeed as fn
    else:
        raise ShardwiseError(f"--to must be one of {', '.join(TRAIN_ENGINES)}, got {to!r}")
    return fn(job, version) if version else fn(job)


def export_serve(job: ServeJob, to: str, version: str | None = None) -> list[Export]:
    """One launch per pool of ``job``'s deployment in engine ``to`` (vllm or sglang)."""
    from shardwise.handoff.serving import export_serving

    key = (to or "").strip().lower()
    if key not in SERVE_ENGINES:
        raise ShardwiseError(f"--to must be one of {', '.join(SERVE_ENGINES)}, got {to!r}")
    return export_serving(job, key, version)


__all__ = ["FORMATS", "SERVE_ENGINES", "TRAIN_ENGINES", "Export", "export_serve", "export_train"]
