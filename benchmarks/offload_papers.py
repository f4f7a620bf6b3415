"""Reproduce the published ZeRO-Offload and ZeRO-Infinity capacity claims, and ZeRO-Offload's single-GPU
throughput, with Shardwise's memory tiers (docs/offload.md prints the figures).

    PYTHONPATH=src .venv/bin/python benchmarks/offload_papers.py

Claims (the papers' abstracts):
- ZeRO-Offload (Ren et al. 2021, USENIX ATC; arXiv 2101.06840): "train models with over 13 billion parameters
  on a single GPU, a 10x increase in size compared to popular framework such as PyTorch"; "40 TFlops/GPU on a
  single NVIDIA V100 GPU for 10B parameter model compared to 30TF using PyTorch alone for a 1.4B parameter
  model, the largest that can be trained without running out of memory".
- ZeRO-Infinity (Rajbhandari et al. 2021, SC; arXiv 2104.07857): "fine-tune trillion parameter models on a
  single NVIDIA DGX-2 node" (16 V100 32GB; 1.5 TB DRAM, 8 x 3.84 TB NVMe: data/gpus.yaml V100-SXM-32GB).

Settings the claims do not state, chosen here (assumptions): GPT-2-like models (GELU MLP, LayerNorm, tied
embeddings, vocabulary 50,257, sequence 1,024 as in Megatron-LM GPT-2) of hidden 4,096 and 32 heads,
their size set by the layer count; FP16 mixed precision, full activation checkpointing, no fused attention
(V100, 2020); the DeepSpeed stack. The throughput models are the paper's Table 3 (layers, hidden and
micro-batch per size: 10B is 50 layers of hidden 4,096 at micro-batch 10), heads of 128 dimensions, at the
batch of its Sec. 6.2.2 and Figure 8 (512 with gradient accumulation, the nearest multiple of the
micro-batch: 510 for 10B; delayed parameter update off); capacity is judged at micro-batch 1. The Figure 8
values are read off its bars (about +-1 TFLOPS). CPU Adam runs at the DGX-2 host's measured rate (Table 4,
data/gpus.yaml). ZeRO-Infinity: the 1T GPT preset
(Narayanan et al. 2021 Table 1: 128 layers, hidden 25,600) with ZeRO-3 over the node and TP 8 (Shardwise
has no memory-centric tiling, so a 7.9B-parameter layer must be split to fit a 32 GB GPU).
"""

from __future__ import annotations

from typing import Any

from shardwise.cost.offload_step import offloaded_step_s
from shardwise.specs.job import TrainJob, job_from_mapping
from shardwise.train.estimate import estimate
from shardwise.train.result import Estimate

GPT2 = {"vocab": 50257, "mlp": "gelu", "norm": "layernorm", "tied_embeddings": True, "linear_bias": True,
        "position_embeddings": 1024}


def gpt2_job(layers: int, *, hidden: int = 4096, heads: int = 32, offload: str = "optimizer", zero: int = 2,
             micro_batch: int = 1, gpus: int = 1, global_batch: int | None = None) -> TrainJob:
    """A GPT-2-like model of `layers` layers on `gpus` V100s of a DGX-2 (module docstring)."""
    model = {"name": f"gpt2-h{hidden}-{layers}L", "layers": layers, "hidden": hidden, "heads": heads, "ffn": 4 * hidden, **GPT2}
    return job_from_mapping({
        "model": model, "cluster": {"gpu": "v100", "gpus": gpus},
        "training": {"seq_len": 1024, "global_batch": global_batch or micro_batch * gpus, "precision": "fp16", "framework": "deepspeed"},
        "parallel": {"zero": zero, "offload": offload, "micro_batch": micro_batch, "recompute": "full", "flash_attention": False},
    })


#: ZeRO-Offload Table 3 (billions of parameters: layers, hidden, micro-batch per GPU, MP 1) and Figure 8's
#: ZeRO-Offload bars on one V100 at batch 512 (TFLOPS, read off the figure: about +-1).
TABLE3_FIG8 = {1: (20, 2048, 32, 36.0), 2: (40, 2048, 32, 36.0), 4: (64, 2304, 32, 37.0), 6: (53, 3072, 16, 37.3),
               8: (72, 3072, 16, 41.7), 10: (50, 4096, 10, 41.2), 11: (55, 4096, 8, 36.0), 12: (60, 4096, 4, 34.0),
               13: (65, 4096, 4, 34.5)}


