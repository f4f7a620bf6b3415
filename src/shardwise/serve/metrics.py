"""Serving metrics, defined once, exactly as `vllm bench serve` defines them
(vllm/benchmarks/serve.py::calculate_metrics):

- TTFT: first token time - send time, per request.
- TPOT: (E2E - TTFT) / (output tokens - 1), per request with more than one output token (the first
  token is excluded); for goodput a one-token request counts with TPOT 0.
- ITL: every gap between consecutive streamed chunks of every request, pooled (with multi-step
  scheduling a chunk carries several tokens, so ITL > TPOT).
- E2E: last token time - send time.
- Each latency is reported as mean, median, p90, p99 (numpy's linear percentiles), in ms.
- Throughputs divide by the benchmark duration (start of the run to the last completion).
- Goodput: requests/s meeting every given SLO (ttft, tpot, e2e) — `--goodput`; SLO attainment: the
  fraction of requests meeting them (DistServe's attainment).
- Cost: $/hour of the deployment x duration; per token by the GKE Inference Quickstart convention
  that an input token costs a quarter of an output token (GoogleCloudPlatform/gke-mcp PR #84).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.serve.config import SLOSpec
from shardwise.serve.simulate import ServeSimResult

PERCENTILES = (50, 90, 99)


def summary_ms(values_s: np.ndarray) -> dict[str, float]:
    """{mean, median, p90, p99} in ms (zeros when empty, as vLLM reports)."""
    v = np.asarray(values_s, float) * 1e3
    if v.size == 0:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(v, PERCENTILES)
    return {"mean": float(v.mean()), "median": float(p50), "p90": float(p90), "p99": float(p99)}


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """np.percentile(q) of the multiset where values[i] appears weights[i] times (integer weights)."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    pos = q / 100.0 * (cum[-1] - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    v_lo = v[np.searchsorted(cum, lo, side="right")]
    v_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def weighted_summary_ms(values_s: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    keep = weights > 0
    v, w = np.asarray(values_s, float)[keep] * 1e3, weights[keep]
    if v.size == 0:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    out = {"mean": float(np.average(v, weights=w))}
    for key, q in zip(("median", "p90", "p99"), PERCENTILES, strict=True):
        out[key] = weighted_percentile(v, w, q)
    return out


def per_request(result: ServeSimResult) -> dict[str, np.ndarray]:
    """TTFT, TPOT (0 where output is one token), E2E in seconds, per request."""
    r = result.requests
    ttft = result.first_s - r.arrival_s
    e2e = result.finish_s - r.arrival_s
    out = r.output_len
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e}


def slo_mask(lat: dict[str, np.ndarray], slo: SLOSpec) -> np.ndarray:
    """Requests meeting every given target (vLLM: SLO >= metric)."""
    good = np.ones(len(lat["ttft_s"]), dtype=bool)
    for key, target in (("ttft_s", slo.ttft_ms), ("tpot_s", slo.tpot_ms), ("e2e_s", slo.e2e_ms)):
        if target is not None:
            good &= lat[key] * 1e3 <= target
    return good


def compute_metrics(result: ServeSimResult, slo: SLOSpec | None = None) -> dict[str, Any]:
    """The metrics dictionary `serve simulate --format json` prints."""
    r = result.requests
    lat = per_request(result)
    done = np.isfinite(result.finish_s)
    n = int(done.sum())
    duration = float(np.nanmax(result.finish_s)) if n else 0.0
    inp, out = int(r.input_len[done].sum()), int(r.output_len[done].sum())
    multi = done & (r.output_len > 1)
    itl_v, itl_w = result.itl.samples()
    hours = duration / 3600.0
    cost = result.usd_per_hour * hours
    out_equiv = out + inp / 4.0
    usd_out = cost / out_equiv * 1e6 if out_equiv else 0.0
    m: dict[str, Any] = {
        "completed": n,
        "duration_s": duration,
        "total_input_tokens": inp,
        "total_output_tokens": out,
        "request_throughput": n / duration if duration else 0.0,
        "output_tokens_per_s": out / duration if duration else 0.0,
        "total_tokens_per_s": (inp + out) / duration if duration else 0.0,
        "ttft_ms": summary_ms(lat["ttft_s"][done]),
        "tpot_ms": summary_ms(lat["tpot_s"][multi]),
        "itl_ms": weighted_summary_ms(itl_v, itl_w),
        "e2e_ms": summary_ms(lat["e2e_s"][done]),
        "kv_capacity_tokens": result.kv_capacity_tokens,
        "preemptions": int(result.preemptions.sum()),
        "gpus": result.gpus,
        "usd_per_hour": result.usd_per_hour,
        "gpu_hours": result.gpus * hours,
        "cost_usd": cost,
        "cost_usd_per_mtok_output": usd_out,
        "cost_usd_per_mtok_input": usd_out / 4.0,
        "cost_usd_per_mtok": cost / (inp + out) * 1e6 if inp + out else 0.0,
        "iterations": result.iterations,
        "gpu_busy_fraction": result.busy_s / (duration * sum(p.engines for p in result.pools)) if duration else 0.0,
    }
    if slo is not None:
        good = slo_mask(lat, slo) & done
        m["goodput"] = int(good.sum()) / duration if duration else 0.0
        m["slo_attainment"] = int(good.sum()) / n if n else 0.0
        m["slo"] = {k: v for k, v in slo.model_dump().items() if v is not None}
        m["slo_met"] = m["slo_attainment"] >= slo.attainment
    if r.lengths:
        m["lengths"] = dict(r.lengths)  # where the token counts came from: 'trace', 'sharegpt', 'fixed 512', ...
    m.update(result.extra)
    return m
