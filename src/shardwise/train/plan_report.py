"""What `train plan` reports: its JSON (shared by the CLI and the web API), tables and the Pareto-front plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from shardwise.engines.support import ENGINES, Verdict, verdicts
from shardwise.engines.table import STACK
from shardwise.engines.targets import engine_abbrev
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.reliability import Resilience
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.plan_label import plan_label
from shardwise.train.planner import PlanResult, searched_fields
from shardwise.train.result import GIB, MFU_LABELS, Estimate
from shardwise.train.search_space import group_rejections

#: Short engine names for the table's "runs on" column (each target's ``abbrev`` in the registry).
ENGINE_ABBREV = {e: engine_abbrev(e) for e in ENGINES}


def engine_verdicts(e: Estimate, model: ModelSpec, training: TrainingSpec) -> dict[str, Verdict]:
    """Which engines run the estimated plan as is, with the recipe and stack it was costed with (the
    engine-rules table, :mod:`shardwise.engines.table`)."""
    costed = training.model_copy(update={"framework": e.stack.get("name", training.framework)})
    return verdicts(TrainPlan(**e.plan), model, costed, recipe=e.fp8_recipe or "none")


def runs_on_label(v: dict[str, Verdict]) -> str:
    names = [engine_abbrev(k) for k, x in v.items() if x.runnable]
    return ",".join(names) if names else "none"


def job_mapping(e: Estimate, model: ModelSpec, training: TrainingSpec, clusters: list[Cluster],
                resilience: Resilience | None = None) -> dict[str, Any]:
    """A job file mapping (model, cluster, training, parallel) that reproduces this plan: what
    `train estimate`, `train run` and `train export` read; with the job's reliability, storage and
    checkpoint sections where they are not the defaults."""
    from shardwise.specs.model import preset_names

    cluster = next(c for c in clusters if c.gpu.name == e.gpu)
    ref: Any = model.name if model.name in preset_names() else model.model_dump(exclude_defaults=True)
    train = training.model_dump(exclude_none=True)
    if e.stack.get("name", training.framework) != training.framework:  # costed with the engine's stack
        train["framework"] = e.stack["name"]
    if e.fp8_recipe is not None:  # the recipe the search chose
        train["fp8_recipe"] = e.fp8_recipe
    if e.moe_dispatcher is not None and e.moe_dispatcher != training.moe.dispatcher:  # the dispatcher it chose
        train["moe"] = {**train.get("moe", {}), "dispatcher": e.moe_dispatcher}
    out = {
        "model": ref,
        "cluster": {"gpu": e.gpu, "gpus": e.num_gpus, "gpus_per_node": cluster.gpus_per_node},
        "training": train,
        "parallel": dict(e.plan),
    }
    if resilience is not None:
        for key, spec in (("reliability", resilience.reliability), ("storage", resilience.storage)):
            if spec.model_dump(exclude_defaults=True):
                out["cluster"][key] = spec.model_dump(exclude_defaults=True)
        if resilience.checkpoint.model_dump(exclude_defaults=True):
            out["checkpoint"] = resilience.checkpoint.model_dump(exclude_defaults=True)
    return out


def top_rows(top: list[Estimate], model: ModelSpec, training: TrainingSpec, clusters: list[Cluster],
             resilience: Resilience | None = None) -> list[dict[str, Any]]:
    """JSON rows of the top plans: the estimate, the engines that run it as is (with the reason for each
    that does not) and the job that reproduces it (for `train export`)."""
    rows = []
    for e in top:
        v = engine_verdicts(e, model, training)
        rows.append(e.to_dict() | {
            "runnable_on": [k for k, x in v.items() if x.runnable],
            "not_runnable": {k: x.line() for k, x in v.items() if not x.runnable},
            "job": job_mapping(e, model, training, clusters, resilience),
        })
    return rows


def runnability_note(top: list[Estimate], model: ModelSpec, training: TrainingSpec) -> str | None:
    """A plain sentence when the best plan runs on no engine as is: why, and which ranked plan does."""
    if not top:
        return None
    first = engine_verdicts(top[0], model, training)
    if any(v.runnable for v in first.values()):
        stack = top[0].stack.get("name", training.framework)
        own = next((e for e, s in STACK.items() if s == stack), None)
        if own is None or first[own].runnable:
            return None
        runners = [e for e, v in first.items() if v.runnable and e in STACK]
        return (f"the top plan was costed with the {stack} stack, which does not run it ({first[own].reason})"
                + (f"; --runnable-on {','.join(runners)} costs plans with the stack of an engine that runs them"
                   if runners else ""))
    why = "; ".join(f"{k}: {v.reason}" for k, v in first.items())
    later = next((i for i, e in enumerate(top[1:], 2) if any(v.runnable for v in engine_verdicts(e, model, training).values())), None)
    where = (f"plan #{later} is the best shown that one of them runs" if later else
             "none of the plans shown runs on one of them")
    return (f"the top plan runs on none of {', '.join(ENGINES)} as is ({why}); {where}; "
            "--runnable-on ENGINE searches only plans an engine runs")


def plan_json(objective: str, results: list[PlanResult], top: list[Estimate], fronts: list[dict[str, Any]],
              inputs: Any) -> dict[str, Any]:
    """`train plan --format json`: the overall top plans (with the engines that run each and its job), the
    Pareto front, each search's summary and a note when the best plan runs on no engine as is.
    `inputs`: the search's :class:`shardwise.train.plan_inputs.PlanInputs`."""
    note = runnability_note(top, inputs.model, inputs.training)
    return {"objective": objective, "top": top_rows(top, inputs.model, inputs.training, inputs.clusters,
                                                       getattr(inputs, "resilience", None)),
            "pareto_front": fronts, "searches": [r.to_dict() | {"top": None, "pareto_front": None} for r in results],
            "notes": [note] if note else []}


