"""What `serve simulate` reports: its metrics JSON (shared by the CLI and the web API) and readable tables (rich)."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.table import Table

from shardwise.console import make_console
from shardwise.serve.config import ServeJob
from shardwise.serve.metrics import compute_metrics, per_request
from shardwise.serve.simulate import ServeSimResult, simulate


def simulation_report(job: ServeJob, tables: list | None = None) -> tuple[ServeSimResult, dict[str, Any]]:
    """Simulate the job; `serve simulate --format json` prints the metrics, which name each pool.
    `tables` receives the simulation's request tables (a progress bar reads them)."""
    result = simulate(job, tables=tables)
    metrics = compute_metrics(result, job.slo)
    cache = metrics.get("prefix_cache")
    if cache and cache["hit_tokens"]:  # what the cache saves: the same run without it
        without = per_request(simulate(job, result.requests, prefix_caching=False))["ttft_s"]
        saved = without - per_request(result)["ttft_s"]
        cache["ttft_saved_ms"] = {"mean": float(np.nanmean(saved) * 1e3), "median": float(np.nanmedian(saved) * 1e3),
                                  "ttft_mean_without_ms": float(np.nanmean(without) * 1e3)}
    role = result.kind == "disaggregated"
    metrics["deployment"] = [(p.name.rsplit(".", 1)[-1] + ": " if role else "") + p.describe() for p in result.pools]
    return result, metrics


def _fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def metrics_tables(title: str, m: dict[str, Any]) -> list[Table]:
    """Latency table, then throughput / capacity / cost table."""
    lat = Table(title=title, title_justify="left")
    lat.add_column("latency (ms)")
    for col in ("mean", "median", "p90", "p99"):
        lat.add_column(col, justify="right")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT (excl. 1st token)"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        lat.add_row(label, *(_fmt(m[key][c], 2) for c in ("mean", "median", "p90", "p99")))
    tp = Table(show_header=False)
    tp.add_column("metric")
    tp.add_column("value", justify="right")
    rows = [
        ("completed requests", f"{m['completed']:,}"),
        ("input / output tokens", f"{m['total_input_tokens']:,} / {m['total_output_tokens']:,}"),
        ("duration (s)", _fmt(m["duration_s"], 2)),
        ("request throughput (req/s)", _fmt(m["request_throughput"], 2)),
        ("output tokens/s", _fmt(m["output_tokens_per_s"])),
        ("total tokens/s", _fmt(m["total_tokens_per_s"])),
        ("KV capacity (tokens)", f"{m['kv_capacity_tokens']:,}"),
        ("preemptions", f"{m['preemptions']:,}"),
        ("GPUs, $/hour", f"{m['gpus']}, ${m['usd_per_hour']:,.2f}"),
        ("$ per M input / output tokens", f"${m['cost_usd_per_mtok_input']:.3f} / ${m['cost_usd_per_mtok_output']:.3f}"),
    ]
    if "goodput" in m:
        slo = ", ".join(f"{k} {v:g}" for k, v in m["slo"].items() if k != "attainment")
        rows += [("SLO", slo), ("goodput (req/s)", _fmt(m["goodput"], 2)),
                 ("SLO attainment", f"{m['slo_attainment']:.1%} (target {m['slo']['attainment']:.0%}: {'met' if m['slo_met'] else 'NOT met'})")]
    if "lengths" in m:
        rows.insert(2, ("lengths (input / output)", f"{m['lengths']['input']} / {m['lengths']['output']}"))
    if "kv_transfer_ms_mean" in m:
        rows.append(("mean KV transfer (ms)", _fmt(m["kv_transfer_ms_mean"], 2)))
    if "prefix_cache" in m:
        pc = m["prefix_cache"]
        rows.append(("prefix cache hit rate", f"{pc['hit_rate']:.1%} of {pc['prompt_tokens']:,} prompt tokens"))
        if "ttft_saved_ms" in pc:
            rows.append(("TTFT saved by the cache (mean / median ms)", f"{_fmt(pc['ttft_saved_ms']['mean'])} / {_fmt(pc['ttft_saved_ms']['median'])}"))
    if "adapters" in m:
        a = m["adapters"]
        rows += [("LoRA adapters (rank)", f"{a['count']:,} (r{a['rank']}), {a['popularity']}"),
                 ("adapter GPU slots (from KV cache)", f"{a['max_loras']:,} = {a['slots_gib_per_gpu']:.2f} GiB per GPU"),
                 ("adapter loads: to GPU / from disk", f"{a['gpu_loads']:,} / {a['host_loads']:,}"),
                 ("distinct adapters per step (mean)", _fmt(a["distinct_per_step_mean"]))]
    for k, v in rows:
        tp.add_row(k, v)
    return [lat, tp]


def print_tables(tables: list[Table]) -> None:
    console = make_console()
    for t in tables:
        console.print(t)
