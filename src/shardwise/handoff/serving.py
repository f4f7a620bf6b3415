"""vLLM and SGLang launches of a serving deployment: one ``serve`` command per pool, and for a
prefill/decode split the router that joins the two pools.

Flag names are those of the pinned releases (vLLM 0.33.0 ``vllm/engine/arg_utils.py`` and its OpenAI
server's ``vllm/entrypoints/common/cli_args.py``; SGLang 0.5.23 ``sglang/srt/arg_groups/fields``;
vllm-router 0.1.17 and sglang-router 0.3.2 ``router_args.py``), checked by the tests against
``data/engines/*.json``. Mapping of our knobs:

- vLLM: ``--tensor-parallel-size``, ``--pipeline-parallel-size``, replicas as ``--data-parallel-size``
  (vLLM balances requests over its data-parallel engines); an MoE replica's data-parallel attention
  ranks as ``--data-parallel-size`` with ``--enable-expert-parallel`` (EP over TP x DP; across nodes
  ``--data-parallel-size-local`` and ``--data-parallel-address``, the other nodes ``--headless``),
  DeepEP all-to-all (``--all2all-backend``: high-throughput kernels to a prefill pool, low-latency ones
  otherwise, as the simulator times them; vLLM has no per-batch switch like SGLang's ``--deepep-mode auto``); ``--max-num-seqs``, ``--max-num-batched-tokens`` (V1 always chunks
  prefills), ``--gpu-memory-utilization``, ``--block-size``, ``--[no-]enable-prefix-caching``,
  ``--max-model-len``, ``--[no-]async-scheduling``; ``--quantization fp8`` with FP8 weights, ``--kv-cache-dtype
  fp8`` with an FP8 cache (INT4/INT8/FP4 weights come from a quantised checkpoint, which vLLM reads);
  ``--speculative-config``; prefill/decode pools as NIXL KV-transfer instances (``--kv-transfer-config``)
  on their own ports behind ``vllm-router --vllm-pd-disaggregation``; adapters as ``--enable-lora
  --max-loras --max-lora-rank --max-cpu-loras --lora-target-modules`` (packed names qkv_proj, o_proj,
  gate_up_proj, down_proj).
- SGLang: ``--tp-size`` (the GPUs of one instance: with data-parallel attention tp x dp), ``--pp-size``,
  ``--dp-size`` (replicas, or the attention ranks with ``--enable-dp-attention``), ``--ep-size`` with
  ``--moe-a2a-backend deepep`` and ``--deepep-mode``, ``--nnodes``/``--node-rank``/``--dist-init-addr``
  across nodes, ``--max-running-requests``, ``--chunked-prefill-size`` (with ``--enable-mixed-chunk``
  where decodes and prompt chunks share a batch, as vLLM V1's scheduler does; SGLang's own scheduler runs
  prefill batches alone), ``--mem-fraction-static``, ``--page-size``, ``--disable-radix-cache`` without
  prefix caching, ``--disable-overlap-schedule`` without overlap, ``--speculative-algorithm`` and its
  step counts; prefill/decode pools with ``--disaggregation-mode`` and a bootstrap port behind
  ``python -m sglang_router.launch_router --pd-disaggregation``; adapters as ``--max-loras-per-batch
  --max-loaded-loras --max-lora-rank --lora-target-modules`` (q_proj ... down_proj).
"""

from __future__ import annotations

import json
from typing import Any

from shardwise.engines import targets
from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export
from shardwise.serve.adapters import AdapterSpec
from shardwise.serve.config import DeploymentSpec, EngineSpec, PoolSpec, ServeJob, SpeculativeSpec, engine_spec
from shardwise.specs.hardware import get_gpu

#: Pinned releases: the serving targets' from their registry entries (:mod:`shardwise.engines.targets`),
#: and the routers that join a prefill/decode split.
VERSIONS = {**{n: targets.get(n).version for n in targets.names("serving")},
            "vllm-router": "0.1.17", "sglang-router": "0.3.2"}