#: Plan fields outside the search's enumeration that a plan still carries when the search set them (the
#: offload fallback, the planner's activation-offload search): the table's labels name them.
OFFLOAD_FIELDS = ("offload", "offload_device", "offload_activations", "offload_activations_policy")


def top_table(results: list[PlanResult], top: list[Estimate], objective: str, runs_on: list[str] | None = None) -> Table:
    """The top plans; `runs_on` labels (one per plan) add the engines column."""
    multi = len({r.gpu for r in results}) > 1
    stacks = len({e.stack.get("name") for e in top}) > 1  # --runnable-on several engines: each costed with its stack
    t = Table(title=f"Best plans ({objective})", title_justify="left",
              caption="runs on: T = shardwise train run (torch), tt = torchtitan, M = Megatron-LM, DS = DeepSpeed"
              if runs_on is not None else None, caption_justify="left")
    for col in ["#"] + (["gpu"] if multi else []) + ["plan", "step s", "tokens/s/GPU", MFU_LABELS["mfu_causal"], "peak GiB", "bubble s"]:
        t.add_column(col, justify="left" if col in ("plan", "gpu") else "right")
    with_cost = any(e.cost_usd is not None for e in top)
    if top and top[0].days_to_train is not None:
        t.add_column("days", justify="right")
        if with_cost:
            t.add_column("$", justify="right")
    goodput = objective == "goodput" and any(e.goodput for e in top)
    if goodput:  # what the ranking assumes: the checkpoint interval and the hot spares (train/goodput.py)
        for col in ("ETTR", "ckpt every", "spares", "days w/ failures"):
            t.add_column(col, justify="right")
    if runs_on is not None:
        t.add_column("runs on", justify="left")
    if stacks:
        t.add_column("costed as", justify="left")
    for rank, e in enumerate(top, 1):
        row = [str(rank)] + ([e.gpu] if multi else []) + [
            plan_label(searched_fields(e) | {k: e.plan[k] for k in OFFLOAD_FIELDS if k in e.plan}), f"{e.step_time_s:.3f}", f"{e.tokens_per_s_per_gpu:,.0f}", f"{e.mfu_causal:.1%}",
            f"{e.peak_memory_gib:.1f}", f"{e.time_s.bubble:.3f}",
        ]
        if e.days_to_train is not None:
            row.append(f"{e.days_to_train:,.1f}")
            if with_cost:
                row.append("-" if e.cost_usd is None else f"{e.cost_usd:,.0f}")
        if goodput:
            g = e.goodput or {}
            ck = g.get("checkpoint", {})
            days = g.get("days_to_train")
            row += ["-", "-", "-", "-"] if not g else [
                f"{g['ettr']:.1%}", f"{ck['interval_steps']:,} steps", f"{g['spares']['nodes']:,} nodes",
                "-" if days is None else f"{days:,.1f}"]
        if runs_on is not None:
            row.append(runs_on[rank - 1])
        if stacks:
            row.append(e.stack.get("name", ""))
        t.add_row(*row)
    return t


