"""What `train estimate` reports: its JSON (shared by the CLI and the web API) and readable rich tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from shardwise.train.goodput_report import goodput_rows
from shardwise.train.result import MFU_LABELS, Estimate

if TYPE_CHECKING:
    from shardwise.engines.support import Verdict
    from shardwise.train.hetero.result import HeteroEstimate

#: How the headline MFU counts: the figure training reports compare (attention-score FLOPs halved by the
#: causal mask, no recompute), over the GPU's dense BF16 peak (cost/flops.py).
CAUSAL_MFU = "model FLOPs with causal attention, no recompute, over the dense BF16 peak"


def engine_verdicts_of(job: Any) -> dict[str, Verdict]:
    """Which engines run the job's plan as is, with its costed recipe and stack (the engine-rules table)."""
    from shardwise.engines.support import ENGINES, job_verdict

    return {e: job_verdict(job, e) for e in ENGINES}


def estimate_json(results: list[Estimate], jobs: list[Any] | None = None) -> dict[str, Any] | list[dict[str, Any]]:
    """`train estimate --format json`: one object for one job, a list for several. With the ``jobs``, each
    estimate of one GPU type says where it runs (``runnable_on``, ``not_runnable``, as train plan's rows)."""
    payload = [r.to_dict() for r in results]
    for d, r, job in zip(payload, results, jobs or [None] * len(results)):
        if job is not None and isinstance(r, Estimate):
            v = engine_verdicts_of(job)
            d["runnable_on"] = [k for k, x in v.items() if x.runnable]
            d["not_runnable"] = {k: x.line() for k, x in v.items() if not x.runnable}
    return payload[0] if len(payload) == 1 else payload


def _plan_text(e: Estimate) -> str:
    p = e.plan
    parts = [f"tp{p['tp']}", f"pp{p['pp']}"]
    if p["vpp"] > 1:
        parts.append(f"vpp{p['vpp']}")
    parts.append(f"dp{p['dp']}")
    for k in ("cp", "ep"):
        if p[k] > 1:
            parts.append(f"{k}{p[k]}")
    parts += [f"zero{p['zero']}", f"mb{p['micro_batch']}", p["schedule"], f"recompute={p['recompute']}"]
    if p["sequence_parallel"] and p["tp"] > 1:
        parts.append("sp")
    if p.get("tp_overlap", "none") not in ("none", "auto") and p["tp"] > 1:
        parts.append(f"tp_overlap={p['tp_overlap']}")
    if p.get("microbatch_group"):
        parts.append(f"microbatch_group={p['microbatch_group']}")
    return " ".join(parts)


def _band_text(e: Estimate) -> str:
    b = e.error_band
    if not b:
        return "unknown (no cross-validation stored)"
    return f"±{b['pct']:.0%} (80% of {b['rows']} held-out {b['basis']} runs were within this)"


def _stack_text(e: Estimate) -> str:
    k = e.stack
    if not k:
        return ""
    return (f"stack {k['name']}: attention {k['attention_kernel']}, {k['fusion']} kernels (elementwise traffic x{k['elementwise_traffic']:.2f}), "
            f"TP overlap {k['tp_comm_overlap']:.2f}, DP overlap {k['dp_overlap']:.2f}, FSDP prefetch {k['fsdp_prefetch_overlap']:.2f}")



def run_cost_rows(e: Estimate | HeteroEstimate) -> list[tuple[str, str]]:
    """Days and dollars of the whole run, where the job gives `training.tokens` (and a price)."""
    rows = []
    if e.days_to_train is not None:
        rows.append(("days to train", f"{e.days_to_train:,.1f}"))
    if e.cost_usd is not None:
        rows.append(("cost", f"${e.cost_usd:,.0f}"))
    return rows