#: Hugging Face repositories of our presets (what `vllm serve` and SGLang's --model-path load).
HF_REPOS = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct", "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x22b": "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3", "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf", "llama-2-70b": "meta-llama/Llama-2-70b-hf",
}
#: Ports: vLLM's and SGLang's defaults for one server; a prefill/decode split puts the router there and
#: the pools on the next ports; SGLang's prefill pool also opens its KV bootstrap port.
PORTS = {"vllm": 8000, "sglang": 30000}
BOOTSTRAP_PORT = 8998  # SGLang --disaggregation-bootstrap-port default
DP_RPC_PORT = 13345  # vLLM --data-parallel-rpc-port default
SGLANG_DIST_PORT = 5000
#: vLLM --speculative-config method names and SGLang --speculative-algorithm values.
VLLM_SPEC = {"draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram"}
SGLANG_SPEC = {"draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM"}


def model_ref(job: ServeJob) -> str:
    return _repo(job.model.name) or "${MODEL_PATH}"


def _repo(name: str) -> str | None:
    if name in HF_REPOS:
        return HF_REPOS[name]
    return name if "/" in name else None


def _pools(job: ServeJob) -> list[tuple[str, PoolSpec | DeploymentSpec, EngineSpec, str | None]]:
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
    if e.policy() == "vllm-v0":
        raise ShardwiseError("serve export: scheduler vllm-v0 replays vLLM's removed V0 engine; drop it to export")


def _nodes(pool: PoolSpec | DeploymentSpec) -> tuple[int, int]:
    """(nodes one replica spans, GPUs per node)."""
    per_node = get_gpu(pool.gpu).gpus_per_node
    gpus = pool.tp * pool.pp * pool.dp_attention
    return max(1, -(-gpus // per_node)), per_node


def _draft_ref(spec: SpeculativeSpec) -> str | None:
    d = spec.draft_model
    if isinstance(d, str):
        return _repo(d) or d
    return None


def _spec_note(spec: SpeculativeSpec) -> str | None:
    if spec.method in ("eagle", "eagle3") and _draft_ref(spec) is None:
        return f"{spec.method}: set the head's checkpoint in place of ${{DRAFT_MODEL_PATH}} (engine.speculative.draft_model names it)"
    return None


def vllm_args(job: ServeJob, pool: PoolSpec | DeploymentSpec, e: EngineSpec, role: str | None, port: int) -> list[str]:
    dp = pool.dp_attention
    a = ["--port", str(port), "--tensor-parallel-size", str(pool.tp), "--pipeline-parallel-size", str(pool.pp)]
    if dp > 1:
        a += ["--data-parallel-size", str(dp)]
        nodes, per_node = _nodes(pool)
        if nodes > 1:
            a += ["--data-parallel-size-local", str(dp // nodes), "--data-parallel-address", "${HEAD_NODE_IP}",
                  "--data-parallel-rpc-port", str(DP_RPC_PORT)]
    elif pool.replicas > 1:
        a += ["--data-parallel-size", str(pool.replicas)]
    if pool.expert_parallel:
        a.append("--enable-expert-parallel")
        a += ["--all2all-backend", "deepep_high_throughput" if role == "prefill" else "deepep_low_latency"]
    a += ["--max-num-seqs", str(e.max_num_seqs), "--max-num-batched-tokens", str(e.max_num_batched_tokens),
          "--gpu-memory-utilization", str(e.gpu_memory_utilization), "--block-size", str(e.block_size),
          "--enable-prefix-caching" if e.caches_prefixes() else "--no-enable-prefix-caching"]
    if e.max_model_len:
        a += ["--max-model-len", str(e.max_model_len)]
    a.append("--async-scheduling" if e.overlap_scheduling() else "--no-async-scheduling")
    a += ["--dtype", "float16" if job.precision.activations == "fp16" else "bfloat16"]
    if job.precision.weights == "fp8":
        a += ["--quantization", "fp8"]
    if job.precision.kv_cache == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    if e.speculative is not None:
        s = e.speculative
        config: dict[str, Any] = {"method": VLLM_SPEC[s.method], "num_speculative_tokens": s.num_tokens}
        if s.method in ("draft", "eagle", "eagle3"):
            config["model"] = _draft_ref(s) or "${DRAFT_MODEL_PATH}"
        if s.method == "ngram":
            config["prompt_lookup_max"] = s.num_tokens
        a += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if role:
        a += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))]
    lora = job.deployment.adapters
    if lora is not None:
        a += ["--enable-lora", "--max-loras", str(lora.gpu_slots), "--max-lora-rank", str(lora.slot_rank),
              "--max-cpu-loras", str(lora.host_slots), "--lora-target-modules", *lora.packed_modules(job.model)]
    return a


