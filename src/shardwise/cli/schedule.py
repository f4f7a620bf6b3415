"""`shardwise schedule` commands: list, simulate, export, import, compare pipeline schedules."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from shardwise.cli.options import Format, format_option
from shardwise.console import echo_json, make_console

if TYPE_CHECKING:
    from shardwise.pipeline import SimResult

app = typer.Typer(help="""Pipeline schedules: simulate, compare, export/import (PyTorch CSV).

Examples:

  shardwise schedule list

  shardwise schedule simulate --schedule zbv --pp 8 --microbatches 32 --plot zbv.png
""", no_args_is_help=True)


class ExportFormat(str, Enum):
    csv = "csv"
    text = "text"


_SCHEDULE = typer.Option("1f1b", "--schedule", "-s", help="Schedule name (see `shardwise schedule list`).")
_PP = typer.Option(4, "--pp", help="Pipeline ranks.")
_MB = typer.Option(8, "--microbatches", "-m", help="Micro-batches per step.")
_VPP = typer.Option(None, "--vpp", help="Stages per rank (interleaved/bfs; V schedules use 2).")
_F = typer.Option("1", "--f", help="Forward time of a rank's slice (as schedule compare): a number or pp per-rank values, split over the rank's stages; or pp*vpp per-stage values.")
_I = typer.Option("1", "--i", help="Input-gradient (I) time of a rank's slice (as --f).")
_W = typer.Option("1", "--w", help="Weight-gradient (W) time of a rank's slice (as --f).")
_COMM = typer.Option(0.0, "--comm", help="Time per cross-rank hop (latency + bytes/bandwidth).")
_CAP = typer.Option(None, "--mem-cap", help="auto: per-rank activation cap in micro-batches (default pp).")
_PLACE = typer.Option(None, "--placement", help="auto: loop or v (default: v with --vpp 2, else loop).")
_RHO = typer.Option(1.0, "--w-retained", help="Fraction of a micro-batch's activations held from I to W.")
_TRACE = typer.Option(None, "--trace", help="Write a Chrome/Perfetto trace (JSON; times taken as seconds).")
_TIMELINE = typer.Option(False, "--timeline", help="With --format json: add every rank's timeline (ranks: start, "
                         "end, action of each pass), written compactly; without it the JSON holds the summary only.")


def _console() -> Console:
    """A console at least 120 columns wide so the tables' headers are not cut."""
    return make_console()


def _print_result(res: SimResult, console: Console) -> None:
    summary = Table(title=f"{res.name}: pp={res.pp}, vpp={res.vpp}, stages={res.num_stages}, "
                          f"microbatches={res.microbatches}", show_header=False)
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    summary.add_row("makespan (global step, first start to last end)", f"{res.makespan:.6g}")
    summary.add_row("longest rank span (zero-bubble step)", f"{res.stage_span:.6g}")
    summary.add_row("bubble_fraction (idle / (pp x makespan))", f"{res.bubble_fraction:.4f}")
    summary.add_row("bubble_ratio (idle / compute)", f"{res.bubble_ratio:.4f}")
    summary.add_row(f"stage_bubble_ratio (idle / span, rank {res.critical_rank})", f"{res.stage_bubble_ratio:.4f}")
    summary.add_row("peak activation, max rank (micro-batches of a stage)",
                    f"{max(res.peak_activation_microbatches):.4g}")
    summary.add_row("peak activation, max rank (micro-batches of a rank slice)",
                    f"{max(res.peak_activation_rank_microbatches):.4g}")
    console.print(summary)
    ranks = Table(title="per rank")
    for col in ("rank", "span", "busy", "idle in span", "peak act. (stage mb)", "peak act. (rank mb)"):
        ranks.add_column(col, justify="right")
    for r in range(res.pp):
        ranks.add_row(str(r), f"{res.rank_spans[r]:.6g}", f"{res.rank_busy[r]:.6g}",
                      f"{res.rank_spans[r] - res.rank_busy[r]:.6g}", f"{res.peak_activation_microbatches[r]:.4g}",
                      f"{res.peak_activation_rank_microbatches[r]:.4g}")
    console.print(ranks)


