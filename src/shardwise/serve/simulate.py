"""Run a serve job: route requests to engines, run them, and collect per-request timestamps.

Colocated: a router (round-robin or least-outstanding, as vLLM's DP load balancer and Vidur's global
schedulers) spreads requests over every engine of the pool. Disaggregated (DistServe, Zhong et al.
2024 Sec. 3): the prefill pool runs each prompt and emits the first token; the KV cache then crosses
the link (KV bytes / bandwidth) and the request joins a decode engine. Decode pools never push back
on prefill pools here (DistServe's pull-based transfer hides that queue). Pools (GPU mix): requests
go to the pool that serves their length class (Mélange's request-size slices).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_SERVE_ENGINES
from shardwise.serve.adapters import AdapterCache
from shardwise.serve.config import DeploymentSpec, EngineSpec, LengthClass, PoolSpec, ServeJob, engine_spec
from shardwise.serve.constants import ServingConstants, serving_constants
from shardwise.serve.deploy import Pool, make_pool
from shardwise.serve.engine import Engine
from shardwise.serve.policies import make_engine
from shardwise.serve.state import ITLRecord, RequestTable
from shardwise.serve.timing import kv_transfer_s
from shardwise.serve.workload import Requests, build_requests


@dataclass
class ServeSimResult:
    """What a run produced: per-request timestamps (client clock), pooled ITL, and the deployment."""

    requests: Requests
    first_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    itl: ITLRecord
    pools: list[Pool]
    kind: str
    iterations: int = 0
    busy_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def usd_per_hour(self) -> float:
        return sum(p.usd_per_hour for p in self.pools)

    @property
    def kv_capacity_tokens(self) -> int:
        return sum(p.capacity.tokens * p.replicas for p in self.pools)


def run_pool(pool: Pool, table: RequestTable, ids: np.ndarray, router: str = "round_robin", prefill_only: bool = False) -> list[Engine]:
    """Run every request in `ids` (sorted by engine arrival) on `pool`'s engines."""
    cost = pool.adapters
    if cost is not None and table.adapter is None:
        table.adapter = cost.spec.draw(table.n, pool.adapter_seed).tolist()
    engines = [make_engine(pool.timer, pool.sim_engine, pool.blocks_per_engine, table, prefill_only,
                           AdapterCache(cost) if cost is not None else None) for _ in range(pool.engines)]
    if router == "round_robin" or len(engines) == 1:
        for k, rid in enumerate(ids.tolist()):
            engines[k % len(engines)].submit(rid)
        for e in engines:
            e.advance()
        return engines
    arrival = table.arrival_s
    for rid in ids.tolist():
        t = float(arrival[rid])
        for e in engines:
            e.advance(t)
        min(engines, key=Engine.outstanding).submit(rid)
    for e in engines:
        e.advance()
    return engines


def _collect(engines: list[Engine], itl: ITLRecord) -> tuple[int, float]:
    for e in engines:
        itl.extend(e.itl)
    return sum(e.iterations for e in engines), sum(e.busy_s for e in engines)


def adapter_report(pools: list[Pool], engines: list[Engine]) -> dict:
    """What the LoRA adapters cost: their GPU slots (taken from the KV cache) and the loads and adapters
    per step the engines saw ({} without adapters)."""
    costs = [p.adapters for p in pools if p.adapters is not None]
    if not costs:
        return {}
    spec = costs[0].spec
    steps = sum(e.adapter_steps for e in engines)
    return {"adapters": {
        "count": spec.count, "rank": spec.rank, "slot_rank": spec.slot_rank, "max_loras": spec.gpu_slots,
        "max_cpu_loras": spec.host_slots, "popularity": spec.popularity,
        "slots_gib_per_gpu": max(p.capacity.adapters_gib for p in pools),
        "gpu_loads": sum(e.adapters.gpu_loads for e in engines if e.adapters is not None),
        "host_loads": sum(e.adapters.host_loads for e in engines if e.adapters is not None),
        "distinct_per_step_mean": sum(e.adapter_distinct_sum for e in engines) / steps if steps else 0.0,
    }}


def prefix_cache_report(engines: list[Engine]) -> dict:
    """Prefix caching's hit rate over the prompt tokens the engines computed or reused, and its evictions
    ({} without prefix caching)."""
    caches = [e.cache for e in engines if e.cache is not None]
    if not caches:
        return {}
    hit, query = sum(c.hit_tokens for c in caches), sum(c.query_tokens for c in caches)
    return {"prefix_cache": {"hit_rate": hit / query if query else 0.0, "hit_tokens": hit, "prompt_tokens": query,
                             "evicted_blocks": sum(c.evicted for c in caches)}}


def build_pools(job: ServeJob, constants: ServingConstants, prefix_caching: bool | None = None) -> list[Pool]:
    pools = _build_pools(job, constants, prefix_caching)
    engines = sum(p.engines for p in pools)
    if engines > MAX_SERVE_ENGINES:
        raise ShardwiseError(
            f"deployment: {engines:,} engines (replicas x pp over all pools) exceed the limit of {MAX_SERVE_ENGINES:,} per "
            "simulation (see Limits in the README); simulate one replica at rate / replicas instead"
        )
    return pools


