"""Per-instance capacity under SLOs: the highest request rate one replica (or one prefill / decode
instance) sustains while the required fraction of requests meets the targets.

DistServe (Zhong et al. 2024, Sec. 4) plans the same way: simulate one instance of each candidate
configuration to find its goodput (max rate at >= 90% SLO attainment), then replicate to the target
rate. Arrivals are drawn once at unit rate and scaled (common random numbers), so attainment varies
smoothly with the rate and a bisection converges in a few simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from shardwise.serve.config import SLOSpec
from shardwise.serve.constants import ServingConstants
from shardwise.serve.deploy import Pool
from shardwise.serve.metrics import slo_mask
from shardwise.serve.simulate import run_pool
from shardwise.serve.state import RequestTable
from shardwise.serve.workload import Requests

OFFLINE_REQUESTS = 3000  # long enough that the 20%-80% completion window sees a full batch in steady state
SATURATION_MARGIN = 0.95  # plan below the saturated throughput: queues grow without bound at rho -> 1


@dataclass
class CapacityResult:
    rate: float  # req/s one instance sustains at the attainment target (0: none)
    attainment_at_low: float  # attainment at the lowest rate tried (how close an infeasible one gets)
    p90_ttft_ms: float
    p90_tpot_ms: float
    simulations: int


def _scaled(unit: Requests, rate: float) -> Requests:
    return replace(unit, arrival_s=unit.arrival_s / rate) if math.isfinite(rate) else replace(unit, arrival_s=np.zeros(len(unit)))


def _latencies(pool: Pool, req: Requests, phase: str, constants: ServingConstants) -> dict[str, np.ndarray]:
    """TTFT/TPOT/E2E (s) of `req` on one instance of `pool` running `phase`."""
    ids = np.arange(len(req))
    if phase == "decode":
        table = RequestTable(req)
        table.first_s[:] = req.arrival_s
        for rid in ids.tolist():
            if table.output[rid] > 1:
                table.prefilled[rid], table.generated[rid] = True, 1
        multi = ids[req.output_len > 1]
        run_pool(replace(pool, replicas=1), table, multi)
        finish = np.where(req.output_len > 1, table.finish_s, req.arrival_s)
        ttft = np.zeros(len(req))
    else:
        table = RequestTable(req, req.arrival_s + constants.frontend_for(pool.engine.family()))
        run_pool(replace(pool, replicas=1), table, ids, prefill_only=phase == "prefill")
        ttft = table.first_s - req.arrival_s
        finish = table.finish_s
    e2e = finish - req.arrival_s
    tpot = np.where(req.output_len > 1, (e2e - ttft) / np.maximum(req.output_len - 1, 1), 0.0)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e}


def phase_slo(slo: SLOSpec, phase: str) -> SLOSpec:
    """The targets a phase is judged on: prefill pools TTFT, decode pools TPOT, colocated both."""
    if phase == "prefill":
        return SLOSpec(ttft_ms=slo.ttft_ms or 1e12, attainment=slo.attainment)
    if phase == "decode":
        return SLOSpec(tpot_ms=slo.tpot_ms or 1e12, attainment=slo.attainment)
    return slo


def saturated(lat: dict[str, np.ndarray]) -> bool:
    """Over-saturation (the idea of GuideLLM's over-saturation detector): latency still drifts
    upward at the end of the run, so a longer run would miss the SLO. Compares the last quarter of
    requests (in send order) with the second."""
    n = len(lat["ttft_s"])
    if n < 40:
        return False
    q2, q4 = slice(n // 4, n // 2), slice(3 * n // 4, n)
    ttft, tpot = lat["ttft_s"], lat["tpot_s"]
    return bool(np.median(ttft[q4]) > 2.0 * np.median(ttft[q2]) + 0.05 or np.median(tpot[q4]) > 1.25 * np.median(tpot[q2]) + 1e-3)


def attainment(pool: Pool, unit: Requests, rate: float, slo: SLOSpec, phase: str, constants: ServingConstants) -> tuple[float, float, float]:
    """(fraction meeting the SLO, p90 TTFT ms, p90 TPOT ms) at `rate` req/s on one instance; the
    fraction is 0 when the run is over-saturated."""
    lat = _latencies(pool, _scaled(unit, rate), phase, constants)
    good = slo_mask(lat, phase_slo(slo, phase))
    if saturated(lat):
        good[:] = False
    multi = unit.output_len > 1
    p90_tpot = float(np.percentile(lat["tpot_s"][multi], 90) * 1e3) if multi.any() else 0.0
    return float(good.mean()), float(np.percentile(lat["ttft_s"], 90) * 1e3), p90_tpot


def _tiled(unit: Requests, n: int) -> Requests:
    """At least `n` requests, all sent at t=0, repeating the sample's lengths (a long offline run)."""
    k = max(1, math.ceil(n / len(unit)))
    inp, out = np.tile(unit.input_len, k), np.tile(unit.output_len, k)
    group = None if unit.prefix_group is None else np.tile(unit.prefix_group, k)
    return Requests(np.zeros(len(inp)), inp, out, unit.prefix_len, group)


def saturated_throughput(finish_s: np.ndarray) -> float:
    """Completions per second in the middle of an offline run (20%-80% of completions): the engine's
    throughput with a full batch, without the ramp-up and the long-request tail."""
    f = np.sort(finish_s[np.isfinite(finish_s)])
    n = len(f)
    lo, hi = int(0.2 * n), int(0.8 * n)
    span = float(f[hi] - f[lo]) if hi > lo else 0.0
    return (hi - lo) / span if span > 0 else n / max(float(f[-1]), 1e-9)


def capacity(pool: Pool, unit: Requests, slo: SLOSpec, phase: str, constants: ServingConstants, rel_tol: float = 0.04) -> CapacityResult:
    """Max rate with attainment >= slo.attainment, by bisection below the saturated throughput of an
    offline run (a stable queue needs a rate below it)."""
    lat = _latencies(pool, _tiled(unit, OFFLINE_REQUESTS), phase, constants)
    upper = SATURATION_MARGIN * saturated_throughput(lat["e2e_s"])
    low = upper * 0.02
    att, p90_ttft, p90_tpot = attainment(pool, unit, low, slo, phase, constants)
    sims = 2
    if att < slo.attainment:
        return CapacityResult(0.0, att, p90_ttft, p90_tpot, sims)
    ok, bad, best = low, upper, (p90_ttft, p90_tpot)
    while bad / ok > 1 + rel_tol:
        mid = math.sqrt(ok * bad) if bad / ok > 4 else (ok + bad) / 2
        att, p90_ttft, p90_tpot = attainment(pool, unit, mid, slo, phase, constants)
        sims += 1
        if att >= slo.attainment:
            ok, best = mid, (p90_ttft, p90_tpot)
        else:
            bad = mid
    return CapacityResult(ok, 1.0, best[0], best[1], sims)
