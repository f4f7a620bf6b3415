"""The public serving measurements the simulator is fitted and judged on, as serve jobs.

Two layouts: records transcribed by hand in ``data/serving_measurements.yaml`` (each with its job), and
the shared calibration layout ``data/calibration/serving-measurements.json`` (engine, GPU, model,
precision, workload and the source's metric names), which :func:`from_shared` turns into the same
record form. The mapping follows each record's stated setup and the engine's defaults for the command
it ran, cited below; what a record does not state is assumed and said so in its ``notes``.

Every record: ``id``, ``source`` (the group left out together in cross-validation), ``split`` (``fit``:
used by the fit and judged held out source by source; ``context``: reported only), ``engine``,
``frontend`` (requests pass an HTTP API server), ``job`` and/or ``requests``, ``measured``; optionally
``skip`` (why it cannot be simulated) and ``notes``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from shardwise.specs._loading import data_path, load_yaml

MEASUREMENTS_FILE = "serving_measurements.yaml"
SHARED_FILE = "calibration/serving-measurements.json"

#: Checkpoints of the shared records -> (preset, precision). AMD's "-FP8-KV" checkpoints (Quark) quantise
#: the block linears to FP8 with FP8 KV-cache scales; DeepSeek-R1 ships FP8 block-quantised weights and
#: has DeepSeek-V3's architecture.
MODELS = {
    "amd/Llama-3.1-70B-Instruct-FP8-KV": ("llama-3.1-70b", "fp8"),
    "amd/Llama-3.1-405B-Instruct-FP8-KV": ("llama-3.1-405b", "fp8"),
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", {"weights": "fp8", "kv_cache": "bf16"}),
}
GPUS = {"MI300X": "mi300x", "H200": "h200"}
#: Source groups of the shared records (one publisher's page is one source, its tables together).
SOURCE_GROUPS = {"AMD ROCm AI performance-results page": "amd_mi300x_vllm", "vllm-project/vllm issue #12568": "vllm_issue_12568",
                 "vllm-project/vllm PR #25135": "vllm_pr_25135"}
#: vLLM V1's defaults on GPUs of 70 GiB or more other than A100 (vllm/engine/arg_utils.py,
#: EngineArgs._set_default_args_v1): max_num_batched_tokens 16384 for the LLM class (offline
#: benchmarks), 8192 for the API server; max_num_seqs 1024.
V1_OFFLINE_TOKENS, V1_SERVER_TOKENS, V1_MAX_SEQS = 16384, 8192, 1024
#: Offline throughput whose tokens/s might count the prompt tokens too (the AMD page does not say) is
#: compared as output tokens/s only where the prompts are at most this share of the tokens.
AMBIGUOUS_INPUT_SHARE = 0.1


def _group(source: str) -> str:
    for prefix, key in SOURCE_GROUPS.items():
        if source.startswith(prefix):
            return key
    return re.sub(r"[^a-z0-9]+", "_", source.lower()).strip("_")[:40]


def _checkpoint(name: str) -> tuple[str, Any] | None:
    for prefix, value in MODELS.items():
        if name.startswith(prefix):
            return value
    return None


def _version(engine: str) -> str | None:
    m = re.search(r"vLLM (\d+\.\d+\.\d+)", engine)
    return f"vllm-{m.group(1)}" if m else None


def from_shared(rec: dict[str, Any]) -> dict[str, Any]:
    """One record of the shared JSON layout as a serve-job record (module docstring)."""
    out: dict[str, Any] = {"id": rec["id"], "source": _group(rec["source"]), "split": "fit", "engine": rec["engine"],
                           "frontend": False, "confidence": rec.get("confidence"), "notes": rec.get("notes", "")}
    gpu = GPUS.get(rec["gpu"].split()[0])
    ckpt = _checkpoint(rec["model"])
    if gpu is None or ckpt is None:
        out.update(split="context", skip=f"not simulated: {'GPU ' + rec['gpu'] if gpu is None else 'model ' + rec['model']} "
                                         "is not in the catalog", measured={})
        return out
    model, precision = ckpt
    wl, measured = rec["workload"], rec["measured"]
    version = _version(rec["engine"])
    engine: dict[str, Any] = {"version": version, "scheduler": "vllm-v1"} if version else {"scheduler": "vllm-v1"}
    job: dict[str, Any] = {"model": model, "precision": precision}
    tp = rec.get("tp") or rec.get("gpus")
    if "throughput_tokens_per_s" in measured:  # offline benchmark_throughput (LLM class)
        inp, outp, n = wl["input_len"], wl["output_len"], wl["num_prompts"]
        engine.update(max_num_seqs=wl.get("max_num_seqs", V1_MAX_SEQS), max_num_batched_tokens=max(V1_OFFLINE_TOKENS, wl.get("max_num_seqs", 0)))
        job["workload"] = {"arrival": "poisson", "rate": "inf", "num_requests": n, "input_len": inp, "output_len": outp}
        out["measured"] = {"output_tokens_per_s": measured["throughput_tokens_per_s"]}
        if inp / (inp + outp) > AMBIGUOUS_INPUT_SHARE:
            out["split"] = "context"
            out["notes"] += (f" Compared as output tokens/s; if the page's tokens/s counts the {inp}-token prompts too, "
                             f"the output rate is {outp / (inp + outp):.0%} of it.")
    elif "latency_s" in measured:  # benchmark_latency: one batch of fixed-length prompts
        bs = wl["batch_size"]
        out["requests"] = {"input": [wl["input_len"]] * bs, "output": [wl["output_len"]] * bs}
        out["measured"] = {"e2e_median_ms": measured["latency_s"] * 1e3}
    else:  # a benchmark_serving run (API server)
        out["frontend"] = True
        engine.update(max_num_seqs=V1_MAX_SEQS, max_num_batched_tokens=V1_SERVER_TOKENS)
        n = wl["num_prompts"]
        inp = round(measured["total_input_tokens"] / n)
        outp = round(measured["total_output_tokens"] / n)
        job["workload"] = {"arrival": "poisson", "rate": wl["request_rate"], "num_requests": n, "input_len": inp, "output_len": outp}
        out["measured"] = {k: measured[src] for k, src in (("ttft_median_ms", "median_ttft_ms"), ("tpot_median_ms", "median_tpot_ms"),
                                                           ("request_throughput", "request_throughput")) if src in measured}
        out["split"] = "context"  # the shared file marks these single points low confidence
    job["deployment"] = {"gpu": gpu, "tp": tp, "engine": engine}
    out["job"] = job
    return out


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    data = load_yaml(data_path(MEASUREMENTS_FILE))
    shared = data_path(SHARED_FILE)
    records = list(data["records"])
    if shared.exists():
        records += [from_shared(r) for r in json.loads(shared.read_text())]
        for r in json.loads(shared.read_text()):
            data["sources"].setdefault(_group(r["source"]), f"{r['source']} ({r.get('url', '')})")
    return {"sources": data["sources"], "records": records}


def load_measurements() -> dict[str, Any]:
    """{"sources": key -> citation, "records": [...]} of both layouts (a fresh copy of the lists)."""
    data = _load()
    return {"sources": dict(data["sources"]), "records": list(data["records"])}
