"""What `train estimate` and `train goodput` report about failures: rows for the estimate's table, the
goodput tables, the Monte Carlo summary and its plot."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from shardwise.cost.failures import DAY_S
from shardwise.cost.goodput_mc import FailureSimResult, Fleet, simulate
from shardwise.errors import ShardwiseError
from shardwise.train.goodput import Goodput

LOSS_NAMES = {"checkpoint": "checkpoints", "rework": "rework", "detect": "detection", "wait_for_node": "waiting for nodes",
              "restart": "restarts", "planned": "planned"}


def _pct(x: float) -> str:
    return f"{x:.1%}"


def goodput_rows(e: Any) -> list[tuple[str, str]]:
    """Rows for the estimate's headline table (none when goodput was not asked for or failures are off)."""
    g = getattr(e, "goodput", None)
    if not g:
        return []
    ck, lost = g["checkpoint"], g["lost_share"]
    if g["mttf_h"] is None:
        return [("effective training time", f"{_pct(g['ettr'])}: no interruptions at these failure rates")]
    if not g["ettr"]:
        return [("effective training time", f"0: an interruption every {g['mttf_h'] * 3600:.3g} s, restarts of "
                 f"{g['restart_s']['total']:.0f} s; the run never finishes (fewer GPUs, faster restarts)")]
    rows = [("effective training time", f"{_pct(g['ettr'])} (lost: " +
             ", ".join(f"{LOSS_NAMES[k]} {_pct(v)}" for k, v in lost.items() if v >= 0.0005) + ")"),
            ("goodput", f"{g['goodput_tokens_per_s']:,.0f} tokens/s ({e.tokens_per_s_per_gpu * e.num_gpus:,.0f} failure-free)"),
            ("checkpoint", f"{ck['total_gb']:,.1f} GB {ck['mode']} to {ck['tier']} every {ck['interval_steps']:,} steps "
             f"({ck['interval_s']:,.0f} s; Young {ck['young_interval_s']:,.0f} s): blocks {ck['blocking_s']:.2f} s, "
             f"durable after {ck['durable_s']:.1f} s, loads in {ck['load_s']:.1f} s"),
            ("interruptions", f"{g['rates_per_day']['unexpected']:.2f} a day (MTTF {g['mttf_h']:.1f} h), restart "
             f"{g['restart_s']['total']:.0f} s; {g['spares']['nodes']:,} hot spare node(s) assumed")]
    if g["days_to_train"] is not None:
        ff = g["failure_free"]
        text = f"{g['days_to_train']:,.1f} days ({g['days_to_train'] / ff['days_to_train'] - 1:+.1%})"
        if g["cost_usd"] is not None and ff["cost_usd"]:
            text += f", ${g['cost_usd']:,.0f} ({g['cost_usd'] / ff['cost_usd'] - 1:+.1%}, spares ${g['spare_cost_usd']:,.0f})"
        n = g["interruptions"]
        rows.append(("with failures", text + f"; {n['unexpected']:,.0f} interruptions + {n['planned']:,.0f} planned"))
    return rows


def run_simulation(g: Goodput, work_s: float, runs: int, seed: int) -> FailureSimResult:
    """The Monte Carlo run of this goodput's model (the spare pool simulated, not averaged)."""
    share = g.rates["node_swaps"] / g.rates["unexpected"] if g.rates["unexpected"] else 0.0
    fleet = Fleet(share, int(g.spares["nodes"]), g.spares["repair_h"] * 3600)
    return simulate(dataclasses.replace(g.run, wait_s=0.0), work_s, g.interval_s, fleet, runs, seed)


def simulation_dict(sim: FailureSimResult, g: Goodput, work_s: float) -> dict[str, Any]:
    days = sim.wall_s / DAY_S
    return {"runs": int(days.size), "closed_form_days": work_s / g.ettr / DAY_S, "mean_days": float(days.mean()),
            "p10_days": sim.percentile_s(10) / DAY_S, "p50_days": sim.percentile_s(50) / DAY_S,
            "p90_days": sim.percentile_s(90) / DAY_S, "mean_ettr": float(work_s / sim.wall_s.mean()),
            "interruptions_mean": float(sim.unexpected.mean()), "interruptions_p90": float(np.percentile(sim.unexpected, 90)),
            "planned_mean": float(sim.planned.mean()), "wait_h_mean": float(sim.waits_s.mean() / 3600)}


