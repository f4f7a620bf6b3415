"""Memory as the engines report it: what tensors hold, what PyTorch's caching allocator reserves, and what
the device holds.

- allocated (``torch.cuda.max_memory_allocated``): the model states, the activations and the transient
  buffers live at the peak (gathered ZeRO-3 layers, gradient buckets, low-precision weight copies);
- reserved (``torch.cuda.max_memory_reserved``; torchtitan's and nanotron's printed peak): allocated plus
  the caching allocator's fragmentation: blocks it has cached but cannot hand out for the request at
  hand (c10/cuda/CUDACachingAllocator.cpp: blocks are split from segments and cached when freed; a freed
  block serves only requests it is large enough for). It grows with the churn of the dynamic memory, the
  activations of the step (:class:`shardwise.cost.constants.MemoryConstants`: a share of them, smaller
  with expandable segments, which map pages into one growing segment instead);
- device (nvidia-smi): reserved plus what lives outside the allocator: the CUDA context, cuBLAS/cuDNN
  workspaces and NCCL's buffers. A plan fits when this is within the GPU's memory less the headroom.
"""

from __future__ import annotations

from shardwise.cost.constants import MemoryConstants

GIB = 2**30


def runtime_bytes(mc: MemoryConstants) -> float:
    """Device memory outside PyTorch's allocator: CUDA context and workspaces, NCCL buffers."""
    return (mc.cuda_context_gib + mc.comm_buffers_gib) * GIB


def fragmentation_share(mc: MemoryConstants, expandable: bool) -> float:
    """Reserved-but-unallocated bytes per byte of activations at the peak (module docstring)."""
    return mc.fragmentation_expandable if expandable else mc.fragmentation
