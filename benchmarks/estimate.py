#!/usr/bin/env python
"""Single-job `estimate` throughput on one core, beside llm-analysis's when it is installed.

    python benchmarks/estimate.py [--seconds 3] [--llm-analysis PYTHON]

Prints estimates per second for (a) the same job repeatedly (per-layer costs, the per-rank tails and
the schedule simulation cached: the assembly cost; then with the per-rank tails recomputed each time),
(b) a stream of 384 distinct plans of one model (tp, pp, zero, recompute, micro-batch vary), caches warm
after the first pass, and (c) the same stream cold: every cache keyed on the job (layer costs, per-rank
tails, pipeline timings) cleared before each estimate, so each one runs a full schedule simulation. What
stays warm in (c) is what a new job of a running process finds there: the model and GPU catalogs, the
fitted constants and what is built from them alone (software-stack profiles and device models, keyed by
the constants and GPU objects, precision and stack; a GPU's host tiers; the even layer split of a layer
count over a stage count and the stage contents it gives a model; a model's layer shapes) and the generated schedule structures (IR and visit order, keyed by schedule,
pp, vpp and micro-batch count, never by durations); a job's own network rates are computed once per job
(keyed by its network object); (d) clears the schedule structures too.

llm-analysis (Li et al., github.com/cli99/llm-analysis, `llm_analysis.analysis.train`) is timed on the
same 384 plans (its ZeRO stage, tp, pp, recompute NONE/SELECTIVE/FULL and micro-batch from the plan,
512 H100-SXM, sequence 8192, global batch 1024) in this interpreter when it imports there, else in the
interpreter given by --llm-analysis or $LLM_ANALYSIS_PYTHON (its own virtual environment), one process,
in-process rate. Its model is llama-3.1-70b's shape with the FFN width rounded up to 32768: it only
takes FFN widths that are multiples of the hidden size (28672 is 3.5x); its timing does not depend on
that number. Rates are per CPU-second of the timed process, so a shared machine moves both alike;
compare the ratio printed, measured in the same run. Target (issue 35): cold >= 0.5x llm-analysis.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from shardwise.cost.layer import clear_caches
from shardwise.pipeline import engine
from shardwise.specs.job import TrainJob, job_from_mapping
from shardwise.train.assembly import _memo_tail
from shardwise.train.estimate import estimate
from shardwise.train.pipeline_timing import _timed, cached_schedule

#: The plans of the stream (b)-(d): tp, pp, ZeRO stage, recompute, micro-batch.
PLANS = [(tp, pp, z, rc, mb) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8) for z in (0, 1, 2, 3)
         for rc in ("none", "selective", "full") for mb in (1, 2)]

#: llm-analysis on the same stream, run as a script (in this interpreter or another one): prints its rate
#: per wall-clock second and per CPU-second.
LLM_ANALYSIS = """
import itertools, sys, time
from llm_analysis.analysis import train
from llm_analysis.config import ModelConfig, model_configs
model_configs["llama-3.1-70b"] = ModelConfig(name="llama-3.1-70b", num_layers=80, n_head=64, hidden_dim=8192,
    vocab_size=128256, max_seq_len=131072, num_key_value_heads=8, ffn_embed_dim=32768, model_type="llama")
RC = {"none": 0, "selective": 1, "full": 2}
plans = eval(sys.argv[1])
seconds = float(sys.argv[2])
def one(tp, pp, z, rc, mb):
    return train(model_name="llama-3.1-70b", gpu_name="h100-sxm-80gb", dtype_name="w16a16e16", log_level="ERROR",
                 batch_size_per_gpu=mb, global_batch_size=1024, seq_len=8192, activation_recomputation=RC[rc],
                 ds_zero=z, tp_size=tp, pp_size=pp, total_num_gpus=512, flops_efficiency=0.5,
                 mlp_gated_linear_units=True)
for p in plans:
    one(*p)
