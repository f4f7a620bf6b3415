"""vLLM and SGLang launches of a serving deployment: one ``serve`` command per pool.

Flag names are those of the pinned releases (vLLM 0.33.0 ``vllm/engine/arg_utils.py``; SGLang 0.5.23
``sglang/srt/arg_groups/fields``), checked by the tests against ``data/engines/{vllm,sglang}.json``.
Mapping of our engine knobs:

- vLLM: ``--tensor-parallel-size``, ``--pipeline-parallel-size``, replicas as ``--data-parallel-size``
  (vLLM balances requests over its data-parallel engines), ``--max-num-seqs``,
  ``--max-num-batched-tokens`` (V1 always chunks prefills), ``--gpu-memory-utilization``,
  ``--block-size``, ``--enable-prefix-caching``/``--no-enable-prefix-caching``, ``--max-model-len``,
  ``--kv-cache-dtype fp8`` with fp8; prefill/decode pools as NIXL KV-transfer instances
  (``--kv-transfer-config``); adapters as ``--enable-lora --max-loras --max-lora-rank --max-cpu-loras``
  and ``--lora-target-modules`` (vLLM's packed names: qkv_proj, o_proj, gate_up_proj, down_proj).
- SGLang: ``--tp-size``, ``--pp-size``, ``--dp-size``, ``--max-running-requests``,
  ``--chunked-prefill-size`` with ``--enable-mixed-chunk`` (decodes and prompt chunks in one batch, what
  our V1 scheduler does; SGLang's default runs prefill batches alone), ``--mem-fraction-static``,
  ``--page-size``, ``--disable-radix-cache`` without prefix caching, ``--disaggregation-mode``; adapters as
  ``--max-loras-per-batch --max-loaded-loras --max-lora-rank --lora-target-modules`` (module names
  q_proj ... down_proj); LoRA is switched on by the adapters given with ``--lora-paths``.
"""

from __future__ import annotations

import json

from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export
from shardwise.serve.adapters import AdapterSpec
from shardwise.serve.config import DeploymentSpec, EngineSpec, PoolSpec, ServeJob, engine_spec

VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}
#: Hugging Face repositories of our presets (what `vllm serve` and SGLang's --model-path load).
HF_REPOS = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct", "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x22b": "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3", "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf", "llama-2-70b": "meta-llama/Llama-2-70b-hf",
}


def model_ref(job: ServeJob) -> str:
    name = job.model.name
    if name in HF_REPOS:
        return HF_REPOS[name]
    return name if "/" in name else "${MODEL_PATH}"


def _pools(job: ServeJob) -> list[tuple[str, object, EngineSpec, str | None]]:
    """(label, pool, engine knobs, disaggregation role) for each pool of the deployment."""
    dep = job.deployment
    if dep.kind == "colocated":
        return [("serve", dep, engine_spec(dep.engine), None)]
    if dep.kind == "disaggregated":
        return [(role, pool, engine_spec(dep.engine, pool.engine, where=f"deployment.{role}.engine"), role)
                for role, pool in (("prefill", dep.prefill), ("decode", dep.decode))]
    return [(f"pool{i}", pool, engine_spec(dep.engine, pool.engine, where=f"deployment.pools[{i}].engine"), None)
            for i, pool in enumerate(dep.pools)]


def _check_current(engine: str, e: EngineSpec) -> None:
    if e.version is not None:
        raise ShardwiseError(f"serve export: engine.version {e.version} replays an old release; {engine} "
                             f"{VERSIONS[engine]} runs current behaviour: drop engine.version (and its V0 knobs) to export")


