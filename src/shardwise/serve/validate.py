"""Compare simulated serving runs with published ones (:mod:`shardwise.serve.measurements`).

Each record names its source, the engine, a job reproducing the setup and the reported figures; the
simulator runs the job and every figure is compared (error = simulated / published - 1). With the
shipped constants every `fit` row was in the fit; the honest figure is the leave-one-source-out one:
each source predicted by constants fitted without it (``scripts/fit_serving.py`` stores it; `--cv`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from shardwise.serve.config import parse_serve_job
from shardwise.serve.constants import ServingConstants, serving_constants
from shardwise.serve.measurements import load_measurements
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.simulate import simulate
from shardwise.serve.workload import Requests

METRIC_PATHS = {
    "ttft_median_ms": ("ttft_ms", "median"),
    "tpot_median_ms": ("tpot_ms", "median"),
    "itl_median_ms": ("itl_ms", "median"),
    "e2e_median_ms": ("e2e_ms", "median"),
    "request_throughput": ("request_throughput", None),
    "output_tokens_per_s": ("output_tokens_per_s", None),
}
# The bar of the serving issues: median TTFT / TPOT and offline throughput within 15% (E2E of a static
# batch stands for its TPOT: prompts of 128 tokens, 2,048 outputs).
HEADLINE = ("ttft_median_ms", "tpot_median_ms", "request_throughput", "output_tokens_per_s", "e2e_median_ms")
BAR, CEILING = 0.15, 0.25  # per-source held-out mean |error|: within BAR for >= 80% of sources, none above CEILING


def _requests(record: dict[str, Any]) -> Requests | None:
    lens = record.get("requests")
    if not lens:
        return None
    inp = np.asarray(lens["input"], np.int64)
    return Requests(np.zeros(len(inp)), inp, np.asarray(lens["output"], np.int64), 0, np.zeros(len(inp), np.int64))


def simulate_record(record: dict[str, Any], constants: ServingConstants) -> dict[str, Any]:
    """Run one record's job; returns the simulated metrics dictionary."""
    job_data = dict(record["job"])
    if "workload" not in job_data:
        job_data["workload"] = {"arrival": "fixed", "rate": 1.0, "num_requests": 1}  # replaced by the explicit lengths
    job = parse_serve_job(job_data, where=record["id"])
    c = constants if record.get("frontend", True) else replace(constants, frontend_s=0.0, sglang_frontend_s=0.0)
    return compute_metrics(simulate(job, _requests(record), c))


def _value(metrics: dict[str, Any], key: str) -> float:
    top, sub = METRIC_PATHS[key]
    return float(metrics[top] if sub is None else metrics[top][sub])


