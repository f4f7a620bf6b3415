"""Compare simulated serving runs with published ones (``data/serving_measurements.yaml``).

Each record names its source, the engine, a job reproducing the setup and the reported figures; the
simulator runs the job and every figure is compared (error = simulated / published - 1). Rows marked
`fit` are the ones the constants were fitted on; `validate` rows are held out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from shardwise.serve.config import parse_serve_job
from shardwise.serve.constants import ServingConstants, serving_constants
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.simulate import simulate
from shardwise.serve.workload import Requests
from shardwise.specs._loading import data_path, load_yaml

MEASUREMENTS_FILE = "serving_measurements.yaml"
METRIC_PATHS = {
    "ttft_median_ms": ("ttft_ms", "median"),
    "tpot_median_ms": ("tpot_ms", "median"),
    "itl_median_ms": ("itl_ms", "median"),
    "e2e_median_ms": ("e2e_ms", "median"),
    "request_throughput": ("request_throughput", None),
    "output_tokens_per_s": ("output_tokens_per_s", None),
}
# The bar of the serving issue: median TTFT / TPOT and offline throughput within 15%.
HEADLINE = ("ttft_median_ms", "tpot_median_ms", "request_throughput", "output_tokens_per_s")


def load_measurements() -> dict[str, Any]:
    return load_yaml(data_path(MEASUREMENTS_FILE))


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


def run_validation(split: str = "all", constants: ServingConstants | None = None, keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """One row per (record, figure): published, simulated, relative error."""
    data = load_measurements()
    c = constants or serving_constants()
    rows = []
    for rec in data["records"]:
        if split != "all" and rec["split"] != split:
            continue
        sim = simulate_record(rec, c)
        for key, published in rec["measured"].items():
            if keys is not None and key not in keys:
                continue
            simulated = _value(sim, key)
            rows.append({
                "id": rec["id"], "split": rec["split"], "engine": rec["engine"], "metric": key,
                "published": float(published), "simulated": simulated, "error": simulated / float(published) - 1.0,
                "headline": key in HEADLINE, "source": data["sources"].get(rec["source"], rec["source"]),
            })
    return rows


def summarize(rows: list[dict[str, Any]], bar: float = 0.15) -> dict[str, Any]:
    """Mean absolute error and how many headline figures are within the bar, per split."""
    out: dict[str, Any] = {}
    for split in sorted({r["split"] for r in rows}):
        mine = [r for r in rows if r["split"] == split and r["headline"]]
        if not mine:
            continue
        errs = np.abs([r["error"] for r in mine])
        out[split] = {"figures": len(mine), "mape": float(errs.mean()) if len(errs) else 0.0, "within_bar": int((errs <= bar).sum())}
    return out


def print_validation(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from shardwise.console import make_console

    table = Table(title="Simulated vs published serving runs (error = simulated / published - 1)", title_justify="left")
    for col in ("record", "split", "metric", "published", "simulated", "error"):
        table.add_column(col, justify="right" if col in {"published", "simulated", "error"} else "left")
    for r in rows:
        mark = "" if r["headline"] else " (info)"
        err = f"{r['error']:+.1%}" if abs(r["error"]) <= 0.15 or not r["headline"] else f"[red]{r['error']:+.1%}[/red]"
        table.add_row(r["id"], r["split"], r["metric"] + mark, f"{r['published']:,.2f}", f"{r['simulated']:,.2f}", err)
    console = make_console()
    console.print(table)
    for split, s in summarize(rows).items():
        console.print(f"{split}: {s['within_bar']}/{s['figures']} headline figures within 15%, mean |error| {s['mape']:.1%}")
