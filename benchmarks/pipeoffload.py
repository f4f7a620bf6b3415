"""Reproduce PipeOffload's claim (Wan et al. 2025, "PipeOffload: Improving Scalability of Pipeline Parallelism
with Memory Optimization", ICML 2025, arXiv 2503.01328): "in the majority of standard configurations, at
least half, and potentially all, of the activations can be offloaded with negligible overhead"; with
Shardwise's activation offload (parallel.offload_activations, cost/act_offload.py; docs/offload.md prints
the figures).

    PYTHONPATH=src .venv/bin/python benchmarks/pipeoffload.py

Setting (the paper: GPT-3-like models on Megatron-LM, A100 GPUs, throughput as MFU and activation memory as
peak less iteration-start memory). Chosen here where the abstract is silent (assumptions): the GPT-3 presets
of hidden 4,096 / 6,144 / 8,192 (gpt-7.5b, gpt-18b, gpt-39b: Narayanan et al. 2021 Table 1), sequence 4,096,
micro-batch 1, no recomputation (what offload replaces), tp 1, one data-parallel replica, pp 4 and 8 with
4 x pp micro-batches, 1F1B and interleaved 1F1B (vpp 2), A100-SXM-80GB with the catalog's host link per GPU
(PCIe 4.0 x16). Memory fit is not required (the claim is about overhead, not capacity).
"Negligible" is read as under 2% slower than the same plan without offload.
"""

from __future__ import annotations

from shardwise.cost.constants import default_constants
from shardwise.cost.step import host_link_gbyte_s
from shardwise.specs.job import TrainJob, job_from_mapping
from shardwise.train.estimate import estimate

GIB = 2**30
MODELS = ("gpt-7.5b", "gpt-18b", "gpt-39b")
PPS = (4, 8)
SCHEDULES = (("1f1b", 1), ("interleaved", 2))
SHARES = tuple(i / 20 for i in range(21))
NEGLIGIBLE = 0.02


def job(model: str, pp: int, schedule: str, vpp: int, share: float, policy: str = "uniform") -> TrainJob:
    return job_from_mapping({
        "model": model, "cluster": {"gpu": "a100-80gb", "gpus": pp},
        "training": {"seq_len": 4096, "global_batch": 4 * pp},
        "parallel": {"tp": 1, "pp": pp, "vpp": vpp, "dp": 1, "schedule": schedule, "recompute": "none",
                     "micro_batch": 1, "offload_activations": share, "offload_activations_policy": policy},
    })


def curve(model: str, pp: int, schedule: str, vpp: int, policy: str = "uniform") -> list[tuple[float, float, float]]:
    """(share, slowdown, peak activation GiB of the peak rank) for every share of SHARES, the share spread over
    the ranks by `policy` (uniform or selective: cost/act_offload.py)."""
    base = estimate(job(model, pp, schedule, vpp, 0.0))
    out = []
    for x in SHARES:
        e = base if x == 0 else estimate(job(model, pp, schedule, vpp, x, policy))
        out.append((x, e.step_time_s / base.step_time_s - 1.0, max(m.activations for m in e.memory_per_rank) / GIB))
    return out


def hidden_share(points: list[tuple[float, float, float]]) -> float:
    """The largest share of SHARES with under NEGLIGIBLE slowdown (overhead does not fall with the share)."""
    return max(x for x, slow, _ in points if slow < NEGLIGIBLE)


def main() -> None:
    link = host_link_gbyte_s(job(MODELS[0], 4, "1f1b", 1, 0.0).cluster)
    achieved = link * default_constants().step.pcie_efficiency
    print(f"PipeOffload reproduction: A100-SXM-80GB, host link {link:.1f} GB/s per GPU ({achieved:.1f} achieved), "
          "seq 4096, mb 1, no recompute")
    print(f"{'model':10} {'pp':>3} {'schedule':12} {'share <2%':>10} {'slowdown at 1.0':>16} "
          f"{'peak act GiB: 0 / 0.5 / 1.0':>30}")
    rows = []
    for model in MODELS:
        for pp in PPS:
            for schedule, vpp in SCHEDULES:
                pts = curve(model, pp, schedule, vpp)
                share = hidden_share(pts)
                rows.append(share)
                peaks = {x: p for x, _, p in pts}
                print(f"{model:10} {pp:>3} {schedule:12} {share:>10.2f} {pts[-1][1]:>16.2%} "
                      f"{peaks[0.0]:>12.2f} / {peaks[0.5]:.2f} / {peaks[1.0]:.2f}")
    half = sum(1 for s in rows if s >= 0.5)
    full = sum(1 for s in rows if s >= 1.0)
    print(f"at least half offloadable with <2% slowdown in {half} of {len(rows)} configurations; all of it in {full}")
    print("peak activation memory vs share (gpt-18b, pp 8, 1f1b), the share spread uniformly | selectively:")
    uniform, selective = curve("gpt-18b", 8, "1f1b", 1), curve("gpt-18b", 8, "1f1b", 1, "selective")
    for (x, slow, peak), (_, sel_slow, sel_peak) in list(zip(uniform, selective, strict=True))[::2]:
        print(f"  share {x:.1f}: {peak:7.2f} GiB ({peak / uniform[0][2]:4.0%}), slowdown {slow:6.2%}  |  "
              f"{sel_peak:7.2f} GiB ({sel_peak / selective[0][2]:4.0%}), slowdown {sel_slow:6.2%}")
    print("selective, every configuration: share with <2% slowdown, peak at share 0.5 / linear")
    for model in MODELS:
        for pp in PPS:
            for schedule, vpp in SCHEDULES:
                pts = curve(model, pp, schedule, vpp, "selective")
                peaks = {x: p for x, _, p in pts}
                print(f"  {model:10} {pp:>3} {schedule:12} {hidden_share(pts):5.2f}  "
                      f"{peaks[0.5] / (0.5 * (peaks[0.0] + peaks[1.0])):.2f}")


if __name__ == "__main__":
    main()