def _simulate_and_report(schedule: str, pp: int, microbatches: int, vpp: int | None, f: str, i: str, w: str,
                         comm: float, mem_cap: float | None, rho: float, from_csv: Path | None, fmt: Format,
                         plot: Path | None, trace: Path | None, placement: str | None = None,
                         timeline: bool = False) -> None:
    from shardwise.pipeline import load_csv, simulate
    from shardwise.pipeline.options import build_schedule

    imported = load_csv(from_csv) if from_csv is not None else None
    sched, times = build_schedule(schedule, pp, microbatches, vpp, f, i, w, comm, mem_cap, rho, imported, placement)
    res = simulate(sched, *times, p2p_s=comm, w_retained_fraction=rho)  # options.simulate_options, keeping sched
    if plot is not None:
        from shardwise.pipeline.plot import plot_timeline

        plot_timeline(res, plot)
    if trace is not None:
        from shardwise.pipeline.trace import simulation_trace, write_trace

        write_trace(simulation_trace(sched, res, w_retained_fraction=rho), trace)
    if fmt is Format.json:
        echo_json(res.to_dict(timeline=timeline), indent=None if timeline else 1)  # a timeline is megabytes at pp 32
        return
    console = _console()
    _print_result(res, console)
    if plot is not None:
        console.print(f"timeline written to {plot}")
    if trace is not None:
        console.print(f"trace written to {trace} (open it in ui.perfetto.dev)")


@app.command("list")
def list_cmd() -> None:
    """List the schedules and what each one is.

    Examples:

      shardwise schedule list
    """
    from shardwise.pipeline import list_schedules, schedule_info

    table = Table(title="pipeline schedules")
    table.add_column("name")
    table.add_column("stages per rank")
    table.add_column("description")
    for name in list_schedules():
        info = schedule_info(name)
        table.add_row(name, info.vpp_rule.label, info.description)
    _console().print(table)


@app.command("simulate")
def simulate_cmd(
    schedule: str = _SCHEDULE, pp: int = _PP, microbatches: int = _MB, vpp: int | None = _VPP,
    f: str = _F, i: str = _I, w: str = _W, comm: float = _COMM, mem_cap: float | None = _CAP,
    w_retained: float = _RHO, placement: str | None = _PLACE,
    from_csv: Path | None = typer.Option(None, "--from-csv", help="Simulate a schedule CSV (PyTorch layout)."),
    format: Format = format_option(),
    plot: Path | None = typer.Option(None, "--plot", help="Write a timeline (.png or .svg)."),
    trace: Path | None = _TRACE,
    timeline: bool = _TIMELINE,
) -> None:
    """Time a schedule: makespan, bubbles in both senses, peak activation memory per rank.

    Examples:

      shardwise schedule simulate --schedule zbv --pp 8 --microbatches 32 --plot zbv.png --trace zbv.json

      shardwise schedule simulate --schedule interleaved --pp 8 --microbatches 32 --vpp 2 --f 1 --i 1.3 --w 0.6 --comm 0.04 --format json --timeline

      shardwise schedule simulate --schedule auto --pp 8 --microbatches 32 --mem-cap 8
    """
    _simulate_and_report(schedule, pp, microbatches, vpp, f, i, w, comm, mem_cap, w_retained, from_csv, format, plot,
                         trace, placement, timeline)


@app.command("import")
def import_cmd(
    file: Path = typer.Argument(..., help="Schedule CSV, one row per rank (PyTorch _dump_csv layout)."),
    f: str = _F, i: str = _I, w: str = _W, comm: float = _COMM, w_retained: float = _RHO,
    format: Format = format_option(),
    plot: Path | None = typer.Option(None, "--plot", help="Write a timeline (.png or .svg)."),
    trace: Path | None = _TRACE,
    timeline: bool = _TIMELINE,
) -> None:
    """Validate and simulate a schedule CSV made elsewhere (e.g. by PyTorch).

    Examples:

      shardwise schedule import schedule_from_pytorch.csv --plot timeline.png

      shardwise schedule import zb1p.csv --f 1 --i 1.2 --w 0.8 --comm 0.05 --format json
    """
    _simulate_and_report("1f1b", 1, 1, None, f, i, w, comm, None, w_retained, file, format, plot, trace,
                         timeline=timeline)