def estimate_table(e: Estimate, engines: dict[str, Verdict] | None = None) -> Group:
    """Headline figures, then the time and memory breakdowns side by side; ``engines``: where the plan runs
    as is (a row, and a line per engine that refuses it, with what would run)."""
    head = Table(title=f"{e.name}: {e.model} on {e.num_gpus} x {e.gpu}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()
    fits = Text("yes", style="green") if e.fits else Text(f"NO ({e.misfit})", style="bold red")
    rows = [
        ("plan", _plan_text(e) + f"  ({e.microbatches} micro-batches)"),
        ("step time", f"{e.step_time_s:.3f} s"),
        ("error band", _band_text(e)),
        ("tokens/s per GPU", f"{e.tokens_per_s_per_gpu:,.0f}"),
        ("model TFLOP/s per GPU", f"{e.model_tflops_per_gpu:.1f}"),
        (MFU_LABELS["mfu_causal"], f"{e.mfu_causal:.1%}  ({CAUSAL_MFU})"),
        (f"{MFU_LABELS['mfu']} / HFU", f"{e.mfu:.1%} (full attention, PaLM App. B) / {e.hfu:.1%} (recompute included, causal)"),
        ("peak memory per GPU", f"{e.peak_memory_gib:.1f} GiB of {e.usable_memory_gib:.1f} usable ({e.gpu_memory_gib:.0f} less "
                                f"{1 - e.usable_memory_gib / e.gpu_memory_gib:.0%} headroom; pipeline rank {e.peak_memory_rank})"),
        ("allocated / reserved", f"{e.peak_allocated_gib:.1f} / {e.peak_reserved_gib:.1f} GiB (torch max_memory_allocated / "
                                 "max_memory_reserved; the device adds the CUDA context and NCCL buffers)"),
        ("fits", fits),
    ]
    h = e.host_memory
    if h is not None:
        avail = "not checked (set cluster.host.dram_gib)" if h["dram_available_gib"] is None else f"{h['dram_available_gib']:,.0f}"
        tier = f"host DRAM + {h['cxl_gib']:,.0f} GiB CXL" if h.get("cxl_gib") else "host DRAM"
        text = f"{h['dram_used_gib']:,.0f} GiB of {avail} {tier} per node ({h['gpus_per_node']} GPUs offloading to {h['device']})"
        if h.get("activations_gib"):
            text += f", {h['activations_gib']:,.0f} GiB of it offloaded activations"
        if h["nvme_available_tb"] is not None:
            text += f"; NVMe {h['nvme_used_tb']:,.2f} of {h['nvme_available_tb']:,.2f} TB"
        rows.insert(-1, ("offloaded per node", text))
    if engines is not None:
        rows.append(("runs on", ", ".join(k for k, v in engines.items() if v.runnable) or "no engine as is"))
    rows += run_cost_rows(e) + goodput_rows(e)
    for k, v in rows:
        head.add_row(k, v)

    time = Table(title="step time breakdown", title_justify="left")
    time.add_column("part")
    time.add_column("seconds", justify="right")
    time.add_column("share", justify="right")
    for k, v in vars(e.time_s).items():
        if k == "act_offload" and not e.plan.get("offload_activations"):
            continue
        label = "activation offload (exposed)" if k == "act_offload" else k.replace("_", " ")
        time.add_row(label, f"{v:.3f}", f"{v / e.step_time_s:.1%}")
    time.add_row(Text("total", style="bold"), f"{e.step_time_s:.3f}", "100%")

    mem = Table(title=f"memory per GPU (rank {e.peak_memory_rank}), GiB", title_justify="left")
    mem.add_column("part")
    mem.add_column("GiB", justify="right")
    parts = e.memory.gib()
    for k in ("params", "grads", "optimizer", "activations", "buffers"):
        mem.add_row(k, f"{parts[k]:.2f}")

    mem.add_row(Text("allocated", style="italic"), f"{e.peak_allocated_gib:.2f}")
    mem.add_row("fragmentation", f"{parts['fragmentation']:.2f}")
    mem.add_row(Text("reserved", style="italic"), f"{e.peak_reserved_gib:.2f}")
    mem.add_row("runtime", f"{parts['runtime']:.2f}")
    mem.add_row(Text("device total", style="bold"), f"{e.peak_memory_gib:.2f}")
    share = e.plan.get("offload_activations") or 0.0
    if share and e.host_memory is not None:  # below HBM: not part of the device total
        mem.add_row(f"activations in host memory ({share:.0%} offloaded)",
                    f"{e.host_memory['activations_gib'] / max(1, e.host_memory['gpus_per_node']):.2f}")

    side = Table.grid(padding=(0, 4))
    side.add_row(time, mem)
    parts = [head, side, Text(f"bubble measured on the {e.bubble_definition}", style="dim"), Text(_stack_text(e), style="dim")]
    parts += [Text(f"note: {n}", style="yellow") for n in e.notes]
    parts += [Text(f"not on {k}: {v.line()}", style="dim") for k, v in (engines or {}).items() if not v.runnable]
    return Group(*parts)