def sglang_args(job: ServeJob, pool: PoolSpec | DeploymentSpec, e: EngineSpec, role: str | None, port: int) -> list[str]:
    dp = pool.dp_attention
    a = ["--port", str(port), "--tp-size", str(pool.tp * dp), "--pp-size", str(pool.pp)]
    if dp > 1:
        a += ["--dp-size", str(dp), "--enable-dp-attention"]
    elif pool.replicas > 1:
        a += ["--dp-size", str(pool.replicas)]
    if pool.expert_parallel:
        mode = {"decode": "low_latency", "prefill": "normal"}.get(role or "", "auto")
        a += ["--ep-size", str(pool.tp * dp), "--moe-a2a-backend", "deepep", "--deepep-mode", mode]
    nodes, _ = _nodes(pool)
    if nodes > 1:
        a += ["--nnodes", str(nodes), "--node-rank", "${NODE_RANK}", "--dist-init-addr", f"${{HEAD_NODE_IP}}:{SGLANG_DIST_PORT}"]
    a += ["--max-running-requests", str(e.max_num_seqs * dp), "--chunked-prefill-size", str(e.max_num_batched_tokens)]
    if e.policy() != "sglang":
        a.append("--enable-mixed-chunk")  # decodes and prompt chunks in one batch, as the vLLM V1 scheduler simulated
    a += ["--mem-fraction-static", str(e.gpu_memory_utilization), "--page-size", str(e.block_size)]
    if not e.caches_prefixes():
        a.append("--disable-radix-cache")
    if not e.overlap_scheduling():
        a.append("--disable-overlap-schedule")
    if e.max_model_len:
        a += ["--context-length", str(e.max_model_len)]
    a += ["--dtype", "float16" if job.precision.activations == "fp16" else "bfloat16"]
    if job.precision.weights == "fp8":
        a += ["--quantization", "fp8"]
    if job.precision.kv_cache == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if e.speculative is not None:
        s = e.speculative
        a += ["--speculative-algorithm", SGLANG_SPEC[s.method], "--speculative-num-steps", str(s.num_tokens),
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(s.num_tokens + 1)]
        if s.method in ("draft", "eagle", "eagle3"):
            a += ["--speculative-draft-model-path", _draft_ref(s) or "${DRAFT_MODEL_PATH}"]
    if role:
        a += ["--disaggregation-mode", role]
        if role == "prefill":
            a += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    lora = job.deployment.adapters
    if lora is not None:
        a += ["--max-loras-per-batch", str(lora.gpu_slots), "--max-loaded-loras", str(lora.host_slots),
              "--max-lora-rank", str(lora.slot_rank), "--lora-target-modules",
              *(f"{t}_proj" for t in lora.packed_targets(job.model))]
    return a


