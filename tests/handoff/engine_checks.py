"""Each engine's own code on an export: what it accepts (or the exception it raises), as the launch would.

- torchtitan 0.3.0: ``ConfigManager().parse_args(args)`` (the config module an fp8 export writes is
  imported from the export's files; the converters' GPU-only constructors are replaced by recorders, so the
  test sees which converters with which recipe the config asks for), then ``ParallelDims.from_config`` on
  the plan's world size.
- DeepSpeed 0.19.8: ``DeepSpeedConfig`` as ``deepspeed.initialize`` builds it, without an mpu, on the
  world size the launcher gives (``deepspeed.comm`` answers the plan's world size and rank 0); a pipeline
  plan gets the mpu ``PipelineModule`` builds (``PipelineParallelGrid`` over DeepSpeed's own
  ``PipeDataParallelTopology``, its process groups not created); AutoEP's own ``validate_autoep_config``
  and ``validate_folding_global``.
- Megatron-LM: every flag against the table extracted from its parser; with ``MEGATRON_LM`` set, its own
  ``parse_args`` + ``validate_args`` (scripts/megatron_check.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchtitan.distributed.parallel_dims import ParallelDims

    from shardwise.handoff.common import Export
    from shardwise.specs.job import TrainJob

ROOT = Path(__file__).resolve().parents[2]
MEGATRON_LM = os.environ.get("MEGATRON_LM")
ARCH_MAJOR = {"ampere": 8, "ada": 8, "hopper": 9, "blackwell": 10}


@contextlib.contextmanager
def _recorded_converters(seen: list) -> Iterator[None]:
    """torchtitan's quantization converters need torchao and a GPU to build; record their configs instead."""
    from torchtitan.components import quantization as q

    classes = [q.Float8LinearConverter, q.Float8GroupedExpertsConverter, q.MXFP8LinearConverter,
               q.MXFP8GroupedExpertsConverter, q.NVFP4LinearConverter]
    saved = [(c, c.__init__, c.convert) for c in classes]

    def init(self, config):
        self.config = config
        seen.append(config)

    try:
        for c in classes:
            c.__init__ = init
            c.convert = lambda self, model_config: model_config
        yield
    finally:
        for c, i, conv in saved:
            c.__init__, c.convert = i, conv


def torchtitan_config(exp: Export, tmp: Path) -> tuple[Any, list]:
    """(torchtitan's config of the export, the converter configs it asked for). The config is an instance of
    the ``Trainer.Config`` class the export's config module registers (torchtitan builds it at run time)."""
    from torchtitan.config import ConfigManager

    for name, text in exp.files.items():
        (tmp / name).write_text(text)
    seen: list = []
    sys.path.insert(0, str(tmp))
    try:
        with _recorded_converters(seen):
            for mod in [m for m in sys.modules if m.startswith("shardwise_torchtitan_config")]:
                del sys.modules[mod]
            cfg = ConfigManager().parse_args(list(exp.args))
    finally:
        sys.path.remove(str(tmp))
    return cfg, seen


def torchtitan_accepts(exp: Export, job: TrainJob, tmp: Path) -> tuple[Any, ParallelDims, list]:
    from torchtitan.distributed.parallel_dims import ParallelDims

    cfg, seen = torchtitan_config(exp, tmp)
    dims = ParallelDims.from_config(cfg.parallelism, job.cluster.num_gpus)
    return cfg, dims, seen


@contextlib.contextmanager
def launched(world: int) -> Iterator[None]:
    """``deepspeed.comm`` as on rank 0 of ``world`` ranks started by the launcher (no process group)."""
    import deepspeed.comm as dist

    saved = dist.get_world_size, dist.get_rank
    dist.get_world_size = lambda group=None: world
    dist.get_rank = lambda group=None: 0
    try:
        yield
    finally:
        dist.get_world_size, dist.get_rank = saved


def deepspeed_accepts(exp, job):
    """DeepSpeed's config of the export, built the way deepspeed.initialize builds it."""
    from deepspeed.runtime.config import DeepSpeedConfig

    cfg = json.loads(exp.config_file[1])
    p, world = job.plan, job.cluster.num_gpus
    mpu = None
    if p.pp > 1:  # initialize: mpu = model.mpu(), PipelineModule's grid over PipeDataParallelTopology
        from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipelineParallelGrid

        topo = PipeDataParallelTopology(num_pp=p.pp, num_dp=world // p.pp)
        with launched(world), _no_groups():
            mpu = PipelineParallelGrid(topology=topo)
    with launched(world):
        ds = DeepSpeedConfig(cfg, mpu)
    ep = cfg.get("expert_parallel")
    if ep:
        from deepspeed.module_inject.auto_ep_config import parse_autoep_config, validate_autoep_config
        from deepspeed.module_inject.auto_ep_folding import build_folding_spec, validate_folding_global

        conf = parse_autoep_config(ep)
        tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1)
        sp = cfg.get("sequence_parallel_size", 1)
        validate_autoep_config(conf, world, p.pp, tp, sp)
        spec = build_folding_spec(world_size=world, pp_size=p.pp, tp_size=max(tp, 1), ep_size=conf.autoep_size,
                                  etp_size=conf.expert_tensor_parallel_size, mp_mode="tp" if tp > 1 else "sp")
        validate_folding_global(spec, zero_stage=ds.zero_optimization_stage, sp_size=sp, autoep_enabled=True,
                                ep_preset=conf.preset_model)
    return ds


@contextlib.contextmanager
def _no_groups():
    import deepspeed.comm as dist

    saved = dist.new_group
    dist.new_group = lambda ranks=None, **kw: object()  # a handle; no group is formed
    try:
        yield
    finally:
        dist.new_group = saved


def megatron_flag_table():
    return json.loads((ROOT / "src/shardwise/data/engines/megatron.json").read_text())["flags"]


def megatron_accepts(exp, job):
    """Every flag in Megatron's parser (table); with MEGATRON_LM, what its parse_args + validate_args derive."""
    from tests.handoff.test_flag_tables import check_flags

    check_flags(exp.args, megatron_flag_table())
    if not MEGATRON_LM:
        return None
    sys.path.insert(0, str(ROOT / "scripts"))
    from megatron_check import megatron_view

    return megatron_view(MEGATRON_LM, exp.args, job.cluster.num_gpus, exp.env, ARCH_MAJOR.get(job.cluster.gpu.arch, 9))
