"""`serve plan`: the cheapest deployment meeting the SLOs at a target rate.

Search (DistServe Sec. 4's shape, extended with cost and GPU types): for every allowed GPU type x TP x
PP x engine variant, find one instance's capacity under the SLOs (:mod:`shardwise.serve.capacity`);
MoE models also try expert-parallel replicas, with TP attention over one node and with data-parallel
attention over one or two nodes (SGLang's and vLLM's wide-EP layouts); a job that names a speculative
decoder is tried with and without it;
colocated candidates replicate a replica config to the rate; disaggregated candidates pair a prefill
config (judged on TTFT) with a decode config (judged on TPOT), possibly on different GPU types, and
size each pool (the P:D ratio); a GPU mix assigns length classes to types with Mélange's integer
program (:mod:`shardwise.serve.mix`). Candidates are ranked by $/hour, and the cheapest are verified
by simulating the whole deployment at the target rate (adding an instance while the check fails).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.serve.adapters import AdapterSpec
from shardwise.serve.capacity import CapacityResult, capacity, saturated
from shardwise.serve.config import (
    DeploymentSpec,
    EngineSpec,
    LengthClass,
    ServeJob,
    SLOSpec,
    SpeculativeSpec,
    parse_block,
)
from shardwise.serve.constants import ServingConstants, serving_constants
from shardwise.serve.deploy import Pool, make_pool
from shardwise.serve.metrics import compute_metrics, per_request
from shardwise.serve.mix import allocate
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import simulate
from shardwise.serve.workload import Requests, WorkloadSpec, build_requests
from shardwise.specs.hardware import get_gpu
from shardwise.specs.model import ModelSpec

TP_CHOICES = (1, 2, 4, 8)
PP_CHOICES = (1, 2, 4)
# engine variants searched for colocated replicas: vLLM V1 (the only engine current vLLM has) with a small
# and a large token budget (Sarathi-Serve: a small budget bounds decode stalls)
ENGINE_VARIANTS = (
    {"chunked_prefill": True, "max_num_batched_tokens": 2048},
    {"chunked_prefill": True, "max_num_batched_tokens": 8192},
)
VERIFY_TOP = 8
EP_NODES = (1, 2)  # expert-parallel replicas of one or two nodes (MoE)
# A progress report: what the search is doing and the fraction done (0..1).
Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class PlanRequest:
    model: ModelSpec
    precision: Precision
    rate: float
    slo: SLOSpec
    gpus: dict[str, int]  # catalog name -> GPUs available
    workload: WorkloadSpec
    num_requests: int = 600
    base_dir: Any = None
    adapters: AdapterSpec | None = None  # LoRA adapters every candidate serves
    speculative: tuple[SpeculativeSpec, ...] = ()  # speculative decoders the search may turn on

    def deployment_block(self, cand: Candidate) -> dict[str, Any]:
        """The `deployment:` block that runs `cand`, with the adapters it serves."""
        block = cand.deployment()
        if self.adapters is not None:
            block["adapters"] = self.adapters.model_dump(exclude_none=True)
        return block


@dataclass
class Option:
    """One instance configuration and its capacity in one phase."""

    phase: str
    pool: Pool
    cap: CapacityResult

    @property
    def usd_per_hour(self) -> float:
        return self.pool.replica_gpus * self.pool.price_usd_per_gpu_hour

    def label(self) -> str:
        p, e = self.pool, self.pool.engine
        knob = f"chunked {e.max_num_batched_tokens}" if e.chunked_prefill else "prefill-first"
        if e.speculative is not None:
            knob += f", {e.speculative.method} x{e.speculative.num_tokens}"
        layout = f"{p.gpu.name} tp{p.tp}" + (f" pp{p.pp}" if p.pp > 1 else "") + (f" dp{p.dp}" if p.dp > 1 else "")
        return layout + (f" ep{p.tp * p.dp}" if p.expert_parallel else "") + f" ({knob})"


@dataclass
class Candidate:
    kind: str  # colocated | disaggregated | mix
    parts: list[tuple[Option, int]]  # (option, instances)
    classes: dict[int, list[LengthClass]] = field(default_factory=dict)  # mix: part index -> classes
    feasible: bool = True
    reason: str = ""
    metrics: dict[str, Any] | None = None

    @property
    def usd_per_hour(self) -> float:
        return sum(o.usd_per_hour * n for o, n in self.parts)

    @property
    def gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o, n in self.parts:
            out[o.pool.gpu.name] = out.get(o.pool.gpu.name, 0) + n * o.pool.replica_gpus
        return out

    def describe(self) -> str:
        if self.kind == "disaggregated":
            (p, n_p), (d, n_d) = self.parts
            return f"prefill {n_p}x {p.label()} + decode {n_d}x {d.label()}"
        if self.kind == "mix":
            return " + ".join(f"{n}x {o.label()} [{_classes_label(self.classes.get(k, []))}]" for k, (o, n) in enumerate(self.parts))
        return " + ".join(f"{n}x {o.label()}" for o, n in self.parts)

    def deployment(self) -> dict[str, Any]:
        """The `deployment:` block of a job file that runs this candidate."""
        def pool(o: Option, n: int) -> dict[str, Any]:
            p, e = o.pool, o.pool.engine
            engine: dict[str, Any] = {"chunked_prefill": e.chunked_prefill, "max_num_batched_tokens": e.max_num_batched_tokens,
                                      "max_num_seqs": e.max_num_seqs}
            if e.speculative is not None:
                engine["speculative"] = e.speculative.model_dump(exclude_none=True)
            block: dict[str, Any] = {"gpu": p.gpu.name, "tp": p.tp, "pp": p.pp, "replicas": n}
            if p.dp > 1:
                block["dp_attention"] = p.dp
            if p.expert_parallel:
                block["expert_parallel"] = True
            return {**block, "engine": engine}
        if self.kind == "colocated":
            (o, n), = self.parts
            return pool(o, n)
        if self.kind == "disaggregated":
            (p, n_p), (d, n_d) = self.parts
            return {"prefill": pool(p, n_p), "decode": pool(d, n_d)}
        pools = []
        for k, (o, n) in enumerate(self.parts):
            block = pool(o, n)
            block["classes"] = [c.model_dump() for c in self.classes.get(k, [])]
            pools.append(block)
        return {"pools": pools}


def _classes_label(classes: list[LengthClass]) -> str:
    def rng(lo: int, hi: int) -> str:
        return f"<={hi}" if lo <= 1 else f">{lo - 1}"
    return "; ".join(f"in {rng(*c.input)} out {rng(*c.output)}" + (f" {c.share:.0%}" if c.share < 1 else "") for c in classes)


@dataclass
class ServePlanResult:
    request: PlanRequest
    chosen: Candidate | None
    runners_up: list[Candidate]
    closest: list[Candidate]
    options: list[Option]
    seconds: float
    simulations: int
    mix_note: str = ""

    def to_json(self) -> dict[str, Any]:
        def cand(c: Candidate) -> dict[str, Any]:
            out = {"kind": c.kind, "description": c.describe(), "usd_per_hour": c.usd_per_hour, "gpus": c.gpus_by_type,
                   "feasible": c.feasible, "deployment": self.request.deployment_block(c)}
            if c.reason:
                out["reason"] = c.reason
            if c.metrics:
                m = c.metrics
                out["predicted"] = {k: m[k] for k in ("ttft_ms", "tpot_ms", "slo_attainment", "goodput", "request_throughput",
                                                      "cost_usd_per_mtok_input", "cost_usd_per_mtok_output") if k in m}
            return out
        r = self.request
        return {
            "model": r.model.name, "precision": r.precision.to_job(), "rate": r.rate, "slo": r.slo.model_dump(), "gpus_available": r.gpus,
            "feasible": self.chosen is not None,
            "chosen": cand(self.chosen) if self.chosen else None,
            "runners_up": [cand(c) for c in self.runners_up],
            "closest": [cand(c) for c in self.closest],
            "instance_capacities": [{"phase": o.phase, "config": o.label(), "req_per_s": o.cap.rate, "usd_per_hour": o.usd_per_hour} for o in self.options],
            "mix": self.mix_note,
            "search": {"seconds": self.seconds, "simulations": self.simulations},
        }


def _unit_requests(req: PlanRequest) -> Requests:
    """Request sample at 1 req/s (scaled to any rate later), with the workload's lengths and burstiness."""
    spec = req.workload
    if spec.arrival == "trace":
        r = build_requests(spec.model_copy(update={"rate": None}), req.base_dir)
        r = r if len(r) <= req.num_requests else r.subset(np.arange(len(r)) < req.num_requests)
        span = float(r.arrival_s[-1] - r.arrival_s[0])
        return replace(r, arrival_s=(r.arrival_s - r.arrival_s[0]) * ((len(r) - 1) / span if span > 0 else 1.0))
    return build_requests(spec.model_copy(update={"rate": 1.0, "num_requests": req.num_requests}), req.base_dir)