def figure8_job(billions: int) -> TrainJob:
    """The Table 3 model of `billions` on one V100 at Figure 8's batch (512, rounded down to the micro-batch)."""
    layers, hidden, mb, _ = TABLE3_FIG8[billions]
    return gpt2_job(layers, hidden=hidden, heads=hidden // 128, micro_batch=mb, global_batch=512 // mb * mb)


#: ZeRO-Offload Figure 9: TFLOPS on one V100 at batch 8 without and with the one-step delayed parameter
#: update (DPU, Sec. 5.2), read off the bars (about +-1).
FIG9_DPU = {2: (27.0, 31.3), 6: (29.3, 36.5), 8: (34.6, 37.9), 10: (34.8, 39.1)}


def dpu_figures(billions: int) -> tuple[float, float, Estimate]:
    """(TFLOPS without DPU, with DPU, the estimate) of the Table 3 model at Figure 9's batch of 8 (one
    micro-batch of 8 a step): with DPU the host step overlaps the next step's GPU work
    (shardwise.cost.offload_step, delayed_update)."""
    layers, hidden, _, _ = TABLE3_FIG8[billions]
    e = estimate(gpt2_job(layers, hidden=hidden, heads=hidden // 128, micro_batch=8, global_batch=8))
    host = e.time_s.optimizer
    busy = e.step_time_s - host
    dpu = busy + offloaded_step_s(0.0, grad_bytes=0.0, weight_bytes=0.0, link_bytes_s=1.0, adam_s=host,
                                  delayed_update=True, gpu_busy_s=busy)
    return e.model_tflops_per_gpu, e.model_tflops_per_gpu * e.step_time_s / dpu, e


#: The paper's PyTorch-alone baseline (abstract: "30TF using PyTorch alone for a 1.4B parameter model"). Its
#: shape is not stated; chosen here: Table 3's 1B/2B width (hidden 2,048, 16 heads of 128) at 26 layers =
#: 1.41B, at the largest micro-batch of Table 3's that fits (32, 16, 8), batch 512 (assumptions).
PYTORCH_BASELINE_TFLOPS = 30.0


def pytorch_baseline() -> Estimate:
    """The PyTorch-alone 1.4B baseline (PYTORCH_BASELINE_TFLOPS): no ZeRO, no offload, one V100."""
    for mb in (32, 16, 8):
        e = estimate(gpt2_job(26, hidden=2048, heads=16, offload="none", zero=0, micro_batch=mb, global_batch=512 // mb * mb))
        if e.fits:
            return e
    raise ValueError("the 1.4B baseline does not fit at micro-batch 8")


def megatron_v1_job() -> TrainJob:
    """Another V100 source, without offload: Megatron-LM v1.0's 1.2B baseline on one V100 of a DGX-2H, batch 8,
    sequence 1,024 (NVIDIA ADLR, "MegatronLM's Supercharged V1.0", nv-adlr.github.io/MegatronLMV1, Table 1:
    1,288 ms an iteration). The shape is Shoeybi et al. 2019 (arXiv 1909.08053) Table 1: hidden 1,536, 16
    heads, 40 layers, vocabulary 51,200; activation checkpointing, FP16; the blog's 62.4 TFLOPS equals
    8 x 1.2e9 parameters x 8,192 tokens / 1.288 s (forward, backward and the recomputed forward), which
    confirms the iteration."""
    model = {"name": "megatron-1.2b", "layers": 40, "hidden": 1536, "heads": 16, "ffn": 4 * 1536, **GPT2,
             "vocab": 51200}
    return job_from_mapping({
        "model": model, "cluster": {"gpu": "v100", "gpus": 1},
        "training": {"seq_len": 1024, "global_batch": 8, "precision": "fp16", "framework": "megatron"},
        "parallel": {"micro_batch": 8, "recompute": "full", "flash_attention": False},
    })


MEGATRON_V1_ITERATION_S = 1.288


def largest_fitting(**kw: Any) -> tuple[int, float, Estimate]:
    """(layers, parameters, estimate) of the largest GPT-2-like model of this shape that fits (layer count
    grown until the first that does not fit)."""
    best = None
    for layers in range(1, 400):
        job = gpt2_job(layers, **kw)
        e = estimate(job)
        if not e.fits:
            break
        best = (layers, job.model.params_total, e)
    if best is None:
        raise ValueError("not even one layer fits")
    return best


def infinity_job(layers: int = 128, device: str = "nvme", tp: int = 8) -> TrainJob:
    """The 1T GPT (layers 128) or a deeper one on one DGX-2 node: ZeRO-3 over 16 V100, params and optimizer offloaded."""
    model = {"name": f"gpt-h25600-{layers}L", "layers": layers, "hidden": 25600, "heads": 160, "ffn": 102400, "vocab": 51200,
             "mlp": "gelu", "norm": "layernorm", "tied_embeddings": True, "linear_bias": True, "position_embeddings": 2048}
    return job_from_mapping({
        "model": model, "cluster": {"gpu": "v100", "gpus": 16},
        "training": {"seq_len": 1024, "global_batch": 16 // tp, "precision": "fp16", "framework": "deepspeed"},
        "parallel": {"tp": tp, "zero": 3, "offload": "optimizer+params", "offload_device": device, "micro_batch": 1,
                     "recompute": "full", "flash_attention": False},
    })


def largest_on_nvme() -> tuple[int, float]:
    """(layers, parameters) of the deepest hidden-25,600 GPT that fits one DGX-2 with NVMe offload (bisection)."""
    lo, hi = 128, 512
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if estimate(infinity_job(mid)).fits else (lo, mid)
    return lo, infinity_job(lo).model.params_total


def main() -> None:
    layers, params, e = largest_fitting()
    print(f"ZeRO-Offload, 1 x V100 32GB, offload optimizer (ZeRO-2), micro-batch 1: largest {params / 1e9:.1f}B "
          f"({layers} layers of hidden 4096; peak {e.peak_memory_gib:.1f} of {e.usable_memory_gib:.1f} GiB)  [paper: over 13B]")
    layers, params, e = largest_fitting(offload="none", zero=0)
    print(f"PyTorch DDP baseline (no ZeRO, no offload): largest {params / 1e9:.2f}B ({layers} layers)  [paper: 1.4B]")
    one = estimate(gpt2_job(50, micro_batch=10))
    e = estimate(figure8_job(10))
    t = e.time_s
    print(f"10B (50 layers), micro-batch 10, batch 510: {e.model_tflops_per_gpu:.1f} model TFLOP/s per V100, step {e.step_time_s:.0f} s "
          f"(compute {t.compute:.0f} s, optimizer on the host {t.optimizer:.2f} s; peak {e.peak_memory_gib:.1f} GiB, "
          f"host {e.host_memory['dram_used_gib']:.0f} GiB)  [paper: 40 TFLOPS]")
    print(f"  one micro-batch a step (batch 10): {one.model_tflops_per_gpu:.1f} TFLOP/s, step {one.step_time_s:.1f} s "
          f"(compute {one.time_s.compute:.1f} s, host step {one.time_s.optimizer:.2f} s)")
    base = pytorch_baseline()
    model_ratio, paper_ratio = e.model_tflops_per_gpu / base.model_tflops_per_gpu, 40.0 / PYTORCH_BASELINE_TFLOPS
    print(f"PyTorch alone, 1.4B (26 layers of hidden 2048, micro-batch {base.plan['micro_batch']}): "
          f"{base.model_tflops_per_gpu:.1f} TFLOP/s  [paper: {PYTORCH_BASELINE_TFLOPS:.0f}, "
          f"{base.model_tflops_per_gpu / PYTORCH_BASELINE_TFLOPS - 1:+.0%}]")
    print(f"  10B with ZeRO-Offload over PyTorch-alone 1.4B, same paper, same GPU: x{model_ratio:.2f}  "
          f"[paper: x{paper_ratio:.2f}, {model_ratio / paper_ratio - 1:+.0%}]")
    mg = estimate(megatron_v1_job())
    print(f"Megatron-LM v1.0, 1.2B on one V100, batch 8 (no offload): {mg.step_time_s * 1e3:.0f} ms an iteration  "
          f"[measured: {MEGATRON_V1_ITERATION_S * 1e3:.0f} ms, {mg.step_time_s / MEGATRON_V1_ITERATION_S - 1:+.0%}]")
    print("Figure 8 sweep (Table 3 models, batch 512): size, Shardwise / paper TFLOPS, error, fits")
    for b, (*_, paper) in TABLE3_FIG8.items():
        f = estimate(figure8_job(b))
        print(f"  {b:2d}B  {f.model_tflops_per_gpu:5.1f} / {paper:4.1f}  {f.model_tflops_per_gpu / paper - 1:+6.1%}  "
              f"host step {f.time_s.optimizer / f.step_time_s:.1%} of the step  fits={f.fits}")
    print("Figure 9, batch 8 (one micro-batch a step): size, TFLOPS without / with DPU, speedup; paper's")
    for b, (wo, w) in FIG9_DPU.items():
        off, on, _ = dpu_figures(b)
        print(f"  {b:2d}B  {off:5.1f} / {on:5.1f}  x{on / off:.2f}   paper {wo:4.1f} / {w:4.1f}  x{w / wo:.2f}")
    nvme, cpu = estimate(infinity_job()), estimate(infinity_job(device="cpu"))
    h = nvme.host_memory
    print(f"ZeRO-Infinity, 1T GPT on one DGX-2 (16 x V100, tp 8, ZeRO-3): NVMe fits={nvme.fits} (NVMe {h['nvme_used_tb']:.1f} of "
          f"{h['nvme_available_tb']:.1f} TB, DRAM {h['dram_used_gib']:.0f} of {h['dram_available_gib']:.0f} GiB, GPU "
          f"{nvme.peak_memory_gib:.1f} GiB; step {nvme.step_time_s:.0f} s)  [paper: a trillion parameters fit]")
    print(f"  the same in host DRAM (offload_device cpu): fits={cpu.fits}: {cpu.misfit}")
    layers, params = largest_on_nvme()
    print(f"  largest hidden-25600 GPT on that node with NVMe: {params / 1e12:.2f}T ({layers} layers)")


if __name__ == "__main__":
    main()