def thin(points: list[dict[str, Any]], rel: float = 0.02) -> list[dict[str, Any]]:
    """Front points (sorted by memory) that each raise throughput by at least `rel` over the last kept;
    the best-throughput point is always kept."""
    pts = sorted(points, key=lambda p: p["peak_memory_gib"])
    kept: list[dict[str, Any]] = []
    for p in pts:
        if not kept or p["tokens_per_s_per_gpu"] >= (1 + rel) * kept[-1]["tokens_per_s_per_gpu"]:
            kept.append(p)
    if pts and kept[-1] is not max(pts, key=lambda p: p["tokens_per_s_per_gpu"]):
        kept.append(max(pts, key=lambda p: p["tokens_per_s_per_gpu"]))
    return kept


def front_table(points: list[dict[str, Any]], title: str) -> Table:
    points = thin(points)
    t = Table(title=f"{title} (points at least 2% apart)", title_justify="left")
    for col in ("gpu", "plan", "tokens/s/GPU", "peak GiB", "$/M tokens", "exact"):
        t.add_column(col, justify="left" if col in ("gpu", "plan") else "right")
    for p in points:
        cost = p.get("usd_per_million_tokens")
        t.add_row(p.get("gpu", ""), plan_label(p["plan"]), f"{p['tokens_per_s_per_gpu']:,.0f}", f"{p['peak_memory_gib']:.1f}",
                  "-" if cost is None else f"{cost:.3f}", "yes" if p["exact"] else "screen")
    return t


def summary_text(results: list[PlanResult]) -> Group:
    lines = []
    for r in results:
        lines.append(Text(
            f"{r.gpu} x {r.num_gpus}: {r.considered:,} plans considered, {r.feasible_screened:,} fit, "
            f"{r.exact_evaluations} estimated exactly; screen {r.screen_rate_per_s:,.0f} plans/s; "
            f"total {r.seconds['total']:.2f} s", style="bold"))
        for group, total, reasons in group_rejections(r.rejected):
            lines.append(Text(f"  rejected {total:>9,}  {group}"))
            if len(reasons) > 1 or reasons[0][0] != group:
                lines += [Text(f"           {n:>9,}    {reason}", style="dim") for reason, n in reasons]
        lines += [Text(f"  note: {n}", style="yellow") for n in r.notes]
    return Group(*lines)


def plot_front(results: list[PlanResult], fronts: list[dict[str, Any]], top: list[Estimate], path: str | Path) -> None:
    """Every plan that fits (throughput vs peak memory), the Pareto front and the top plans."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rng = np.random.default_rng(0)
    for k, r in enumerate(results):
        scr = r.screened
        if scr is None or not len(scr["step_s"]):
            continue
        tokens = r.top[0].tokens_per_s_per_gpu * r.top[0].step_time_s if r.top else 0.0
        pick = rng.choice(len(scr["step_s"]), size=min(20000, len(scr["step_s"])), replace=False)
        ax.scatter(scr["memory_bytes"][pick] / GIB, tokens / scr["step_s"][pick], s=3, alpha=0.25,
                   color=colors[k % len(colors)], label=f"{r.gpu}: plans that fit (screen)")
        pts = sorted((p for p in fronts if p.get("gpu") == r.gpu), key=lambda p: p["peak_memory_gib"])
        if pts:
            ax.plot([p["peak_memory_gib"] for p in pts], [p["tokens_per_s_per_gpu"] for p in pts], "-o",
                    color=colors[k % len(colors)], markersize=4, lw=1.5, label=f"{r.gpu}: Pareto front")
    for i, e in enumerate(top[:5], 1):
        ax.scatter([e.peak_memory_gib], [e.tokens_per_s_per_gpu], marker="*", s=160, color="black", zorder=5)
        ax.annotate(f"#{i}", (e.peak_memory_gib, e.tokens_per_s_per_gpu), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("tokens/s per GPU")
    r0 = results[0]
    ax.set_title(f"{r0.top[0].model if r0.top else ''} on {r0.num_gpus} GPUs: throughput vs memory (stars: top plans)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