def _build_pools(job: ServeJob, constants: ServingConstants, prefix_caching: bool | None = None) -> list[Pool]:
    d, m = job.deployment, job.model
    lora = {"adapters": d.adapters, "adapter_seed": job.workload.seed} if d.adapters is not None else {}

    def pool(name: str, p: DeploymentSpec | PoolSpec, eng: EngineSpec, classes: list[LengthClass] | None = None) -> Pool:
        if prefix_caching is not None:
            eng = eng.model_copy(update={"prefix_caching": prefix_caching})
        accept = job.workload.acceptance_for(eng.speculative.method) if eng.speculative is not None else None
        return make_pool(name, m, job.precision, p.gpu, p.tp, p.pp, p.replicas, eng, constants, p.price_usd_per_gpu_hour,
                         classes, dp=p.dp_attention, expert_parallel=p.expert_parallel, expert_imbalance=p.expert_imbalance,
                         acceptance_rate=accept, **lora)

    if d.kind == "colocated":
        return [pool("deployment", d, engine_spec(d.engine))]
    if d.kind == "disaggregated":
        return [pool(f"deployment.{name}", p, engine_spec(d.engine, p.engine, where=f"deployment.{name}.engine"))
                for name, p in (("prefill", d.prefill), ("decode", d.decode))]
    return [pool(f"deployment.pools[{k}]", p, engine_spec(d.engine, p.engine, where=f"deployment.pools[{k}].engine"), p.classes)
            for k, p in enumerate(d.pools or [])]


def _class_assignment(pools: list[Pool], req: Requests, seed: int) -> np.ndarray:
    """Pool index per request: among the pools whose classes contain it, by their shares."""
    n = len(req)
    weights = np.zeros((n, len(pools)))
    for j, pool in enumerate(pools):
        for c in pool.classes or ():
            inside = (req.input_len >= c.input[0]) & (req.input_len <= c.input[1]) & (req.output_len >= c.output[0]) & (req.output_len <= c.output[1])
            weights[inside, j] += c.share
        if not pool.classes:
            weights[:, j] += 1.0
    total = weights.sum(axis=1)
    if np.any(total <= 0):
        k = int(np.argmax(total <= 0))
        raise ShardwiseError(f"request {k} (input {req.input_len[k]}, output {req.output_len[k]} tokens) matches no pool's classes; widen the classes")
    u = np.random.default_rng(seed + 7919).random(n) * total
    return np.argmax(np.cumsum(weights, axis=1) > u[:, None], axis=1)


def simulate(job: ServeJob, requests: Requests | None = None, constants: ServingConstants | None = None,
             tables: list[RequestTable] | None = None, prefix_caching: bool | None = None) -> ServeSimResult:
    """Simulate `job` (its workload, or `requests` when given) and return the timestamps. `tables`, when
    given, receives each request table as it is created (a progress bar reads it); `prefix_caching`
    overrides every pool's setting."""
    watchers = tables if tables is not None else []
    c = constants or serving_constants()
    pools = build_pools(job, c, prefix_caching)
    max_len = min((p.engine.max_model_len or 10**12) for p in pools)
    req = requests if requests is not None else build_requests(job.workload, job.base_dir, None if max_len >= 10**12 else max_len)
    kind = job.deployment.kind
    itl = ITLRecord()
    if kind == "disaggregated":
        return _simulate_disaggregated(job, req, pools, c, itl, watchers)
    table = RequestTable(req, req.arrival_s + c.frontend_for(pools[0].engine.family()))
    watchers.append(table)
    ids = np.arange(len(req))
    iters, busy = 0, 0.0
    engines: list[Engine] = []
    if kind == "colocated":
        pools[0].check_requests(req.input_len, req.output_len)
        engines = run_pool(pools[0], table, ids, job.deployment.router)
        iters, busy = _collect(engines, itl)
    else:
        owner = _class_assignment(pools, req, job.workload.seed)
        for j, pool in enumerate(pools):
            mine = ids[owner == j]
            if len(mine):
                pool.check_requests(req.input_len[mine], req.output_len[mine])
                ran = run_pool(pool, table, mine, job.deployment.router)
                i, b = _collect(ran, itl)
                iters, busy, engines = iters + i, busy + b, engines + ran
    return ServeSimResult(req, table.first_s, table.finish_s, table.preemptions, itl, pools, kind, iters, busy,
                     {**adapter_report(pools, engines), **prefix_cache_report(engines)})


def _simulate_disaggregated(job: ServeJob, req: Requests, pools: list[Pool], c: ServingConstants, itl: ITLRecord,
                            watchers: list[RequestTable]) -> ServeSimResult:
    pre, dec = pools
    pre.check_requests(req.input_len, np.ones_like(req.output_len))
    dec.check_requests(req.input_len, req.output_len)
    ptab = RequestTable(req, req.arrival_s + c.frontend_for(pre.engine.family()))
    watchers.append(ptab)
    n = len(req)
    e1 = run_pool(pre, ptab, np.arange(n), job.deployment.router, prefill_only=True)
    links = min(pre.replica_gpus, dec.replica_gpus)
    ready = ptab.first_s + kv_transfer_s(job.model, req.input_len, job.precision.kv_bytes, job.deployment.kv_link_gbps * links, c.link_efficiency)
    dtab = RequestTable(req, ready)
    dtab.first_s[:] = ptab.first_s
    watchers.append(dtab)
    multi = req.output_len > 1
    for rid in np.flatnonzero(multi).tolist():
        dtab.prefilled[rid] = True
        dtab.generated[rid] = 1
    order = np.flatnonzero(multi)[np.argsort(ready[multi], kind="stable")]
    e2 = run_pool(dec, dtab, order, job.deployment.router) if len(order) else []
    finish = np.where(multi, dtab.finish_s, ptab.first_s)
    i1, b1 = _collect(e1, itl)
    i2, b2 = _collect(e2, itl)
    extra = {"kv_transfer_ms_mean": float(np.mean(ready - ptab.first_s) * 1e3), **adapter_report(pools, e1 + e2),
             **prefix_cache_report(e1)}
    return ServeSimResult(req, ptab.first_s, finish, ptab.preemptions + dtab.preemptions, itl, pools, "disaggregated", i1 + i2, b1 + b2, extra)

