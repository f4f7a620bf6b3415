"""Forward/backward of one training step on one rank: without a pipeline, or through torch's pipeline
runtime executing a Shardwise schedule (needs torch).

Pipeline: the schedule IR from :func:`shardwise.pipeline.generate_schedule` is written as CSV in
PyTorch's ``_dump_csv`` layout and loaded by ``torch.distributed.pipelining.schedules.
_PipelineScheduleRuntime._load_csv``, which lowers it (adds SEND/RECV, FSDP UNSHARD/RESHARD and
REDUCE_GRAD) and runs it. If the runtime rejects the IR, torch's own class of the same name runs
instead and the run says so; if there is none, the run stops and says why.
Timing hooks wrap each ``PipelineStage``'s ``forward_one_chunk`` (F), ``backward_one_chunk`` (I, or B
when full), ``backward_weight_one_chunk`` (W) and the runtime's P2P waits, so nothing is re-implemented.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from shardwise.errors import ShardwiseError
from shardwise.execute.config import RunConfig
from shardwise.execute.layout import apply_fsdp, apply_tp, uses_fsdp
from shardwise.execute.model import GPT, lm_loss, stage_module
from shardwise.execute.record import Recorder
from shardwise.pipeline import list_schedules, schedule_info

if TYPE_CHECKING:
    from torch.distributed.pipelining import PipelineStage

    from shardwise.pipeline import Schedule

#: torch's own schedule classes (each schedule's ``ScheduleInfo.torch_class``), used only when its runtime
#: cannot take the Shardwise IR.
TORCH_CLASSES = {n: schedule_info(n).torch_class for n in list_schedules() if schedule_info(n).torch_class}


def _parallelize(mod: GPT, cfg: RunConfig, mesh: DeviceMesh) -> GPT:
    if cfg.tp > 1:
        apply_tp(mod, mesh["tp"])
    if uses_fsdp(cfg):
        apply_fsdp(mod, mesh["dp"], cfg.zero, cfg.reshard_after_forward)
    return mod


class FlatRunner:
    """pp = 1: each micro-batch runs forward (F) then backward (B); gradients accumulate (mean)."""

    has_loss = True

    def __init__(self, cfg: RunConfig, full: GPT, mesh: DeviceMesh, rec: Recorder):
        self.cfg, self.rec = cfg, rec
        self.dp_rank = mesh["dp"].get_local_rank()
        self.model = _parallelize(full, cfg, mesh)
        self.modules = [self.model]
        self.schedule_source = "none (pp=1: forward and backward per micro-batch, gradients accumulated)"

    def step(self, x: torch.Tensor, y: torch.Tensor, sync_grads: bool = True) -> float:
        n = self.cfg.local_microbatches(self.dp_rank)
        weight = self.cfg.loss_weight(self.dp_rank)  # uneven DP split: gradients averaged over DP stay the global mean
        total = 0.0
        for mb, (xm, ym) in enumerate(zip(x.chunk(n), y.chunk(n))):
            if uses_fsdp(self.cfg):  # reduce-scatter once, after the last micro-batch
                self.model.set_requires_gradient_sync(sync_grads and mb == n - 1)
            with self.rec.action("F", 0, mb):
                loss = lm_loss(self.model(xm), ym)
            with self.rec.action("B", 0, mb):
                (loss * (weight / n)).backward()
            total += loss.item()
        return total / n


def _instrument(stage: PipelineStage, rec: Recorder) -> None:
    """Wrap a PipelineStage's compute entry points with timers (instance attributes, torch untouched)."""
    fwd, bwd, wgt, red = (stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk,
                          stage.perform_reduce_grad)
    idx = stage.stage_index

    def forward_one_chunk(mb, *args, **kwargs):
        with rec.action("F", idx, mb):
            return fwd(mb, *args, **kwargs)

    def backward_one_chunk(mb, loss=None, full_backward=True, last_backward=False):
        with rec.action("B" if full_backward else "I", idx, mb):
            return bwd(mb, loss=loss, full_backward=full_backward, last_backward=last_backward)

    def backward_weight_one_chunk(mb, last_backward=False):
        with rec.action("W", idx, mb):
            return wgt(mb, last_backward=last_backward)

    def perform_reduce_grad(scale):
        with rec.comm("REDUCE_GRAD"):
            return red(scale)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk
    stage.perform_reduce_grad = perform_reduce_grad