def goodput_tables(e: Any, g: Goodput, what_if: list[dict[str, Any]], sim: dict[str, Any] | None) -> Group:
    """`train goodput`: the breakdown, the elastic what-ifs and the Monte Carlo spread."""
    d = g.to_dict()
    head = Table(title=f"{e.name}: goodput of {e.model} on {e.num_gpus:,} x {e.gpu}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()
    for k, v in goodput_rows(e):
        head.add_row(k, v)
    if d["mttf_h"] is None or not d["ettr"]:
        return Group(head)
    ck = d["checkpoint"]
    parts = Table(title="checkpoint and restart", show_header=False, title_justify="left")
    parts.add_column(style="bold")
    parts.add_column()
    parts.add_row("size", f"{ck['total_gb']:,.1f} GB in all; per GPU {ck['write_gib_per_gpu']:.3f} GiB written "
                  f"(replicas de-duplicated), {ck['staged_gib_per_gpu']:.2f} GiB held; per node {ck['write_gib_per_node']:.2f} GiB")
    parts.add_row("save", f"{ck['mode']} to {ck['tier']}: copy to host {ck['stage_s']:.2f} s, write {ck['persist_s']:.2f} s; "
                  f"the step waits {ck['blocking_s']:.2f} s, durable after {ck['durable_s']:.2f} s")
    parts.add_row("interval", f"{ck['interval_steps']:,} steps = {ck['interval_s']:,.0f} s (Young {ck['young_interval_s']:,.0f} s, "
                  f"Daly {ck['daly_interval_s']:,.0f} s)")
    rs = d["restart_s"]
    parts.add_row("restart", f"{rs['total']:.0f} s = detect {rs['detect']:.0f} + relaunch {rs['relaunch']:.0f} + rendezvous "
                  f"{rs['rendezvous']:.1f} + load {rs['load']:.1f}")
    sp = d["spares"]
    parts.add_row("spares", f"{sp['nodes']:,} hot spare nodes; {sp['in_repair_mean']:.2f} nodes in repair on average "
                  f"({sp['repair_h']:g} h each); wait {sp['wait_s_per_interruption']:.1f} s per interruption on average")
    rates = d["rates_per_day"]
    parts.add_row("rates", f"{rates['unexpected']:.2f} unexpected interruptions a day ({rates['node_swaps']:.2f} take a node "
                  f"out), {rates['planned']:.2f} planned")
    wi = Table(title="what if a node fails (elastic what-ifs)", title_justify="left")
    for col in ("policy", "layout during repair", "ETTR", "days", "$"):
        wi.add_column(col, justify="left" if col in ("policy", "layout during repair") else "right")
    for row in what_if:
        wi.add_row(row["policy"], row["layout"], "-" if row["ettr"] is None else _pct(row["ettr"]),
                   "-" if row["days_to_train"] is None else f"{row['days_to_train']:,.1f}",
                   "-" if row["cost_usd"] is None else f"{row['cost_usd']:,.0f}")
    out: list[Any] = [head, parts, wi]
    if sim is not None:
        mc = Table(title=f"Monte Carlo: {sim['runs']:,} runs", show_header=False, title_justify="left")
        mc.add_column(style="bold")
        mc.add_column()
        mc.add_row("days", f"mean {sim['mean_days']:,.2f} (closed form {sim['closed_form_days']:,.2f}); P10 {sim['p10_days']:,.2f}, "
                   f"P50 {sim['p50_days']:,.2f}, P90 {sim['p90_days']:,.2f}")
        mc.add_row("interruptions", f"mean {sim['interruptions_mean']:,.0f}, P90 {sim['interruptions_p90']:,.0f}")
        mc.add_row("waiting for nodes", f"{sim['wait_h_mean']:.2f} h per run on average")
        out.append(mc)
    return Group(*out, Text("model and sources: docs/goodput.md", style="dim"))


def plot_simulation(sim: FailureSimResult, g: Goodput, work_s: float, path: str | Path, title: str) -> None:
    """Histogram of the simulated days to train, with the closed-form mean and P10/P90."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = sim.wall_s / DAY_S
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.hist(days, bins=60, color="#4C72B0", alpha=0.8)
    for x, label, style in ((work_s / DAY_S, "failure-free", ":"), (work_s / g.ettr / DAY_S, "closed form", "-"),
                            (sim.percentile_s(10) / DAY_S, "P10", "--"), (sim.percentile_s(90) / DAY_S, "P90", "--")):
        ax.axvline(x, color="black", ls=style, lw=1.2)
        ax.annotate(label, (x, ax.get_ylim()[1] * 0.95), rotation=90, ha="right", va="top", fontsize=8)
    ax.set_xlabel("days to train")
    ax.set_ylabel("simulated runs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def work_seconds(e: Any) -> float:
    """Failure-free seconds of the run (needs training.tokens)."""
    if e.days_to_train is None:
        raise ShardwiseError("training.tokens: the Monte Carlo simulates a whole run; give the tokens to train")
    return e.days_to_train * DAY_S
