"""Lay a plan out on processes with torch's own building blocks (needs torch).

- Device mesh ``(pp, dp, tp)`` (``init_device_mesh``; row-major, so TP is innermost as in
  :class:`~shardwise.specs.training.TrainPlan`).
- Tensor parallelism: DTensor ``parallelize_module`` with Megatron-LM's split (Shoeybi et al. 2019,
  Sec. 3): Q/K/V and MLP up/gate column-wise, attention output and MLP down row-wise; the embedding
  row-wise over the vocabulary and the LM head column-wise with replicated logits (torchtitan's plan).
- Data parallelism by ZeRO stage (Rajbhandari et al. 2020): 0 = gradients all-reduced (averaged) over
  the DP group; 1 = the same plus ``ZeroRedundancyOptimizer`` (optimizer state sharded);
  2 = FSDP2 ``fully_shard(reshard_after_forward=False)`` (gradients and optimizer state sharded,
  parameters kept gathered from forward to backward); 3 = FSDP2 with ``reshard_after_forward=True``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from shardwise.execute.config import SGD, RunConfig


def make_mesh(cfg: RunConfig, device_type: str) -> DeviceMesh:
    """The 3-D device mesh ``("pp", "dp", "tp")`` over all ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (cfg.pp, cfg.dp, cfg.tp), mesh_dim_names=("pp", "dp", "tp"))


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Megatron-style tensor parallelism on every block present, the embedding and the LM head."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for block in model.layers.values():
        plan = {
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(),
        }
        if hasattr(block.mlp, "w3"):
            plan["mlp.w3"] = ColwiseParallel()
        parallelize_module(block, tp_mesh, plan)
    top = {}
    if model.tok_emb is not None:
        top["tok_emb"] = RowwiseParallel(input_layouts=Replicate())
    if model.lm_head is not None:
        top["lm_head"] = ColwiseParallel(output_layouts=Replicate())
    if top:
        parallelize_module(model, tp_mesh, top)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, zero: int, reshard_after_forward: bool = True) -> None:
    """FSDP2 per transformer block and at the root (torchtitan's wrapping); zero 2 keeps parameters
    gathered between forward and backward, zero 3 reshards after forward unless the plan says not to
    (parallel.reshard_after_forward: false)."""
    from torch.distributed.fsdp import fully_shard

    reshard = zero == 3 and reshard_after_forward
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)


def uses_fsdp(cfg: RunConfig) -> bool:
    return cfg.dp > 1 and cfg.zero >= 2


def _local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor, else the tensor itself."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def allreduce_grads(params: list[nn.Parameter], dp_group: dist.ProcessGroup | None, dp: int) -> None:
    """ZeRO-0/1 gradient sync: one flat all-reduce (sum) over the DP group, then divide by ``dp``."""
    grads = [_local(p.grad) for p in params if p.grad is not None]
    if not grads or dp == 1:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=dp_group)
    flat.div_(dp)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


def make_optimizer(params: list[nn.Parameter], cfg: RunConfig, dp_group: dist.ProcessGroup | None) -> torch.optim.Optimizer:
    """SGD with momentum (``SGD`` settings); wrapped in ``ZeroRedundancyOptimizer`` over the DP group for
    ZeRO-1, which shards the momentum buffers."""
    if cfg.zero == 1 and cfg.dp > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, process_group=dp_group,
                                       foreach=False, **SGD)
    return torch.optim.SGD(params, foreach=False, **SGD)


def state_bytes(params: list[nn.Parameter], optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state held *on this rank* (local shards only)."""
    p_bytes = sum(_local(p).numel() * _local(p).element_size() for p in params)
    g_bytes = sum(_local(p.grad).numel() * _local(p.grad).element_size() for p in params if p.grad is not None)
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps its shard's optimizer
    o_bytes = 0
    for st in inner.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                o_bytes += _local(v).numel() * _local(v).element_size()
    return {"params_bytes": p_bytes, "grads_bytes": g_bytes, "optimizer_bytes": o_bytes}


def full_grads(named_params: list[tuple[str, nn.Parameter]]) -> dict[str, torch.Tensor]:
    """Every gradient gathered to a full tensor (DTensor ``full_tensor()`` is a collective: every rank
    of the parameter's mesh must call this in the same order)."""
    out = {}
    for name, p in named_params:
        if p.grad is None:
            continue
        g = p.grad
        if hasattr(g, "full_tensor"):
            g = g.full_tensor()
        out[name] = g.detach().to("cpu", copy=True)
    return out
