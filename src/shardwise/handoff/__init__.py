"""Hand-off: a plan as the launch of the engine that will run it.

Training (:func:`export_train`): torchtitan, Megatron-LM, DeepSpeed; serving (:func:`export_serve`):
vLLM, SGLang; each dispatched through its entry in :mod:`shardwise.engines.targets`. Plans an engine cannot run are refused with one line saying why and what would run
(:mod:`shardwise.engines.support`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.engines import targets
from shardwise.handoff.common import FORMATS, Export

if TYPE_CHECKING:
    from shardwise.serve.config import ServeJob
    from shardwise.specs.job import TrainJob

#: The export targets' names, from the registry (:mod:`shardwise.engines.targets`; one registered later is
#: read from there at call time).
TRAIN_ENGINES = targets.names("training")
SERVE_ENGINES = targets.names("serving")


def export_train(job: TrainJob, to: str, version: str | None = None) -> Export:
    """The launch of ``job``'s plan in training target ``to`` (optionally at ``version``)."""
    from shardwise.specs.hetero import one_gpu_type

    one_gpu_type(job, "train export")
    fn = targets.get(to, "training").export_fn()
    return fn(job, version) if version else fn(job)


def export_serve(job: ServeJob, to: str, version: str | None = None) -> list[Export]:
    """One launch per pool of ``job``'s deployment in serving target ``to`` (vllm or sglang)."""
    target = targets.get(to, "serving")
    return target.export_fn()(job, target.name, version)


__all__ = ["FORMATS", "SERVE_ENGINES", "TRAIN_ENGINES", "Export", "export_serve", "export_train"]