def vllm_args(job: ServeJob, pool: PoolSpec | DeploymentSpec, e: EngineSpec, role: str | None) -> list[str]:
    a = ["--tensor-parallel-size", str(pool.tp), "--pipeline-parallel-size", str(pool.pp)]
    if pool.replicas > 1:
        a += ["--data-parallel-size", str(pool.replicas)]
    a += ["--max-num-seqs", str(e.max_num_seqs), "--max-num-batched-tokens", str(e.max_num_batched_tokens),
          "--gpu-memory-utilization", str(e.gpu_memory_utilization), "--block-size", str(e.block_size),
          "--enable-prefix-caching" if e.caches_prefixes() else "--no-enable-prefix-caching"]
    if e.max_model_len:
        a += ["--max-model-len", str(e.max_model_len)]
    a += ["--dtype", "float16" if job.precision.activations == "fp16" else "bfloat16"]
    if job.precision.weights == "fp8":
        a += ["--quantization", "fp8"]
    if job.precision.kv_cache == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    if role:
        a += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))]
    lora = job.deployment.adapters
    if lora is not None:
        a += ["--enable-lora", "--max-loras", str(lora.gpu_slots), "--max-lora-rank", str(lora.slot_rank),
              "--max-cpu-loras", str(lora.host_slots), "--lora-target-modules", *lora.packed_modules(job.model)]
    return a


def sglang_args(job: ServeJob, pool: PoolSpec | DeploymentSpec, e: EngineSpec, role: str | None) -> list[str]:
    a = ["--tp-size", str(pool.tp), "--pp-size", str(pool.pp)]
    if pool.replicas > 1:
        a += ["--dp-size", str(pool.replicas)]
    a += ["--max-running-requests", str(e.max_num_seqs), "--chunked-prefill-size", str(e.max_num_batched_tokens),
          "--enable-mixed-chunk", "--mem-fraction-static", str(e.gpu_memory_utilization), "--page-size", str(e.block_size)]
    if not e.caches_prefixes():
        a.append("--disable-radix-cache")
    if e.max_model_len:
        a += ["--context-length", str(e.max_model_len)]
    a += ["--dtype", "float16" if job.precision.activations == "fp16" else "bfloat16"]
    if job.precision.weights == "fp8":
        a += ["--quantization", "fp8"]
    if job.precision.kv_cache == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if role:
        a += ["--disaggregation-mode", role]
    lora = job.deployment.adapters
    if lora is not None:
        a += ["--max-loras-per-batch", str(lora.gpu_slots), "--max-loaded-loras", str(lora.host_slots),
              "--max-lora-rank", str(lora.slot_rank), "--lora-target-modules",
              *(f"{t}_proj" for t in lora.packed_targets(job.model))]
    return a


def export_serving(job: ServeJob, engine: str, version: str | None = None) -> list[Export]:
    """One Export per pool (colocated: one; disaggregated: prefill and decode; pools: each)."""
    version = version or VERSIONS[engine]
    out = []
    for label, pool, e, role in _pools(job):
        _check_current(engine, e)
        if engine == "vllm":
            args = vllm_args(job, pool, e, role)
            launcher = ["vllm", "serve", model_ref(job)]
        else:
            args = sglang_args(job, pool, e, role)
            launcher = ["python", "-m", "sglang.launch_server", "--model-path", model_ref(job)]
        notes = [f"{label}: {pool.replicas} x {pool.gpu} tp{pool.tp} pp{pool.pp}"]
        if getattr(pool, "classes", None):
            notes.append("length classes are routed by the client or router in front of the pools")
        if job.deployment.adapters is not None:
            notes.append(_adapter_note(engine, job.deployment.adapters))
        out.append(Export(engine, version, args, launcher, {}, {}, None, notes, title=f"{job.name} {label}"))
    return out


def _adapter_note(engine: str, lora: AdapterSpec) -> str:
    """How the adapters themselves reach the engine (their paths are not part of the job)."""
    if engine == "vllm":
        return (f"{lora.count} adapters: name them with --lora-modules NAME=PATH ... or load them at run time "
                "(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, POST /v1/load_lora_adapter)")
    return f"{lora.count} adapters: name them with --lora-paths NAME=PATH ... (this also enables LoRA)"