def router_export(engine: str, ports: dict[str, int], front: int, title: str) -> Export:
    """The router in front of a prefill/decode split: requests reach the prefill pool, then the decode pool."""
    prefill = f"http://${{PREFILL_HOST:-localhost}}:{ports['prefill']}"
    decode = f"http://${{DECODE_HOST:-localhost}}:{ports['decode']}"
    if engine == "vllm":
        name, launcher = "vllm-router", ["vllm-router"]
        args = ["--vllm-pd-disaggregation", "--prefill", prefill, "--decode", decode]
    else:
        name, launcher = "sglang-router", ["python", "-m", "sglang_router.launch_router"]
        args = ["--pd-disaggregation", "--prefill", prefill, str(BOOTSTRAP_PORT), "--decode", decode]
    args += ["--host", "0.0.0.0", "--port", str(front), "--policy", "round_robin"]
    notes = [f"router: clients send to port {front}; it sends each request to the prefill pool (port {ports['prefill']}) "
             f"and then to the decode pool (port {ports['decode']}); start it after both pools (pip install {name})"]
    return Export(name, VERSIONS[name], args, launcher, {}, {}, None, notes, title=title)


def export_serving(job: ServeJob, engine: str, version: str | None = None) -> list[Export]:
    """One Export per pool (colocated: one; disaggregated: prefill and decode, then their router; pools: each)."""
    version = version or VERSIONS[engine]
    out = []
    front = PORTS[engine]
    pools = _pools(job)
    split = job.deployment.kind == "disaggregated"
    ports: dict[str, int] = {}
    for k, (label, pool, e, role) in enumerate(pools):
        _check_current(engine, e)
        port = front + 100 * (k + 1) if split else front + k
        ports[label] = port
        if engine == "vllm":
            args = vllm_args(job, pool, e, role, port)
            launcher = ["vllm", "serve", model_ref(job)]
        else:
            args = sglang_args(job, pool, e, role, port)
            launcher = ["python", "-m", "sglang.launch_server", "--model-path", model_ref(job)]
        notes = [f"{label}: {pool.replicas} x {pool.gpu} tp{pool.tp} pp{pool.pp}"
                 + (f" dp{pool.dp_attention}" if pool.dp_attention > 1 else "") + f", port {port}"]
        nodes, _ = _nodes(pool)
        if nodes > 1:
            notes.append(f"{label} spans {nodes} nodes: run this command on each (NODE_RANK 0..{nodes - 1}, HEAD_NODE_IP "
                         "the first node's address)" + ("; on the other nodes add --headless --data-parallel-start-rank "
                                                        "NODE_RANK x the local size" if engine == "vllm" else ""))
        if pool.dp_attention > 1 and pool.replicas > 1:
            notes.append(f"{label}: {pool.replicas} replicas of this expert-parallel group: start one server per replica and "
                         "balance requests over them")
        if job.precision.weights in ("int8", "int4", "fp4"):
            notes.append(f"{job.precision.weights} weights: serve a quantised checkpoint (GPTQ/AWQ, NVFP4) in place of the "
                         "model path; the engine reads its quantisation from the checkpoint")
        if e.speculative is not None and _spec_note(e.speculative):
            notes.append(_spec_note(e.speculative))
        if getattr(pool, "classes", None):
            notes.append("length classes are routed by the client or router in front of the pools")
        if job.deployment.adapters is not None:
            notes.append(_adapter_note(engine, job.deployment.adapters))
        out.append(Export(engine, version, args, launcher, {}, {}, None, notes, title=f"{job.name} {label}"))
    if split:
        out.append(router_export(engine, ports, front, f"{job.name} router"))
    return out


def _adapter_note(engine: str, lora: AdapterSpec) -> str:
    """How the adapters themselves reach the engine (their paths are not part of the job)."""
    if engine == "vllm":
        return (f"{lora.count} adapters: name them with --lora-modules NAME=PATH ... or load them at run time "
                "(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, POST /v1/load_lora_adapter)")
    return f"{lora.count} adapters: name them with --lora-paths NAME=PATH ... (this also enables LoRA)"
