"""`shardwise train validate` (alias `shardwise validate`): prediction error against public measurements."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from shardwise.cli.options import Format
from shardwise.console import echo_json, make_console


def _pct(x: float | None, signed: bool = False) -> str:
    return "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")


def validate(
    path: Path = typer.Argument(None, help="Calibration JSON (default: the repository's copy of shared/calibration)."),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table or json."),
    details: bool = typer.Option(False, "--details", help="Also list every figure and every skipped record."),
    cv: bool = typer.Option(False, "--cv", help="Leave-one-source-out: each source predicted by constants fitted without it (with --comm: refits, one per source)."),
    comm: bool = typer.Option(False, "--comm", help="Check the network model on the nccl-tests / DeepEP records instead."),
    plot: Path = typer.Option(None, "--plot", help="With --comm: predicted vs measured bus bandwidth per message size, PNG."),
) -> None:
    """Estimate every applicable calibration record and report the error per source.

    Errors are signed so that + means the estimate is faster (or larger) than measured.

    Examples:

      shardwise validate

      shardwise validate --cv

      shardwise validate --comm --plot busbw.png

      shardwise validate --details --format json
    """
    if comm:
        _validate_comm(path, format, details, cv, plot)
        return
    if cv:
        _cross_validation(path, format, details)
        return
    from shardwise.calibration.validate import CATEGORIES, run_validation, to_json

    result = run_validation(path)
    if format is Format.json:
        echo_json(to_json(result))
        return
    s = result["summary"]
    console = make_console()
    table = Table(title="Mean absolute error per source (constants fitted on all sources; --cv for held-out)", title_justify="left")
    table.add_column("source")
    table.add_column("figures", justify="right")
    for c in CATEGORIES:
        table.add_column(c, justify="right")
    table.add_column("runs over GPU memory", justify="right")
    for source, info in s["sources"].items():
        over = f"{info['over_memory']}/{info['runs']}" if info["runs"] else "-"
        table.add_row(source, str(info["figures"]), *(_pct(info["mape"][c]) for c in CATEGORIES), over)
    table.add_row("[bold]all[/bold]", str(s["figures"]), *(_pct(s["overall"][c]) for c in CATEGORIES), f"{s['over_memory']}/{s['runs']}")
    console.print(table)
    console.print(f"runs over GPU memory: runs that ran whose estimated per-GPU peak is above the GPU's memory "
                  f"({s['over_memory']} of {s['runs']}; --details lists them)")
    console.print(f"{s['figures']} figures from {s['records']} records; {s['skipped_records']} records skipped:")
    for reason, n in s["skip_reasons"].items():
        console.print(f"  {n:3d}  {reason}")
    if details:
        rows = Table(title="Every figure (+ = estimate faster or larger than measured)", title_justify="left")
        for col in ("record", "metric", "measured", "predicted", "error", "assumptions"):
            rows.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
        for r in result["rows"]:
            rows.add_row(r.case.record_id, r.case.metric, f"{r.case.measured:.4g}", f"{r.predicted:.4g}", f"{r.error:+.1%}", "; ".join(r.case.assumptions))
        console.print(rows)
        for sk in result["skips"]:
            console.print(f"skipped {sk.record_id}: {sk.reason}")
        for o in result["over_memory"]:
            console.print(f"over GPU memory {o['id']}: {o['peak_gib']:.1f} GiB estimated, {o['hbm_gib']:.1f} GiB on the GPU "
                          f"({'; '.join(o['assumptions']) or 'as recorded'})")


def _cross_validation(path: Path | None, format: Format, details: bool) -> None:
    from shardwise.calibration.fit import SOURCE_NOISE_RATIO
    from shardwise.calibration.validate import TARGET_MIN_ROWS, cross_validation

    result = cross_validation(path)
    if format is Format.json:
        slim = {**result, "groups": {g: {k: v for k, v in info.items() if details or k != "held_out"} for g, info in result["groups"].items()}}
        echo_json(slim)
        return
    console = make_console()
    table = Table(title="Leave-one-source-out: error of each source predicted by constants fitted without it",
                  title_justify="left")
    for col in ("source group", "dense BF16 rows", "held-out MAE", "mean error", "FP8 rows", "FP8 MAE", "MoE rows", "MoE MAE"):
        table.add_column(col, justify="left" if col == "source group" else "right")
    for group, g in result["groups"].items():
        fp8, moe = g["classes"]["fp8"], g["classes"]["moe"]
        table.add_row(group, str(g["rows"]), _pct(g["mape"]), _pct(g["mean_error"], signed=True),
                      str(fp8["rows"]), _pct(fp8["mape"]), str(moe["rows"]), _pct(moe["mape"]),
                      style="" if g["target"] else "dim")
    console.print(table)
    for label, t in (("dense BF16", result["targets"]["dense"]), ("FP8", result["targets"]["fp8"]),
                     ("MoE", result["targets"]["moe"])):
        console.print(f"sources with >= {TARGET_MIN_ROWS} {label} rows: {t['sources']}; held-out MAE <= "
                      f"{t['target_mae']:.0%}: {t['within']}; above 20%: {t['above_20pct']}")
    spread = result["spread"]
    if spread:
        kappa = "unbounded (no spread between sources)" if spread["kappa"] is None else f"{spread['kappa']:.2f}"
        console.print(f"dense held-out errors: within-source noise sigma {spread['sigma']:.1%}, between-source spread tau "
                      f"{spread['tau']:.1%}, kappa = sigma^2/tau^2 = {kappa}")
        console.print(f"  (the fit weighs a source of n rows n/(n + kappa) with kappa = {SOURCE_NOISE_RATIO})")
    det = Table(title="Fitted constants: what the data determine", title_justify="left")
    det.add_column("constant")
    det.add_column("verdict")
    for name, verdict in result["determined"].items():
        det.add_row(name, verdict)
    console.print(det)
    if details:
        rows = Table(title="Every held-out figure (+ = estimate faster than measured)", title_justify="left")
        for col in ("record", "metric", "measured", "predicted", "error"):
            rows.add_column(col, justify="left" if col in ("record", "metric") else "right")
        for g in result["groups"].values():
            for r in g["held_out"]:
                rows.add_row(r["id"], r["metric"], f"{r['measured']:.4g}", f"{r['predicted']:.4g}", f"{r['error']:+.1%}")
        console.print(rows)


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