class Planner:
    def __init__(self, req: PlanRequest, constants: ServingConstants | None = None, progress: Progress | None = None):
        self.req, self.c = req, constants or serving_constants()
        self.unit = _unit_requests(req)
        self.sims = 0
        self.options: list[Option] = []
        self.progress = progress
        self.sized, self.to_size = 0, 1  # instance configs sized so far, of how many

    def _report(self, message: str, fraction: float) -> None:
        if self.progress is not None:
            self.progress(message, fraction)

    def _pool(self, gpu: str, tp: int, pp: int, engine: dict[str, Any], dp: int = 1, ep: bool = False) -> Pool | None:
        r = self.req
        spec = engine.get("speculative")
        try:
            pool = make_pool("plan", r.model, r.precision, gpu, tp, pp, 1, EngineSpec(**engine), self.c,
                             adapters=r.adapters, adapter_seed=r.workload.seed, dp=dp, expert_parallel=ep,
                             acceptance_rate=r.workload.acceptance_for(spec.method) if spec is not None else None)
            pool.check_requests(self.unit.input_len, self.unit.output_len)
        except ShardwiseError:
            return None
        return pool

    def _option(self, phase: str, pool: Pool, unit: Requests | None = None) -> Option:
        self.sized += 1
        self._report(f"capacity of {phase} {pool.describe()}", 0.8 * min(1.0, self.sized / self.to_size))
        cap = capacity(pool, unit if unit is not None else self.unit, self.req.slo, phase, self.c)
        self.sims += cap.simulations
        opt = Option(phase, pool, cap)
        if unit is None:
            self.options.append(opt)
        return opt

    def _layouts(self, gpu: str) -> list[tuple[int, int, int, bool]]:
        """(tp, pp, dp, expert_parallel) layouts that fit: per TP, the smallest PP; for MoE models also
        expert-parallel replicas of one or two nodes, TP attention (dp 1) or data-parallel attention (tp 1)."""
        g, m = get_gpu(gpu), self.req.model
        avail = self.req.gpus[gpu]
        out = []
        for tp in TP_CHOICES:
            if m.heads % tp or tp > g.gpus_per_node or tp > avail:
                continue
            for pp in PP_CHOICES:
                if tp * pp > avail:
                    break
                if self._pool(gpu, tp, pp, ENGINE_VARIANTS[1]) is not None:
                    out.append((tp, pp, 1, False))
                    break  # the smallest pp that fits: more stages only add latency here
        if m.is_moe:
            for nodes in EP_NODES:
                group = nodes * g.gpus_per_node
                if group > avail or m.experts % group:
                    continue
                for tp, dp in ((g.gpus_per_node, nodes), (1, group)):
                    if m.heads % tp == 0 and self._pool(gpu, tp, 1, ENGINE_VARIANTS[1], dp, True) is not None:
                        out.append((tp, 1, dp, True))
        return out

    def _variants(self) -> list[dict[str, Any]]:
        """Engine variants: the token budgets, then the large one with each speculative decoder of the request."""
        extra = [{**ENGINE_VARIANTS[1], "speculative": s} for s in self.req.speculative]
        return [*ENGINE_VARIANTS, *extra]

    def search(self, disaggregation: bool = True, mix: bool = True) -> ServePlanResult:
        t0 = time.perf_counter()
        cands: list[Candidate] = []
        best_by_type: dict[str, Option] = {}
        prefill_opts: list[Option] = []
        decode_opts: list[Option] = []
        layouts = {gpu: self._layouts(gpu) for gpu in self.req.gpus}
        variants = self._variants()
        self.to_size = max(1, sum(len(variants) + (2 if disaggregation and pp == 1 else 0)
                                  for found in layouts.values() for _, pp, _, _ in found))
        for gpu, found in layouts.items():
            for tp, pp, dp, ep in found:
                for variant in variants:
                    pool = self._pool(gpu, tp, pp, variant, dp, ep)
                    if pool is None:
                        continue
                    opt = self._option("colocated", pool)
                    cands.append(self._replicate([opt]))
                    if opt.cap.rate > 0:
                        cur = best_by_type.get(gpu)
                        if cur is None or opt.usd_per_hour / opt.cap.rate < cur.usd_per_hour / cur.cap.rate:
                            best_by_type[gpu] = opt
                if disaggregation and pp == 1:
                    pool = self._pool(gpu, tp, 1, ENGINE_VARIANTS[1], dp, ep)
                    if pool is not None:
                        prefill_opts.append(self._option("prefill", pool))
                        decode_opts.append(self._option("decode", pool))
        for p in prefill_opts:
            for d in decode_opts:
                cands.append(self._replicate([p, d], kind="disaggregated"))
        chosen, runners, closest = self._verify(cands)
        note = ""
        if mix and len(best_by_type) >= 2:
            mixed, note = self._mix(best_by_type)
            if mixed is not None and (chosen is None or mixed.usd_per_hour < chosen.usd_per_hour):
                self._check(mixed)
                if mixed.feasible:
                    runners = [c for c in [chosen, *runners] if c is not None][:4]
                    chosen = mixed
        return ServePlanResult(self.req, chosen, runners, closest, self.options, time.perf_counter() - t0, self.sims, note)

    # --- sizing and verification --------------------------------------------------------------
    def _replicate(self, opts: list[Option], kind: str = "colocated") -> Candidate:
        rate = self.req.rate
        parts = []
        for o in opts:
            if o.cap.rate <= 0:
                return Candidate(kind, [(x, 1) for x in opts], feasible=False,
                                 reason=f"{o.phase} {o.label()} misses the SLO even at low load (p90 TTFT {o.cap.p90_ttft_ms:.0f} ms, p90 TPOT {o.cap.p90_tpot_ms:.1f} ms)")
            parts.append((o, max(1, math.ceil(rate / o.cap.rate))))
        cand = Candidate(kind, parts)
        self._fits(cand)
        return cand

    def _fits(self, cand: Candidate) -> None:
        for gpu, n in cand.gpus_by_type.items():
            if n > self.req.gpus.get(gpu, 0):
                cand.feasible, cand.reason = False, f"needs {n} {gpu} GPUs, {self.req.gpus.get(gpu, 0)} available"

    def _job(self, cand: Candidate, n: int) -> tuple[ServeJob, Requests]:
        r = self.req
        req = build_requests(r.workload.model_copy(update={"rate": r.rate, "num_requests": n}), r.base_dir) if r.workload.arrival != "trace" else None
        if req is None:
            unit = _unit_requests(replace(r, num_requests=n))
            req = replace(unit, arrival_s=unit.arrival_s / r.rate)
        dep = parse_block(DeploymentSpec, r.deployment_block(cand), "deployment")
        return ServeJob(r.model, r.precision, dep, r.workload, r.slo, r.model.name), req

    def _check(self, cand: Candidate, bumps: int = 3) -> None:
        """Simulate the whole deployment at the target rate; add an instance while it misses the SLO."""
        self._report(f"verifying {cand.describe()} at {self.req.rate:g} req/s", 0.9)
        for _ in range(bumps + 1):
            job, req = self._job(cand, 2 * self.req.num_requests)
            result = simulate(job, req, self.c)
            self.sims += 1
            m = compute_metrics(result, self.req.slo)
            cand.metrics = m
            if m["slo_attainment"] >= self.req.slo.attainment and not saturated(per_request(result)):
                return
            k = self._bottleneck(cand, m)
            o, n = cand.parts[k]
            cand.parts[k] = (o, n + 1)
            self._fits(cand)
            if not cand.feasible:
                return
        cand.feasible, cand.reason = False, f"attainment {cand.metrics['slo_attainment']:.0%} after adding instances"

    def _bottleneck(self, cand: Candidate, m: dict[str, Any]) -> int:
        if cand.kind != "disaggregated":
            return min(range(len(cand.parts)), key=lambda k: cand.parts[k][1] * cand.parts[k][0].cap.rate)
        slo = self.req.slo
        ttft_bad = slo.ttft_ms is not None and m["ttft_ms"]["p90"] > slo.ttft_ms
        return 0 if ttft_bad else 1

    def _verify(self, cands: list[Candidate]) -> tuple[Candidate | None, list[Candidate], list[Candidate]]:
        feasible = sorted((c for c in cands if c.feasible), key=lambda c: c.usd_per_hour)
        verified: list[Candidate] = []
        for c in feasible:
            if len(verified) >= VERIFY_TOP:
                break
            self._check(c)
            if c.feasible:
                verified.append(c)
        verified.sort(key=lambda c: c.usd_per_hour)
        seen, distinct = set(), []
        for c in verified:  # one row per layout: engine variants of the same layout rarely differ in cost
            key = (c.kind, tuple((o.phase, o.pool.gpu.name, o.pool.tp, o.pool.pp, o.pool.dp, o.pool.expert_parallel,
                                  o.pool.engine.speculative is not None, n) for o, n in c.parts))
            if key not in seen:
                seen.add(key)
                distinct.append(c)
        if distinct:
            return distinct[0], distinct[1:5], []
        closest = sorted(cands, key=lambda c: (min(o.cap.attainment_at_low for o, _ in c.parts), -c.usd_per_hour), reverse=True)
        return None, [], closest[:5]

    # --- GPU mix (Mélange) ----------------------------------------------------------------------
    def _classes(self) -> list[LengthClass]:
        u = self.unit
        mi, mo = int(np.median(u.input_len)), int(np.median(u.output_len))
        big = 10**9
        return [LengthClass(input=(a, b), output=(c, d)) for a, b in ((1, mi), (mi + 1, big)) for c, d in ((1, mo), (mo + 1, big))]

    def _mix(self, best: dict[str, Option]) -> tuple[Candidate | None, str]:
        classes = self._classes()
        u = self.unit
        rates, caps = [], {g: [] for g in best}
        for cl in classes:
            inside = (u.input_len >= cl.input[0]) & (u.input_len <= cl.input[1]) & (u.output_len >= cl.output[0]) & (u.output_len <= cl.output[1])
            rates.append(self.req.rate * float(inside.mean()))
            if inside.sum() < 20:
                return None, f"too few sampled requests in a length class ({int(inside.sum())} < 20) to profile a GPU mix (a short trace, or raise --num-requests)"
            sub = u.subset(inside)
            sub = replace(sub, arrival_s=np.arange(1, len(sub) + 1, dtype=float))  # unit-rate, evenly spaced
            for g, opt in best.items():
                caps[g].append(self._option("colocated", opt.pool, sub).cap.rate)
        cost = {g: o.usd_per_hour for g, o in best.items()}
        avail = {g: self.req.gpus[g] // o.pool.replica_gpus for g, o in best.items()}
        alloc = allocate(rates, caps, cost, avail)
        if not alloc.feasible:
            return None, "no GPU mix meets the SLOs within the available GPUs"
        if len(alloc.instances) < 2:
            (g, n), = alloc.instances.items()
            return None, f"the integer program keeps one GPU type ({n}x {g}, ${alloc.cost:,.2f}/h): no mix is cheaper"
        parts, cls = [], {}
        for k, (g, n) in enumerate(alloc.instances.items()):
            parts.append((best[g], n))
            cls[k] = [classes[b].model_copy(update={"share": round(s, 6)}) for b, s in enumerate(alloc.shares[g]) if s > 0]
        cand = Candidate("mix", parts, cls)
        return cand, f"integer program: {', '.join(f'{n}x {g}' for g, n in alloc.instances.items())} at ${alloc.cost:,.2f}/h"


def plan(req: PlanRequest, disaggregation: bool = True, mix: bool = True, constants: ServingConstants | None = None,
         progress: Progress | None = None) -> ServePlanResult:
    """The cheapest deployment meeting the SLOs (see the module docstring); `progress` receives
    (message, fraction done) as the search goes."""
    if not req.rate > 0 or math.isinf(req.rate):
        raise ShardwiseError(f"--rate must be a positive, finite request rate (req/s), got {req.rate}")
    if not req.gpus:
        raise ShardwiseError("--gpu-mix must name at least one GPU type with a count, e.g. h100:8")
    return Planner(req, constants, progress).search(disaggregation, mix)


def cost_curves(result: ServePlanResult) -> dict[str, Any]:
    """$/hour meeting the SLOs versus rate (instances = ceil(rate / capacity)): the most cost-efficient
    colocated replica of each GPU type, the best disaggregated pairing found, and the chosen plan."""
    target = result.request.rate
    rates = np.linspace(target * 0.05, target * 3.0, 300)
    curves = []
    best: dict[str, Option] = {}
    for o in result.options:
        if o.phase == "colocated" and o.cap.rate > 0:
            cur = best.get(o.pool.gpu.name)
            if cur is None or o.usd_per_hour / o.cap.rate < cur.usd_per_hour / cur.cap.rate:
                best[o.pool.gpu.name] = o
    for o in best.values():
        curves.append({"label": f"colocated {o.label()}", "rates": rates.tolist(),
                       "usd_per_hour": (np.ceil(rates / o.cap.rate) * o.usd_per_hour).tolist()})
    disagg = [c for c in [result.chosen, *result.runners_up] if c is not None and c.kind == "disaggregated"]
    if disagg:
        c = disagg[0]
        cost = sum(np.ceil(rates / o.cap.rate) * o.usd_per_hour for o, _ in c.parts)
        curves.append({"label": "disaggregated " + " -> ".join(o.label() for o, _ in c.parts), "rates": rates.tolist(), "usd_per_hour": cost.tolist()})
    chosen = None
    if result.chosen is not None:
        chosen = {"label": f"chosen: {result.chosen.describe()}", "rate": target, "usd_per_hour": result.chosen.usd_per_hour}
    return {"curves": curves, "chosen": chosen}
