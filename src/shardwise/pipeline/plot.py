"""Timeline plot of a simulated schedule (matplotlib, Agg backend): one row per rank, colour per kind."""

from __future__ import annotations

from pathlib import Path

from shardwise.errors import ShardwiseError
from shardwise.pipeline.simulate import SimResult

# (dark, light) per kind: the light shade marks a rank's later stages (interleaved / V chunks)
_COLOURS = {
    "F": ("#2f6db5", "#8fb8e8"),
    "I": ("#d9762b", "#f3bd8c"),
    "B": ("#c0392b", "#e99a92"),
    "W": ("#3c9a4a", "#9fd4a6"),
}
_LABELS = {"F": "F forward", "I": "I input grad", "B": "B full backward (I+W)", "W": "W weight grad"}


def plot_timeline(res: SimResult, path: str | Path, title: str | None = None, dpi: int = 150) -> Path:
    """Draw ``res`` as a timeline and save it to ``path`` (``.png``, ``.svg`` or ``.pdf``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ShardwiseError(f"plot file must end in .png, .svg or .pdf; got {str(path)!r}")
    pp = res.pp
    span = max(res.makespan, 1e-12)
    width = min(max(8.0, 0.5 * res.num_stages * res.microbatches / max(pp, 1) * 0.6), 24.0)
    height = 1.6 + 0.5 * pp
    fig, ax = plt.subplots(figsize=(width, height))
    t0 = min((float(s.min()) for s in res.starts if len(s)), default=0.0)
    px_per_time = width * dpi * 0.85 / span
    used = set()
    for r in range(pp):
        acts = res.actions[r].tolist()
        chunk_of = {s: j for j, s in enumerate(sorted({s for s, _, _ in acts}))}
        bars: dict[str, list[tuple[float, float]]] = {}
        for (s, m, k), a, b in zip(acts, res.starts[r].tolist(), res.ends[r].tolist()):
            kind = "FIWB"[k]
            light = chunk_of[s] % 2
            used.add(kind)
            bars.setdefault(_COLOURS[kind][light], []).append((a - t0, b - a))
            label = str(m)
            box_px = (b - a) * px_per_time
            fs = 8 if box_px >= 16 else 7
            if box_px >= len(label) * fs * dpi / 72 * 0.62 + 3:
                ax.text((a + b) / 2 - t0, r, label, ha="center", va="center", fontsize=fs,
                        color="black" if light else "white")
        for colour, xs in bars.items():
            ax.broken_barh(xs, (r - 0.4, 0.8), facecolors=colour, edgecolors="white", linewidth=0.6)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"rank {r}" for r in range(pp)])
    ax.set_xlim(0, span)
    ax.set_xlabel("time")
    ax.grid(axis="x", alpha=0.25)
    handles = [Patch(color=_COLOURS[k][0], label=_LABELS[k]) for k in "FIBW" if k in used]
    if res.vpp > 1:
        handles.append(Patch(facecolor="#bbbbbb", edgecolor="#888888",
                             label="lighter: the rank's later stage"))
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles),
               fontsize=8 if width >= 10 or len(handles) < 5 else 7, frameon=False, columnspacing=1.2,
               handlelength=1.5)
    heading = title or (
        f"{res.name}  (pp={pp}, vpp={res.vpp}, microbatches={res.microbatches})\n"
        f"bubble_fraction {res.bubble_fraction:.3f}   bubble_ratio {res.bubble_ratio:.3f}   "
        f"stage_bubble_ratio {res.stage_bubble_ratio:.3f}   peak activation "
        f"{max(res.peak_activation_rank_microbatches):.3g} micro-batches/rank"
    )
    ax.set_title(heading, fontsize=9, loc="left")
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