@app.command("export")
def export_cmd(
    schedule: str = _SCHEDULE, pp: int = _PP, microbatches: int = _MB, vpp: int | None = _VPP,
    f: str = _F, i: str = _I, w: str = _W, comm: float = _COMM, mem_cap: float | None = _CAP,
    w_retained: float = _RHO,
    format: ExportFormat = typer.Option(ExportFormat.csv, "--format", help="csv (PyTorch layout) or text."),
    output: Path | None = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
) -> None:
    """Write a schedule's IR as PyTorch-compatible CSV or as text (one line per rank).

    Examples:

      shardwise schedule export --schedule zb1p --pp 4 --microbatches 8 --format csv -o zb1p.csv

      shardwise schedule export --schedule interleaved --pp 4 --microbatches 8 --vpp 2 --format text
    """
    from shardwise.pipeline import write_csv_text
    from shardwise.pipeline.options import build_schedule

    sched, _ = build_schedule(schedule, pp, microbatches, vpp, f, i, w, comm, mem_cap, w_retained)
    text = write_csv_text(sched) if format is ExportFormat.csv else sched.to_text()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, newline="")
        Console(stderr=True).print(f"{sched.name}: {sched.num_actions} actions on {sched.pp} ranks -> {output}")


@app.command("compare")
def compare_cmd(
    pp: int = _PP, microbatches: int = _MB,
    vpp: int = typer.Option(2, "--vpp", help="Stages per rank for interleaved and bfs."),
    f: str = typer.Option("1", "--f", help="Forward time of a rank's slice (number or per-rank list)."),
    i: str = typer.Option("1", "--i", help="I time of a rank's slice."),
    w: str = typer.Option("1", "--w", help="W time of a rank's slice."),
    comm: float = _COMM, mem_cap: float | None = _CAP, w_retained: float = _RHO,
    schedules: str | None = typer.Option(None, "--schedules", help="Comma-separated subset."),
    format: Format = format_option(),
) -> None:
    """Every schedule side by side on the same model (times per rank slice, split over its stages).

    Examples:

      shardwise schedule compare --pp 8 --microbatches 32 --i 1.3 --w 0.6 --comm 0.04

      shardwise schedule compare --pp 4 --microbatches 16 --schedules 1f1b,zb-h1,zbv --format json
    """
    from shardwise.pipeline import compare_schedules
    from shardwise.pipeline.options import parse_times

    names = [s.strip() for s in schedules.split(",")] if schedules else None
    rows = compare_schedules(pp, microbatches, vpp, parse_times(f, "f"), parse_times(i, "i"), parse_times(w, "w"), comm,
                             mem_cap, w_retained, names)
    if format is Format.json:
        echo_json(rows, indent=1)
        return
    table = Table(title=f"schedules at pp={pp}, microbatches={microbatches} (times per rank slice F={f} I={i} "
                        f"W={w}, comm={comm})")
    for col in ("schedule", "vpp", "makespan", "stage span", "bubble_fraction", "bubble_ratio",
                "stage_bubble_ratio", "peak act. (rank mb)"):
        table.add_column(col, justify="left" if col == "schedule" else "right")
    for row in rows:
        vpp_text = str(row["vpp"]) + (f" ({row['placement']})" if "placement" in row else "")
        if "error" in row:
            table.add_row(row["schedule"], vpp_text, "[dim]n/a: " + row["error"][:60] + "[/dim]")
            continue
        table.add_row(row["schedule"], vpp_text, f"{row['makespan']:.6g}", f"{row['stage_span']:.6g}",
                      f"{row['bubble_fraction']:.4f}", f"{row['bubble_ratio']:.4f}",
                      f"{row['stage_bubble_ratio']:.4f}", f"{row['peak_activation_rank_microbatches']:.3g}")
    _console().print(table)
