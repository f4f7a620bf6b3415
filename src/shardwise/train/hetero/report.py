"""What `train estimate` and `train plan` print for a job on a heterogeneous cluster. Estimate: the headline figures, the step
breakdown of the pipeline that sets the pace, and one row per pipeline rank of each GPU type (its layers,
micro-batches, busy time and memory), where the imbalance between GPU types shows."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from shardwise.train.hetero.plan import HeteroPlanResult
from shardwise.train.hetero.result import HeteroEstimate
from shardwise.train.report import run_cost_rows
from shardwise.train.result import GIB, MFU_LABELS


def hetero_table(e: HeteroEstimate) -> Group:
    """Headline, step breakdown and the per-rank table."""
    head = Table(title=f"{e.name}: {e.model} on {e.cluster}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()
    used = ", ".join(f"{n} on {g}" for g, n in e.gpus_per_group.items())
    kind = "pipeline stages across groups" if e.layout.kind == "pipeline" else "data-parallel replicas across groups"
    rows = [
        ("plan", f"{e.label()}  ({kind})"),
        ("GPUs used", f"{e.num_gpus} ({used})"),
        ("step time", f"{e.step_time_s:.3f} s (set by {e.critical_group})"),
        ("tokens/s", f"{e.tokens_per_s:,.0f} ({e.tokens_per_s_per_gpu:,.0f} per GPU)"),
        (MFU_LABELS["mfu_causal"], f"{e.mfu_causal:.1%} (causal attention, no recompute, over the sum of every GPU's "
                                   "own dense BF16 peak)"),
        (MFU_LABELS["mfu"], f"{e.mfu:.1%} (full attention, PaLM App. B)"),
        ("peak memory", f"{e.memory_used_fraction:.0%} of the fullest GPU's usable memory"),
        ("fits", Text("yes", style="green") if e.fits else Text("NO (out of memory)", style="bold red")),
    ]
    if e.usd_per_million_tokens is not None:
        rows.append(("$ per M tokens", f"{e.usd_per_million_tokens:.3f} (${e.usd_per_hour:,.0f}/h)"))
    rows += run_cost_rows(e)
    for k, v in rows:
        head.add_row(k, v)

    time = Table(title=f"step time breakdown ({e.critical_group}'s critical rank)", title_justify="left")
    time.add_column("part")
    time.add_column("seconds", justify="right")
    for k, v in vars(e.time_s).items():
        time.add_row(k.replace("_", " "), f"{float(v):.3f}")
    time.add_row(Text("total", style="bold"), f"{e.step_time_s:.3f}")

    ranks = Table(title="pipeline ranks per GPU type", title_justify="left")
    for col in ("group", "GPU", "rank", "copies", "layers", "micro-batches", "busy s", "idle", "memory GiB", "of",
                "state share"):
        ranks.add_column(col, justify="left" if col in ("group", "GPU") else "right")
    for r in e.ranks:
        mem = f"{r.memory.total / GIB:.1f}"
        ranks.add_row(r.group, r.gpu, str(r.pipeline_rank), str(r.copies), str(r.layers), str(r.microbatches),
                      f"{r.busy_s:.3f}", f"{1 - r.busy_s / e.step_time_s:.0%}",
                      mem if r.fits else Text(mem, style="bold red"), f"{r.capacity_gib:.1f}", f"{r.state_share:.4f}")
    parts = [head, time, ranks, Text("idle: share of the step a rank of that group does no compute (the imbalance)",
                                     style="dim")]
    parts += [Text(f"note: {n}", style="yellow") for n in e.notes]
    return Group(*parts)


def hetero_plan_table(res: HeteroPlanResult) -> Group:
    """`train plan` on a cluster with groups: the ranked plans, the comparison with one group alone, and
    what the search rejected."""
    t = Table(title=f"best plans by {res.objective} (each group alone, and laid over several groups)", title_justify="left")
    for col in ("#", "plan", "GPUs per group", "tokens/s", "$ per M tokens", "memory used"):
        t.add_column(col, justify="right" if col not in ("plan", "GPUs per group") else "left")
    for i, o in enumerate(res.ranked, 1):
        usd = "-" if o.usd_per_million_tokens is None else f"{o.usd_per_million_tokens:.3f}"
        t.add_row(str(i), o.label, ", ".join(f"{n} {g}" for g, n in o.groups.items()), f"{o.tokens_per_s:,.0f}", usd,
                  f"{o.memory_used_fraction:.0%}")
    parts = [t, Text(res.comparison(), style="bold")]
    alone = [f"{g}: {o.tokens_per_s:,.0f} tokens/s ({o.label.split(': ', 1)[1]})" if o else f"{g}: no plan fits"
             for g, o in res.single.items()]
    parts.append(Text("each group alone: " + "; ".join(alone), style="dim"))
    parts.append(Text(f"{res.considered:,} plans and layouts considered, {res.exact_evaluations} layouts over several "
                      "groups estimated exactly", style="dim"))
    if res.rejected:
        parts.append(Text("rejected: " + "; ".join(f"{k} ({n})" for k, n in sorted(res.rejected.items(), key=lambda kv: -kv[1])),
                          style="dim"))
    return Group(*parts)