n, start, cpu = 0, time.perf_counter(), time.process_time()
for p in itertools.cycle(plans):
    one(*p)
    n += 1
    if n % 64 == 0 and time.perf_counter() - start > seconds:
        break
print(n / (time.perf_counter() - start), n / (time.process_time() - cpu))
"""


def make_job(tp=8, pp=4, zero=1, recompute="selective", micro_batch=1, model="llama-3.1-70b", gpus=512):
    return job_from_mapping({
        "model": model,
        "cluster": {"gpu": "H100-SXM", "gpus": gpus},
        "training": {"seq_len": 8192, "global_batch": 1024},
        "parallel": {"tp": tp, "pp": pp, "zero": zero, "recompute": recompute, "micro_batch": micro_batch, "sequence_parallel": True},
    })


def measure(fn: Callable[[TrainJob], object], jobs: Sequence[TrainJob], seconds: float) -> tuple[float, float]:
    """Estimates per wall-clock second and per CPU second of this process (the two differ when other
    processes share the cores)."""
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    for job in itertools.cycle(jobs):
        fn(job)
        n += 1
        if n % 64 == 0 and time.perf_counter() - start > seconds:
            break
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return n / wall, n / cpu


def show(rates: tuple[float, float]) -> str:
    return f"{rates[0]:8,.0f} estimates/s wall, {rates[1]:8,.0f} per CPU-second"


def rate(fn: Callable[[TrainJob], object], jobs: Sequence[TrainJob], seconds: float) -> str:
    return show(measure(fn, jobs, seconds))


def llm_analysis_rate(python: str | None, seconds: float) -> tuple[float, float] | str:
    """llm-analysis's rates on PLANS, or why there are none."""
    try:
        import llm_analysis  # noqa: F401 - only whether it imports here
        python = sys.executable
    except ImportError:
        python = python or os.environ.get("LLM_ANALYSIS_PYTHON")
    if not python:
        return "not installed here (pass --llm-analysis PYTHON or set LLM_ANALYSIS_PYTHON)"
    out = subprocess.run([python, "-c", LLM_ANALYSIS, repr(PLANS), str(seconds)], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        return f"failed under {python}: {out.stderr.strip().splitlines()[-1:]}"
    wall, cpu = (float(x) for x in out.stdout.split()[-2:])
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--llm-analysis", metavar="PYTHON", help="a Python interpreter that imports llm_analysis")
    args = ap.parse_args()
    same = [make_job()]
    varied = [make_job(*p) for p in PLANS]
    print(f"same job:        {rate(estimate, same, args.seconds)}")

    def tails_recomputed(job):
        _memo_tail.cache_clear()
        return estimate(job)

    print(f"same job, per-rank tails recomputed: {rate(tails_recomputed, same, args.seconds)}")
    clear_caches()
    _memo_tail.cache_clear()
    print(f"{len(varied)} distinct plans: {rate(estimate, varied, args.seconds)} (first pass fills the caches)")

    def cold(job):
        clear_caches()
        for f in (_timed, _memo_tail):
            f.cache_clear()
        return estimate(job)

    cold_rates = measure(cold, varied, args.seconds)
    print(f"cold, no caches:  {show(cold_rates)} (one schedule simulation each)")

    def colder(job):
        cached_schedule.cache_clear()
        engine._COMPILED.clear()
        return cold(job)

    print(f"cold, schedule structures regenerated too: {rate(colder, varied, args.seconds)}")
    lla = llm_analysis_rate(args.llm_analysis, args.seconds)
    if isinstance(lla, str):
        print(f"llm-analysis: {lla}")
    else:
        print(f"llm-analysis, same {len(PLANS)} plans: {show(lla)}; cold / llm-analysis = "
              f"{cold_rates[1] / lla[1]:.2f}x per CPU-second ({cold_rates[0] / lla[0]:.2f}x wall)")


if __name__ == "__main__":
    main()
