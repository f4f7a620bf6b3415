"""Plots: latency CDFs of a run, and cost versus request rate for candidate deployments (matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shardwise.serve.config import SLOSpec
from shardwise.serve.metrics import per_request
from shardwise.serve.simulate import ServeSimResult


def _pyplot():
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


# (key, axis label, SLO field) of the four latency CDFs
CDFS = (("ttft", "TTFT", "ttft_ms"), ("tpot", "TPOT (excl. first token)", "tpot_ms"), ("itl", "ITL (pooled gaps)", None),
        ("e2e", "E2E latency", "e2e_ms"))


def latency_samples_ms(result: ServeSimResult) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Per-request TTFT, TPOT (requests with more than one output token) and E2E, and the pooled ITL
    gaps with their counts, in ms: what the CDFs are drawn from."""
    lat = per_request(result)
    itl_v, itl_w = result.itl.samples()
    return {"ttft": (lat["ttft_s"] * 1e3, None), "tpot": (lat["tpot_s"][result.requests.output_len > 1] * 1e3, None),
            "itl": (itl_v * 1e3, itl_w), "e2e": (lat["e2e_s"] * 1e3, None)}


def cdf_points(values_ms: np.ndarray, weights: np.ndarray | None, points: int = 200) -> dict[str, list[float]]:
    """The empirical CDF at `points` evenly spaced quantiles (enough to draw; the metrics stay exact)."""
    order = np.argsort(values_ms, kind="stable")
    v = np.asarray(values_ms, float)[order]
    w = np.ones_like(v) if weights is None else np.asarray(weights, float)[order]
    keep = np.isfinite(v)
    v, w = v[keep], w[keep]
    if not len(v):
        return {"ms": [], "fraction": []}
    cum = np.cumsum(w) / w.sum()
    pick = np.unique(np.searchsorted(cum, np.linspace(0, 1, points), side="left").clip(0, len(v) - 1))
    return {"ms": v[pick].tolist(), "fraction": cum[pick].tolist()}


def plot_latency_cdfs(result: ServeSimResult, path: str | Path, title: str, slo: SLOSpec | None = None) -> Path:
    """TTFT, TPOT, ITL and E2E CDFs in one 2x2 figure."""
    plt = _pyplot()
    samples = latency_samples_ms(result)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, label, target) in zip(axes.flat, CDFS, strict=True):
        _cdf(ax, *samples[key], label, getattr(slo, target) if slo and target else None)
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
