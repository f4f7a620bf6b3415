"""The cases the golden files pin: training estimates, serving simulations and plan searches.

Each ``*_numbers`` function returns the JSON-ready figures one case pins; ``compute()`` returns every
file's content. ``scripts/refresh_golden.py`` writes them to ``tests/golden/*.json``;
``tests/golden/test_golden.py`` recomputes and compares. The cases are chosen to run in a few seconds and
to cover every pipeline schedule the planner searches, MoE, context parallelism, ZeRO-3 and full
recompute; they pin what the tool computes, so a change in a number is a reviewable diff of these files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
EXAMPLES = ROOT / "examples"

_LLAMA70B = {
    "model": "llama-3.1-70b",
    "cluster": {"gpu": "H100-SXM", "gpus": 64, "gpus_per_node": 8, "inter_node_gbps": 400},
    "training": {"seq_len": 8192, "global_batch": 512, "precision": "bf16"},
}
_PARALLEL = {"tp": 8, "pp": 4, "vpp": 1, "cp": 1, "ep": 1, "dp": "auto", "zero": 1, "sequence_parallel": True,
             "recompute": "selective", "micro_batch": 1, "schedule": "1f1b"}


def _job(base: dict[str, Any], **parallel: Any) -> dict[str, Any]:
    return {**base, "parallel": {**_PARALLEL, **parallel}}


#: name -> training job (the mapping a job file holds)
ESTIMATE_JOBS: dict[str, dict[str, Any]] = {
    "llama70b-1f1b": _job(_LLAMA70B),
    "llama70b-interleaved-v2": _job(_LLAMA70B, vpp=2, schedule="interleaved"),
    "llama70b-zb-h1": _job(_LLAMA70B, schedule="zb-h1"),
    "llama70b-zbv": _job(_LLAMA70B, schedule="zbv"),
    "llama70b-dualpipev-zero3": _job(_LLAMA70B, schedule="dualpipev", zero=3),
    "llama70b-gpipe-full-recompute": _job({**_LLAMA70B, "training": {**_LLAMA70B["training"], "global_batch": 64}},
                                          schedule="gpipe", recompute="full"),
    "gpt39b-v-half": _job({"model": "gpt-39b", "cluster": {"gpu": "A100-80GB", "gpus": 64},
                           "training": {"seq_len": 2048, "global_batch": 512}},
                          tp=4, pp=4, schedule="v-half", zero=0, recompute="none"),
    "gpt39b-bfs-v2": _job({"model": "gpt-39b", "cluster": {"gpu": "A100-80GB", "gpus": 64},
                           "training": {"seq_len": 2048, "global_batch": 512}},
                          tp=4, pp=4, vpp=2, schedule="bfs", zero=1, recompute="full"),
    "llama8b-zb-h2-a100": _job({"model": "llama-3.1-8b", "cluster": {"gpu": "A100-80GB", "gpus": 16},
                                "training": {"seq_len": 4096, "global_batch": 256}},
                               tp=2, pp=2, schedule="zb-h2", sequence_parallel=True, micro_batch=1),
    "llama8b-cp4-zero3-32k": _job({"model": "llama-3.1-8b", "cluster": {"gpu": "H100-SXM", "gpus": 32},
                                   "training": {"seq_len": 32768, "global_batch": 64}},
                                  tp=2, pp=1, cp=4, zero=3, recompute="full"),
    "mixtral8x7b-ep8-v-min": _job({"model": "mixtral-8x7b", "cluster": {"gpu": "H100-SXM", "gpus": 64},
                                   "training": {"seq_len": 4096, "global_batch": 256}},
                                  tp=2, pp=4, ep=8, schedule="v-min", sequence_parallel=True),
}

#: name -> serving job file (the examples a newcomer runs first)
SERVE_JOBS: dict[str, Path] = {
    "llama8b-a100-chunked": EXAMPLES / "serve-llama3.1-8b-a100.yaml",
    "llama70b-disaggregated": EXAMPLES / "serve-llama3.1-70b-disagg.yaml",
    "azure-trace": EXAMPLES / "serve-azure-trace.yaml",
}

#: name -> arguments of shardwise.api.plan (searches whose best plans are pipelined)
SEARCHES: dict[str, dict[str, Any]] = {
    "llama70b-32xh100": {"model": "llama-3.1-70b", "gpu": "h100", "gpus": 32, "seq_len": 4096, "global_batch": 128,
                         "top": 3, "max_exact": 16},
    "gpt39b-64xa100-40gib": {"model": "gpt-39b", "gpu": "a100-80gb", "gpus": 64, "seq_len": 2048,
                             "global_batch": 512, "top": 3, "max_exact": 16, "max_memory_gib": 40.0},
}

_ESTIMATE_KEYS = ("microbatches", "step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib", "fits",
                  "memory_gib", "memory_per_rank_gib", "time_s", "bubble_definition", "bubble_fraction",
                  "stage_bubble_ratio")
_PLAN_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib")


def estimate_numbers(job: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of ``train estimate`` for one job."""
    from shardwise.api import estimate

    out = estimate(job).to_dict()
    return {k: out[k] for k in _ESTIMATE_KEYS}


def serving_numbers(path: Path) -> dict[str, Any]:
    """Every number ``serve simulate --format json`` prints for one job (labels left out)."""
    from shardwise.api import simulate_serving

    return _numbers_only(simulate_serving(path))


def plan_numbers(search: dict[str, Any]) -> list[dict[str, Any]]:
    """The best plans of a search, best first: the plan and its headline figures."""
    from shardwise.api import plan

    result = plan(**search)
    rows = []
    for est in result.top:
        d = est.to_dict()
        rows.append({"plan": {k: v for k, v in d["plan"].items() if v is not None}, **{k: d[k] for k in _PLAN_KEYS}})
    return rows


def _numbers_only(value: Any) -> Any:
    """``value`` with only its numbers and booleans (nested dicts and lists kept; strings dropped)."""
    if isinstance(value, dict):
        kept = {k: _numbers_only(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None}
    if isinstance(value, list | tuple):
        kept = [_numbers_only(v) for v in value]
        return kept if all(v is not None for v in kept) else None
    return value if isinstance(value, bool | int | float) else None


#: golden file name -> (cases, function computing one case)
FILES = {
    "estimate.json": (ESTIMATE_JOBS, estimate_numbers),
    "serving.json": (SERVE_JOBS, serving_numbers),
    "plans.json": (SEARCHES, plan_numbers),
}


def compute(file: str) -> dict[str, Any]:
    """Every case of one golden file, by name."""
    cases, numbers = FILES[file]
    return {name: numbers(case) for name, case in cases.items()}
