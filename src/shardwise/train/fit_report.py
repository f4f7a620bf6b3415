"""What `train plan` says about fitting: the smallest cluster of each GPU type (and the cheapest), and when
nothing fits, the closest plans and what to change (:mod:`shardwise.train.advice`)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from shardwise.specs.hardware import Cluster
from shardwise.train.advice import Advice
from shardwise.train.plan_label import plan_label
from shardwise.train.planner import PlanResult, usd_per_million_tokens
from shardwise.train.smallest import SizedCluster


def _priced(sized: list[SizedCluster], results: list[PlanResult], clusters: list[Cluster]) -> list[dict[str, Any]]:
    """Per sized GPU type: its count, the best plan's days and dollars there (from the search at that count)."""
    by_gpu = {r.gpu: r for r in results}
    price = {c.gpu.name: c.price_usd_per_gpu_hour for c in clusters}
    rows = []
    for s in sized:
        r = by_gpu.get(s.gpu)
        best = r.top[0] if r is not None and r.top else None
        row: dict[str, Any] = {"gpu": s.gpu, "gpus": s.gpus, "counts": [v.to_dict() for v in s.verdicts],
                               "step_time_s": None, "days_to_train": None, "usd_per_million_tokens": None, "usd_total": None}
        if best is not None:
            row |= {"step_time_s": best.step_time_s, "days_to_train": best.days_to_train,
                    "usd_per_million_tokens": usd_per_million_tokens(best, price.get(s.gpu)), "usd_total": best.cost_usd}
        rows.append(row)
    return rows


def cheapest(rows: list[dict[str, Any]]) -> str | None:
    """The GPU type whose smallest cluster trains for the fewest dollars (per million tokens; the same order
    as the run's total for a fixed token count)."""
    priced = [r for r in rows if r["usd_per_million_tokens"] is not None]
    return min(priced, key=lambda r: r["usd_per_million_tokens"])["gpu"] if priced else None


def smallest_json(sized: list[SizedCluster], results: list[PlanResult], clusters: list[Cluster],
                  days: float | None) -> dict[str, Any]:
    rows = _priced(sized, results, clusters)
    return {"deadline_days": days, "per_gpu": rows, "cheapest": cheapest(rows)}


def smallest_text(sized: list[SizedCluster], results: list[PlanResult], clusters: list[Cluster],
                  days: float | None) -> Group:
    rows = _priced(sized, results, clusters)
    best = cheapest(rows)
    goal = "fits" if days is None else f"trains in {days:g} days"
    lines = []
    for s, row in zip(sized, rows, strict=True):
        if s.gpus is None:
            lines.append(Text(f"no count of {s.gpu} up to the limit {goal}", style="bold yellow"))
        else:
            money = ""
            if row["usd_per_million_tokens"] is not None:
                money = f"; ${row['usd_per_million_tokens']:.2f}/M tokens"
                if row["usd_total"] is not None:
                    money += f", ${row['usd_total']:,.0f} in all"
            mark = " (cheapest)" if best == s.gpu and len(sized) > 1 else ""
            lines.append(Text(f"smallest count that {goal}: {s.gpus} x {s.gpu}{mark}{money}", style="bold"))
        for v in s.verdicts:
            lines.append(Text(f"  {v.label:>12}: {v.reason}"))
    return Group(*lines)


def advice_tables(a: Advice, fallback: str | None = None) -> Group:
    """The closest plans and the ranked levers; `fallback`: the offload the search then used."""
    head = (f"No plan fits {a.gpus} x {a.gpu} ({a.usable_gib:.1f} GiB usable per GPU) without offloading"
            if fallback else f"No plan fits {a.gpus} x {a.gpu} ({a.usable_gib:.1f} GiB usable per GPU)")
    closest = Table(title="Closest plans", title_justify="left")
    for col in ("plan", "peak GiB", "misses by GiB", "where the memory goes (GiB)"):
        closest.add_column(col, justify="right" if "GiB" in col and "where" not in col else "left")
    for c in a.closest:
        closest.add_row(c["plan"], f"{c['peak_memory_gib']:.1f}", f"{c['misses_by_gib']:.1f}", c["what"])
    levers = Table(title="What would make it fit (ranked: same GPUs first, then other hardware, then a different job)",
                   title_justify="left")
    for col in ("#", "change", "fastest plan with it", "step s", "tokens/s/GPU", "$/M tokens", "note"):
        levers.add_column(col, justify="right" if col in ("#", "step s", "tokens/s/GPU", "$/M tokens") else "left")
    for k, lv in enumerate(a.levers, 1):
        b = lv.best
        levers.add_row(str(k) if lv.fits else "-", lv.change, "does not fit" if b is None else f"{b.gpu} x {b.num_gpus}: "
                       + plan_label(b.plan), "" if b is None else f"{b.step_time_s:.2f}",
                       "" if b is None else f"{b.tokens_per_s_per_gpu:,.0f}",
                       "" if lv.usd_per_mtok is None else f"{lv.usd_per_mtok:.3f}", lv.note)
    parts: list[Any] = [Text(head, style="bold red" if not fallback else "bold yellow"), closest, levers]
    if fallback:
        parts.append(Text(f"searching plans with offload: {fallback} (the fastest lever on the same GPUs)", style="bold"))
    return Group(*parts)
