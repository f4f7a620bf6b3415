"""Measured vs predicted timeline, one above the other on one time axis (matplotlib, Agg backend).

Each panel has one row per pipeline rank, a colour per kind (the schedule plots' palette: F blue,
I orange, B red, W green; lighter for a rank's later stage), micro-batch numbers in the boxes wide
enough to hold them, and communication waits as thin grey bars under the row.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shardwise.errors import ShardwiseError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_COLOURS = {"F": ("#2f6db5", "#8fb8e8"), "I": ("#d9762b", "#f3bd8c"), "B": ("#c0392b", "#e99a92"),
            "W": ("#3c9a4a", "#9fd4a6")}
_LABELS = {"F": "F forward", "I": "I input-grad", "B": "B full backward", "W": "W weight-grad"}


def _panel(ax: Axes, tl: dict, title: str, span_ms: float, width_in: float, dpi: int) -> set[str]:
    used: set[str] = set()
    px_per_ms = width_in * dpi * 0.85 / max(span_ms, 1e-9)
    for r, row in enumerate(tl["ranks"]):
        chunk_of = {s: j for j, s in enumerate(sorted({e["stage"] for e in row}))}
        for e in row:
            a, b = e["start"] * 1e3, e["end"] * 1e3
            light = chunk_of[e["stage"]] % 2
            used.add(e["kind"])
            ax.broken_barh([(a, b - a)], (r - 0.4, 0.7), facecolors=_COLOURS[e["kind"]][light],
                           edgecolors="white", linewidth=0.5)
            label = str(e["microbatch"])
            if (b - a) * px_per_ms >= len(label) * 7 * dpi / 72 * 0.62 + 3:
                ax.text((a + b) / 2, r - 0.05, label, ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
        for c in (tl.get("comms") or [[]] * len(tl["ranks"]))[r]:
            a, b = c["start"] * 1e3, c["end"] * 1e3
            ax.broken_barh([(a, b - a)], (r + 0.32, 0.08), facecolors="#888888")
    n = len(tl["ranks"])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"rank {r}" for r in range(n)])
    ax.set_xlim(0, span_ms)
    ax.grid(axis="x", alpha=0.25)
    ax.set_title(title, fontsize=9, loc="left")
    return used


def plot_measured_vs_predicted(measured: dict, predicted: dict | None, path: str | Path, title: str = "",
                               dpi: int = 130) -> Path:
    """Save the measured timeline (and the predicted one, when given) to ``path`` (.png/.svg/.pdf)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ShardwiseError(f"--plot file must end in .png, .svg or .pdf; got {str(path)!r}")
    panels = [("measured", measured)] + ([("predicted", predicted)] if predicted else [])
    span_ms = max(tl["makespan"] for _, tl in panels) * 1e3 * 1.02
    n = len(measured["ranks"])
    width = 11.0
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 1.3 + len(panels) * (0.8 + 0.45 * n)),
                             sharex=True, squeeze=False)
    used: set[str] = set()
    for ax, (label, tl) in zip(axes[:, 0], panels):
        head = (f"{label}: makespan {tl['makespan'] * 1e3:.2f} ms, bubble_fraction "
                f"{tl['bubble_fraction']:.3f}")
        used |= _panel(ax, tl, head, span_ms, width, dpi)
    axes[-1, 0].set_xlabel("time (ms)")
    handles = [Patch(color=_COLOURS[k][0], label=_LABELS[k]) for k in "FIBW" if k in used]
    handles.append(Patch(color="#888888", label="communication: posting P2P ops or waiting on them"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97 if title else 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
