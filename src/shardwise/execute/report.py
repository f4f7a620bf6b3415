"""Human-readable and JSON views of an executor report (no torch)."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table
from rich.text import Text


def _fmt_e(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2e}"


def report_json(report: dict) -> dict:
    """The report without per-action timelines (those go to ``--timeline`` and ``--trace``)."""
    out = {k: v for k, v in report.items() if k not in ("timeline", "trace")}
    tl = report["timeline"]["measured"]
    out["measured_bubble_fraction"] = tl["bubble_fraction"]
    out["predicted_bubble_fraction"] = report["timeline"]["predicted"]["bubble_fraction"]
    return out


def timeline_json(report: dict) -> dict:
    """What ``--timeline`` writes: measured (last step) and predicted timelines in the simulator's shape,
    and every measured step."""
    return {"layout": report["layout"], "schedule_source": report["schedule_source"],
            "makespan": report["makespan"], **report["timeline"]}


def report_table(report: dict) -> Group:
    """Rich renderables: header, steps, memory, makespan, check, notes."""
    parts: list = []
    head = Text()
    head.append(f"{report['layout']}  ", style="bold")
    head.append(f"nproc={report['nproc']} backend={report['backend']} ({report['device']})  "
                f"global_batch={report['global_batch']}x{report['seq_len']} tokens\n")
    head.append(f"schedule: {report['schedule_source']}")
    if report.get("fault"):
        head.append(f"\ninjected fault: {report['fault']}", style="yellow")
    parts.append(head)

    steps = Table(title="steps", title_justify="left")
    for col in ("step", "loss", "step time (ms)"):
        steps.add_column(col, justify="right")
    ref = (report.get("check") or {}).get("reference_losses")
    if ref:
        steps.add_column("reference loss", justify="right")
    for s in report["steps"]:
        row = [str(s["step"]), f"{s['loss']:.6f}", f"{s['step_time_s'] * 1e3:.1f}"]
        if ref:
            row.append(f"{ref[s['step']]:.6f}")
        steps.add_row(*row)
    parts.append(steps)

    mem = Table(title="memory per rank", title_justify="left", caption=report["memory_source"],
                caption_justify="left")
    for col in ("rank", "pp/dp/tp", "peak RSS (MiB)", "params (KiB)", "grads (KiB)", "optimizer (KiB)"):
        mem.add_column(col, justify="right")
    for m in report["memory"]:
        peak = m["cuda_peak_bytes"] if m.get("cuda_peak_bytes") is not None else m["peak_rss_bytes"]
        mem.add_row(str(m["rank"]), f"{m['pp']}/{m['dp']}/{m['tp']}", f"{peak / 2**20:.0f}",
                    f"{m['params_bytes'] / 1024:.1f}", f"{m['grads_bytes'] / 1024:.1f}",
                    f"{m['optimizer_bytes'] / 1024:.1f}")
    parts.append(mem)

    mk = report["makespan"]
    line = Text("makespan (compute actions, median over steps): ", style="bold")
    line.append(f"measured {mk['measured_s'] * 1e3:.2f} ms, predicted {mk['predicted_s'] * 1e3:.2f} ms, "
                f"error {mk['error'] * 100:+.1f}%\n")
    line.append(f"  stage costs from {mk['cost_source']}; p2p {mk['p2p_s'] * 1e6:.0f} us, host overhead "
                f"{mk['action_overhead_s'] * 1e6:.0f} us per action")
    parts.append(line)

    chk = report.get("check")
    if chk:
        verdict = Text("check: ", style="bold")
        verdict.append("PASS" if chk["passed"] else "FAIL", style="bold green" if chk["passed"] else "bold red")
        verdict.append(
            f"  loss max rel diff {_fmt_e(chk['loss_max_rel_diff'])} (tol {chk['loss_rtol']:.0e}); grad max rel "
            f"diff step 0 {_fmt_e(chk['grad_first_step_max_rel_diff'])} (tol {chk['grad_rtol_first_step']:.0e}), "
            f"all steps {_fmt_e(chk['grad_max_rel_diff'])} (tol {chk['grad_rtol']:.0e}) worst "
            f"{chk['worst_grad']} at step {chk['worst_grad_step']}"
        )
        if chk["missing_grads"]:
            verdict.append(f"; missing gradients: {', '.join(chk['missing_grads'][:5])}", style="red")
        verdict.append(f"\n  ({chk['tolerance']})")
        parts.append(verdict)
    for note in report.get("notes") or []:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)