def records(split: str = "all", sources: set[str] | None = None, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """The simulable records of `split` ("fit", "context" or "all"), of `sources` only / without `exclude`."""
    out = []
    for rec in load_measurements()["records"]:
        if rec.get("skip") or split != "all" and rec["split"] != split:
            continue
        if sources is not None and rec["source"] not in sources or exclude and rec["source"] in exclude:
            continue
        out.append(rec)
    return out


def compare(recs: list[dict[str, Any]], constants: ServingConstants, keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """One row per (record, figure): published, simulated, relative error."""
    cites = load_measurements()["sources"]
    rows = []
    for rec in recs:
        sim = simulate_record(rec, constants)
        for key, published in rec["measured"].items():
            if keys is not None and key not in keys:
                continue
            simulated = _value(sim, key)
            rows.append({
                "id": rec["id"], "split": rec["split"], "source": rec["source"], "engine": rec["engine"], "metric": key,
                "published": float(published), "simulated": simulated, "error": simulated / float(published) - 1.0,
                "headline": key in HEADLINE, "citation": cites.get(rec["source"], rec["source"]),
            })
    return rows


def run_validation(split: str = "all", constants: ServingConstants | None = None, keys: tuple[str, ...] | None = None,
                   sources: set[str] | None = None, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """Rows of every simulable record of `split` (see :func:`records`, :func:`compare`)."""
    return compare(records(split, sources, exclude), constants or serving_constants(), keys)


def skipped() -> list[dict[str, Any]]:
    """Records that cannot be simulated, with the reason."""
    return [{"id": r["id"], "source": r["source"], "reason": r["skip"]} for r in load_measurements()["records"] if r.get("skip")]


def per_source(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Mean |error| of each source's headline figures of its `fit` rows (and their count)."""
    out: dict[str, dict[str, Any]] = {}
    for source in sorted({r["source"] for r in rows}):
        errs = [abs(r["error"]) for r in rows if r["source"] == source and r["headline"] and r["split"] == "fit"]
        if errs:
            out[source] = {"figures": len(errs), "mape": float(np.mean(errs)), "max": float(np.max(errs))}
    return out


def verdict(by_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The bar: each source's mean |error| within BAR for >= 80% of sources and none above CEILING."""
    n = len(by_source)
    within = sum(s["mape"] <= BAR for s in by_source.values())
    worst = max((s["mape"] for s in by_source.values()), default=0.0)
    return {"sources": n, "within_bar": within, "worst": worst,
            "met": n > 0 and within >= 0.8 * n and worst <= CEILING}


def summarize(rows: list[dict[str, Any]], bar: float = BAR) -> dict[str, Any]:
    """Mean absolute error and how many headline figures are within the bar, per split."""
    out: dict[str, Any] = {}
    for split in sorted({r["split"] for r in rows}):
        mine = [r for r in rows if r["split"] == split and r["headline"]]
        if not mine:
            continue
        errs = np.abs([r["error"] for r in mine])
        out[split] = {"figures": len(mine), "mape": float(errs.mean()), "within_bar": int((errs <= bar).sum())}
    return out


def stored_cv() -> dict[str, Any] | None:
    """The leave-one-source-out predictions scripts/fit_serving.py stored (None before the first run)."""
    from shardwise.cost.constants import fitted_data

    return fitted_data().get("serving", {}).get("cv")


def print_validation(rows: list[dict[str, Any]], title: str = "Simulated vs published serving runs (error = simulated / published - 1)") -> None:
    from rich.table import Table

    from shardwise.console import make_console

    table = Table(title=title, title_justify="left")
    for col in ("record", "source", "split", "metric", "published", "simulated", "error"):
        table.add_column(col, justify="right" if col in {"published", "simulated", "error"} else "left")
    for r in rows:
        mark = "" if r["headline"] else " (info)"
        err = f"{r['error']:+.1%}" if abs(r["error"]) <= BAR or not r["headline"] else f"[red]{r['error']:+.1%}[/red]"
        table.add_row(r["id"], r["source"], r["split"], r["metric"] + mark, f"{r['published']:,.2f}", f"{r['simulated']:,.2f}", err)
    console = make_console()
    console.print(table)
    for split, s in summarize(rows).items():
        console.print(f"{split}: {s['within_bar']}/{s['figures']} headline figures within 15%, mean |error| {s['mape']:.1%}")
    print_sources(per_source(rows), "per source (fit rows, mean |error| of headline figures)")
    for s in skipped():
        console.print(f"not simulated: {s['id']} ({s['reason']})")


def print_sources(by_source: dict[str, dict[str, Any]], title: str) -> None:
    from shardwise.console import make_console

    console = make_console()
    console.print(title + ":")
    for source, s in by_source.items():
        flag = "" if s["mape"] <= BAR else "  [red]above 15%[/red]" if s["mape"] <= CEILING else "  [red]above 25%[/red]"
        console.print(f"  {source:28s} {s['figures']:3d} figures  mean |error| {s['mape']:6.1%}  largest {s['max']:6.1%}{flag}")
    v = verdict(by_source)
    console.print(f"  {v['within_bar']}/{v['sources']} sources within 15%, worst {v['worst']:.1%}: "
                  f"{'meets' if v['met'] else 'misses'} the bar (>= 80% within 15%, none above 25%)")
