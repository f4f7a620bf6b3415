"""`shardwise validate`: prediction error against public measurements."""

from __future__ import annotations

from pathlib import Path

import typer
from shardwise.console import echo_json, make_console
from rich.table import Table

from shardwise.cli.train import Format


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def validate(
    path: Path = typer.Argument(None, help="Calibration JSON (default: the repository's copy of shared/calibration)."),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table or json."),
    details: bool = typer.Option(False, "--details", help="Also list every figure and every skipped record."),
    comm: bool = typer.Option(False, "--comm", help="Check the network model on the nccl-tests / DeepEP records instead."),
    cv: bool = typer.Option(True, "--cv/--no-cv", help="With --comm: leave-one-source-out error per source (one fit per source)."),
    plot: Path = typer.Option(None, "--plot", help="With --comm: predicted vs measured bus bandwidth per message size, PNG."),
) -> None:
    """Estimate every applicable calibration record and report the error per source.

    Examples:

      shardwise validate

      shardwise validate --details --format json

      shardwise validate --comm --plot busbw.png
    """
    if comm:
        _validate_comm(path, format, details, cv, plot)
        return
    from shardwise.train.validate import CATEGORIES, run_validation, to_json

    result = run_validation(path)
    if format is Format.json:
        echo_json(to_json(result))
        return
    s = result["summary"]
    console = make_console()
    table = Table(title="Mean absolute percentage error per source", title_justify="left")
    table.add_column("source")
    table.add_column("split")
    table.add_column("figures", justify="right")
    for c in CATEGORIES:
        table.add_column(c, justify="right")
    for source, info in s["sources"].items():
        table.add_row(source, "fit" if info["fit"] else "held out", str(info["figures"]), *(_pct(info["mape"][c]) for c in CATEGORIES))
    table.add_row("[bold]all held-out[/bold]", "", "", *(_pct(s["overall_held_out"][c]) for c in CATEGORIES))
    table.add_row("[dim]all fit[/dim]", "", "", *(_pct(s["overall_fit"][c]) for c in CATEGORIES))
    console.print(table)
    console.print(f"{s['figures']} figures from {s['records']} records; {s['skipped_records']} records skipped:")
    for reason, n in s["skip_reasons"].items():
        console.print(f"  {n:3d}  {reason}")
    if details:
        rows = Table(title="Every figure", title_justify="left")
        for col in ("record", "metric", "measured", "predicted", "error", "assumptions"):
            rows.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
        for r in result["rows"]:
            rows.add_row(r.case.record_id, r.case.metric, f"{r.case.measured:.4g}", f"{r.predicted:.4g}", f"{r.error:+.1%}", "; ".join(r.case.assumptions))
        console.print(rows)
        for sk in result["skips"]:
            console.print(f"skipped {sk.record_id}: {sk.reason}")


def _validate_comm(path: Path | None, format: Format, details: bool, cv: bool, plot: Path | None) -> None:
    """`shardwise validate --comm`: the network model against comm-measurements.json, per source."""
    from shardwise.cost.comm_fit import run_validation, to_json

    result = run_validation(path, cv=cv)
    if plot:
        from shardwise.cost.comm_plot import plot_busbw

        plot_busbw(result, plot)
    if format is Format.json:
        echo_json(to_json(result))
        return
    console = make_console()
    table = Table(title="Network model: mean absolute error of bus bandwidth (>= 1 MiB) per source", title_justify="left")
    for col in ("source", "rows", "shipped constants", "max", "held out", "held-out max", "not determined when held out"):
        table.add_column(col, justify="left" if col.startswith(("source", "not")) else "right")
    for source, info in result["per_source"].items():
        ship, held = info["shipped"], info.get("held_out", {})
        table.add_row(info["label"], str(ship["rows"]), _pct(ship["mape"]), _pct(ship["max_abs"]), _pct(held.get("mape")),
                      _pct(held.get("max_abs")), ", ".join(info.get("undetermined_when_held_out", [])))
    console.print(table)
    within = [s for s, i in result["per_source"].items() if (i.get("held_out") or i["shipped"])["mape"] <= 0.15]
    kind = "held out" if cv else "shipped constants"
    console.print(f"{len(within)} of {len(result['per_source'])} sources within 15% ({kind}); "
                  f"{len(result['skips'])} records skipped, {len(result['latency_rows'])} latency-floor rows (8 B) reported with --details")
    if details:
        held = {c.record_id: p for fold in result["held_out"].values() for c, p in fold["rows"]}
        rows = Table(title="Every figure", title_justify="left")
        for col in ("record", "metric", "measured", "predicted", "error", "held out", "assumptions"):
            rows.add_column(col, justify="right" if col in ("measured", "predicted", "error", "held out") else "left")
        for c, p in result["rows"] + result["latency_rows"]:
            h = held.get(c.record_id)
            rows.add_row(c.record_id, c.metric, f"{c.measured:.4g}", f"{p:.4g}", f"{p / c.measured - 1:+.1%}",
                         "-" if h is None else f"{h / c.measured - 1:+.1%}", "; ".join(c.assumptions))
        console.print(rows)
        for sk in result["skips"]:
            console.print(f"skipped {sk.record_id}: {sk.reason}")