def _time_p2p(rec: Recorder) -> None:
    """Record the runtime's posting of point-to-point sends/receives and its waits on them (the two
    module-level helpers it calls: ``_batch_p2p``, ``_wait_batch_p2p``)."""
    from torch.distributed.pipelining import schedules

    for attr, label in (("_batch_p2p", "P2P_POST"), ("_wait_batch_p2p", "P2P_WAIT")):
        orig = getattr(getattr(schedules, attr), "_shardwise_orig", getattr(schedules, attr))

        def timed(*args, _orig=orig, _label=label, **kwargs):
            with rec.comm(_label):
                return _orig(*args, **kwargs)

        timed._shardwise_orig = orig
        setattr(schedules, attr, timed)


class PipelineRunner:
    """pp > 1: this rank's stages run the schedule in torch's pipeline runtime."""

    def __init__(self, cfg: RunConfig, full: GPT, mesh: DeviceMesh, rec: Recorder, sched: Schedule, csv_path: Path,
                 device: torch.device):
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining import schedules as S

        self.cfg, self.rec, self.sched = cfg, rec, sched
        pp_rank = mesh["pp"].get_local_rank()
        n_stages = sched.num_stages
        self.stage_ids = sched.rank_stages(pp_rank)
        self.modules = [_parallelize(stage_module(full, s, n_stages, cfg.layer_split), cfg, mesh) for s in self.stage_ids]
        group = mesh["pp"].get_group()
        stages = [PipelineStage(m, s, n_stages, device, group=group) for m, s in zip(self.modules, self.stage_ids)]
        for st in stages:
            _instrument(st, rec)
        _time_p2p(rec)
        self.has_loss = (n_stages - 1) in self.stage_ids
        try:
            rt = S._PipelineScheduleRuntime(stages, cfg.microbatches, loss_fn=lm_loss, scale_grads=True)
            rt._load_csv(str(csv_path))
            self.schedule_source = (f"shardwise IR '{sched.name}' (CSV) executed by torch "
                                    "_PipelineScheduleRuntime")
        except Exception as exc:  # noqa: BLE001 - the runtime rejected the IR: fall back to torch's class, say so
            cls_name = schedule_info(sched.name).torch_class
            if cls_name is None:
                raise ShardwiseError(f"schedule {sched.name!r} cannot run in torch's pipeline runtime: "
                                     f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
            rt = getattr(S, cls_name)(stages, cfg.microbatches, loss_fn=lm_loss, scale_grads=True)
            self.schedule_source = (f"torch {cls_name} (torch's runtime rejected the shardwise IR: "
                                    f"{type(exc).__name__}: {str(exc).splitlines()[0]})")
        self.runtime = rt
        last = rt._maybe_compute_loss

        def _maybe_compute_loss(stage, output, target_mbs, mb_index, *args, **kwargs):
            out = last(stage, output, target_mbs, mb_index, *args, **kwargs)
            if stage.is_last:  # the loss belongs to the last stage's forward
                rec.extend_last("F", stage.stage_index, mb_index)
            return out

        rt._maybe_compute_loss = _maybe_compute_loss

    def step(self, x: torch.Tensor, y: torch.Tensor, sync_grads: bool = True) -> float | None:
        losses: list = []
        self.runtime.step(x, target=y, losses=losses)
        if not self.has_loss:
            return None
        return float(sum(float(v.detach()) for v in losses) / len(losses))


def named_params(modules: list[nn.Module]) -> list[tuple[str, nn.Parameter]]:
    """Parameters of this rank's modules with their full-model names, in a fixed order."""
    out, seen = [], set()
    for m in modules:
        for n, p in m.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append((n, p))
    return out
