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
) -> None:
    """Estimate every applicable calibration record and report the error per source."""
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
