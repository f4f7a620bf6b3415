"""Plots: latency CDFs of a run, and cost versus request rate for candidate deployments (matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shardwise.serve.config import SLOSpec
from shardwise.serve.metrics import per_request
from shardwise.serve.simulate import SimResult


def _pyplot():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:  # noqa: ANN001
    out = Path(path)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    _pyplot().close(fig)
    return out


def _cdf(ax, values_ms: np.ndarray, weights: np.ndarray | None, label: str, target: float | None) -> None:  # noqa: ANN001
    order = np.argsort(values_ms)
    v = values_ms[order]
    w = np.ones_like(v) if weights is None else weights[order]
    ax.plot(v, np.cumsum(w) / w.sum(), lw=1.6)
    if target is not None:
        ax.axvline(target, color="tab:red", ls="--", lw=1, label=f"SLO {target:g} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of " + ("gaps" if weights is not None else "requests"))
    ax.grid(alpha=0.3)
    if len(v) and v[-1] > 20 * max(np.median(v), 1e-9):
        ax.set_xscale("log")


def plot_latency_cdfs(result: SimResult, path: str | Path, title: str, slo: SLOSpec | None = None) -> Path:
    """TTFT, TPOT, ITL and E2E CDFs in one 2x2 figure."""
    plt = _pyplot()
    lat = per_request(result)
    r = result.requests
    itl_v, itl_w = result.itl.samples()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    _cdf(axes[0, 0], lat["ttft_s"] * 1e3, None, "TTFT", slo.ttft_ms if slo else None)
    _cdf(axes[0, 1], lat["tpot_s"][r.output_len > 1] * 1e3, None, "TPOT (excl. first token)", slo.tpot_ms if slo else None)
    _cdf(axes[1, 0], itl_v * 1e3, itl_w, "ITL (pooled gaps)", None)
    _cdf(axes[1, 1], lat["e2e_s"] * 1e3, None, "E2E latency", slo.e2e_ms if slo else None)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def plot_cost_vs_rate(data: dict[str, Any], path: str | Path, title: str, target_rate: float | None = None) -> Path:
    """One step line per candidate (cheapest $/hour meeting the SLOs at each rate; a step is one more
    instance), and the chosen plan as a star at the target rate."""
    import textwrap

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for c in data["curves"]:
        ax.step(c["rates"], c["usd_per_hour"], where="post", lw=1.6, label=c["label"])
    chosen = data.get("chosen")
    if chosen:
        ax.plot([chosen["rate"]], [chosen["usd_per_hour"]], marker="*", ms=16, color="black", ls="none",
                label="\n".join(textwrap.wrap(chosen["label"], 70)))
    if target_rate is not None:
        ax.axvline(target_rate, color="gray", ls=":", lw=1)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("deployment cost ($/hour) meeting the SLOs")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    return _save(fig, path)
