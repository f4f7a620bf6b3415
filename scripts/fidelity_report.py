"""Regenerate the tables and plots of docs/fidelity.md from the stored cross-validation.

    .venv/bin/python scripts/fidelity_report.py

Rewrites the text between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` markers in
docs/fidelity.md (the prose around them is hand-written) and draws docs/img/fidelity-cv.png
(held-out predicted vs measured throughput, log-log, one panel per source group). Run it after
scripts/fit_constants.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from shardwise.calibration.scoring import row_class
from shardwise.calibration.validate import TARGET_MIN_ROWS, cross_validation
from shardwise.cost.constants import fit_cv_data, fitted_data

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "fidelity.md"
README = ROOT / "README.md"
CLASS_COLOURS = {"dense": "tab:blue", "fp8": "tab:orange", "moe": "tab:green"}


def _pct(x: float | None, signed: bool = False) -> str:
    return "–" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")


def cv_table(result: dict) -> str:
    lines = ["| source group | sources | dense BF16 rows | held-out MAE | mean error | FP8 rows | FP8 MAE | MoE rows | MoE MAE |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for group, g in result["groups"].items():
        name = f"**{group}**" if g["target"] else group
        fp8, moe = g["classes"]["fp8"], g["classes"]["moe"]
        lines.append(f"| {name} | {'; '.join(g['sources'])} | {g['rows']} | {_pct(g['mape'])} | {_pct(g['mean_error'], True)} | "
                     f"{fp8['rows']} | {_pct(fp8['mape'])} | {moe['rows']} | {_pct(moe['mape'])} |")
    lines.append("")
    lines.append(f"Bold: sources with at least {TARGET_MIN_ROWS} dense BF16 throughput rows. {targets_sentence(result)} "
                 "Errors are signed so that + means the estimate is faster than measured.")
    return "\n".join(lines)


def targets_sentence(result: dict) -> str:
    parts = []
    for label, t in (("dense BF16", result["targets"]["dense"]), ("FP8", result["targets"]["fp8"]), ("MoE", result["targets"]["moe"])):
        parts.append(f"{label}: {t['within']} of {t['sources']} sources with at least {TARGET_MIN_ROWS} rows within "
                     f"{t['target_mae']:.0%} held-out MAE, {t['above_20pct']} above 20%")
    return "; ".join(parts) + "."


def summary_table(result: dict) -> str:
    """The README's short form: the sources the fidelity target is judged on."""
    lines = ["| source group (dense BF16 throughput rows) | held-out MAE | mean error |", "|---|---:|---:|"]
    targeted = [(g, info) for g, info in result["groups"].items() if info["target"]]
    for group, g in sorted(targeted, key=lambda kv: kv[1]["mape"]):
        lines.append(f"| {group} ({g['rows']}) | {_pct(g['mape'])} | {_pct(g['mean_error'], True)} |")
    lines.append("")
    lines.append(f"{targets_sentence(result)} + means the estimate is faster than measured.")
    return "\n".join(lines)


def constants_table() -> str:
    fit = fitted_data().get("fit", {})
    lines = ["| constant | fitted value | what the data say |", "|---|---:|---|"]
    for name, value in fit.get("parameters", {}).items():
        lines.append(f"| {name} | {value:.4g} | {fit.get('determined', {}).get(name, '')} |")
    return "\n".join(lines)


def bands_table() -> str:
    bands = fit_cv_data().get("error_bands", {}).get("bands", {})
    lines = ["| basis (GPU family / stack) | held-out runs | 80% of them within |", "|---|---:|---:|"]
    for key, b in sorted(bands.items(), key=lambda kv: (kv[0].count("/"), kv[0]), reverse=True):
        lines.append(f"| {key} | {b['rows']} | ±{b['pct']:.0%} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    groups = [(g, info) for g, info in result["groups"].items() if info["held_out"]]
    cols = 5
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (group, info) in zip(axes.ravel(), groups, strict=False):
        for r in info["held_out"]:
            meas, pred = r["measured"], r["predicted"]
            if r["metric"] == "iteration_s":  # plot throughput-like: faster = larger
                meas, pred = 1.0 / meas, 1.0 / pred
            ax.scatter(meas, pred, s=12, color=CLASS_COLOURS[row_class(r["tags"])], alpha=0.8)
        lims = ax.get_xlim() + ax.get_ylim()
        lo, hi = min(lims), max(lims)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
        ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="grey", lw=0.5, ls=":")
        ax.plot([lo, hi], [lo / 1.1, hi / 1.1], color="grey", lw=0.5, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{group} ({_pct(info['mape'])})", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    fig.supxlabel("measured (throughput units of the source; 1/step time)")
    fig.supylabel("predicted, constants fitted without the source")
    fig.suptitle("Leave-one-source-out: held-out predictions (blue: dense BF16, orange: FP8, green: MoE; dotted: ±10%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replace_block(text: str, name: str, body: str, where: str = "docs/fidelity.md") -> str:
    pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{where} has no generated:{name} markers")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> None:
    result = cross_validation()
    text = DOC.read_text()
    text = replace_block(text, "cv", cv_table(result))
    text = replace_block(text, "constants", constants_table())
    text = replace_block(text, "bands", bands_table())
    DOC.write_text(text)
    README.write_text(replace_block(README.read_text(), "fidelity-summary", summary_table(result), "README.md"))
    plot(result, ROOT / "docs" / "img" / "fidelity-cv.png")
    print(f"updated {DOC}, the README's summary and docs/img/fidelity-cv.png")


if __name__ == "__main__":
    main()
