"""Published offload claims reproduced on the catalog's DGX-2 (V100 32GB, 1.5 TB DRAM, 30 TB NVMe); the
settings and citations are in benchmarks/offload_papers.py, the printed figures in docs/offload.md. Nothing
here was fitted: the bands say how far the model is from each claim."""

import importlib.util
from pathlib import Path

import pytest

from shardwise.train.estimate import estimate

_SPEC = importlib.util.spec_from_file_location("offload_papers", Path(__file__).resolve().parents[2] / "benchmarks" / "offload_papers.py")
papers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(papers)


def test_zero_offload_trains_over_13b_on_one_v100():
    """Ren et al. 2021 (abstract): over 13B parameters on a single GPU with ZeRO-Offload. The largest GPT-2-like
    model that fits is 14.9B: at least the claim, and within +20% of it."""
    _, params, e = papers.largest_fitting()
    assert 13e9 <= params <= 1.2 * 13e9
    assert e.host_memory["dram_used_gib"] < e.host_memory["dram_available_gib"]


def test_pytorch_alone_fits_about_1_4b_on_one_v100():
    """The paper's baseline: 1.4B is the largest PyTorch trains on one V100 without running out of memory
    (1.62B here: +16%, the same direction and size as the offload figure's)."""
    _, params, _ = papers.largest_fitting(offload="none", zero=0)
    assert params == pytest.approx(1.4e9, rel=0.2)


def test_zero_offload_10b_throughput_within_its_band():
    """40 TFLOPS per V100 for 10B (the paper's abstract; Figure 8 at batch 512: about 41). At the paper's
    setting (Table 3: micro-batch 10; Sec. 6.2.2: batch 512 with gradient accumulation) the host step is
    well under 1% of the step, as the paper finds (the CPU is not the bottleneck): the gradient copies hide
    in the backward and CPU Adam runs at the DGX-2's measured rate (Table 4). The model gives 50.7 (+27%),
    all of it GPU time, as for the paper's PyTorch-alone baseline (+40%; see the tests below): within
    -15%..+30%."""
    e = estimate(papers.figure8_job(10))
    assert e.fits
    assert 0.85 * 40 <= e.model_tflops_per_gpu <= 1.3 * 40
    assert e.time_s.optimizer < 0.01 * e.step_time_s


def test_zero_offload_host_step_is_cpu_adam_at_table4_rate():
    """One micro-batch a step: the 10B model's host step is CPU Adam on 10.1B parameters at 3.89e9/s
    (Table 4: 10B in 2.57 s); the gradient copy (2 B per parameter over PCIe 3.0) is shorter than the
    backward, so none of it shows, and the parameters come back during CPU Adam."""
    job = papers.gpt2_job(50, micro_batch=10)
    e = estimate(job)
    assert e.time_s.optimizer == pytest.approx(job.model.params_total / 10e9 * 2.57, rel=0.01)


def test_figure8_sweep_is_within_band_where_it_fits():
    """Figure 8 (ZeRO-Offload on one V100, batch 512, Table 3's models): every size within -10%..+50% of the
    bar (the model is optimistic for V100 throughout, most at the small micro-batches of 11-13B), and the
    host step never above 1% of the step."""
    for b, (*_, paper) in papers.TABLE3_FIG8.items():
        e = estimate(papers.figure8_job(b))
        assert 0.9 * paper <= e.model_tflops_per_gpu <= 1.5 * paper, b
        assert e.time_s.optimizer < 0.01 * e.step_time_s, b


def test_delayed_update_speedup_matches_figure9():
    """Figure 9 (batch 8, one V100): the one-step delayed parameter update speeds 2B-10B up by x1.10 to x1.25
    (bars read off the figure); here x1.20 to x1.26: CPU Adam at Table 4's rate against the V100's step,
    hidden behind the next step's GPU work. Each within 0.15 of the paper's ratio, and DPU never slower."""
    for b, (wo, w) in papers.FIG9_DPU.items():
        off, on, e = papers.dpu_figures(b)
        assert e.fits and on >= off
        assert abs(on / off - w / wo) <= 0.15, b


def test_zero_infinity_fits_a_trillion_parameters_on_one_dgx2_with_nvme_only():
    """Rajbhandari et al. 2021 (abstract): a trillion-parameter model fine-tunes on a single DGX-2 node. With
    NVMe it fits (18.1 of 30.7 TB); in host DRAM alone it cannot (about 16.9 TB of states against 1.5 TB)."""
    nvme, cpu = estimate(papers.infinity_job()), estimate(papers.infinity_job(device="cpu"))
    assert nvme.fits and nvme.host_memory["nvme_used_tb"] < nvme.host_memory["nvme_available_tb"]
    assert not cpu.fits and cpu.misfit.startswith("host memory")
    layers, params = papers.largest_on_nvme()
    assert 1.0e12 <= params <= 2.0e12  # the drives bound it at 30.72 TB / 18 B per parameter = 1.7T


def test_zero_offload_10b_against_figure8_is_inside_the_estimates_own_error_band():
    """The estimate reports how far held-out runs of its kind were off (error_band, calibration/bands.py);
    Figure 8's 10B bar (41.2 TFLOPS, the measurement at the stated batch and micro-batch) lies inside it."""
    e = estimate(papers.figure8_job(10))
    paper = papers.TABLE3_FIG8[10][-1]
    assert abs(e.model_tflops_per_gpu / paper - 1) <= e.error_band["pct"]


def test_offload_gain_over_the_same_papers_pytorch_baseline():
    """ZeRO-Offload's 10B (40 TFLOPS) over PyTorch alone at 1.4B (30 TFLOPS) on the same V100, same paper:
    x1.33. The model's ratio (offload's own effect, free of the GPU-efficiency level both share) is within
    15% of it."""
    ratio = estimate(papers.figure8_job(10)).model_tflops_per_gpu / papers.pytorch_baseline().model_tflops_per_gpu
    assert ratio == pytest.approx(40.0 / papers.PYTORCH_BASELINE_TFLOPS, rel=0.15)


def test_v100_sources_disagree_in_sign():
    """Why no Volta efficiency is fitted: on Megatron-LM v1.0's 1.2B baseline (ADLR: 1,288 ms at batch 8) the
    model is slower than measured, on ZeRO-Offload's 10B faster: one efficiency factor cannot move both
    towards their measurements. Both stay within 30%."""
    megatron = estimate(papers.megatron_v1_job()).step_time_s / papers.MEGATRON_V1_ITERATION_S - 1
    zero_offload = estimate(papers.figure8_job(10)).model_tflops_per_gpu / papers.TABLE3_FIG8[10][-1] - 1
    assert megatron > 0 and zero_offload > 0  # slow on one (step time over), fast on the other (TFLOPS over)
    assert megatron < 0.3 and zero_offload < 0.3
