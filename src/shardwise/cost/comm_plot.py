"""Predicted vs measured bus bandwidth per message size, one panel per benchmarked system (matplotlib Agg).

Sweeps (a source's rows on one system at several sizes) get a panel each: measured points, the shipped
constants' curve from 1 MiB to 16 GiB, and each row's held-out prediction (constants fitted without its
source). Single-size rows (statements, DeepEP, 4-GPU runs) share a last panel, predicted against measured.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.cost.comm_fit import MIB, CommCase

SIZE_TOKEN = re.compile(r"_\d+[kmg]$")


def _series(case: CommCase) -> str | None:
    return SIZE_TOKEN.sub("", case.record_id) if SIZE_TOKEN.search(case.record_id) else None


def plot_busbw(result: dict[str, Any], path: str | Path) -> Path:
    """Draw `run_validation`'s rows (with its held-out folds) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    held = {c.record_id: p for fold in result["held_out"].values() for c, p in fold["rows"]}
    series: dict[str, list[tuple[CommCase, float]]] = defaultdict(list)
    singles = []
    for case, pred in result["rows"]:
        key = _series(case)
        (series[key] if key else singles).append((case, pred))
    for key in [k for k, rows in series.items() if len(rows) < 3]:
        singles.extend(series.pop(key))
    panels = len(series) + 1
    cols = 4
    fig, axes = plt.subplots(-(-panels // cols), cols, figsize=(4.2 * cols, 3.3 * -(-panels // cols)), squeeze=False)
    sizes = np.geomspace(MIB, 16 * 2**30, 40)
    for ax, (key, rows) in zip(axes.flat, sorted(series.items()), strict=False):
        first = rows[0][0]
        curve = [replace(first, size_bytes=float(s)).predict(result["constants"]) for s in sizes]
        ax.plot(sizes / MIB, curve, color="tab:blue", lw=1.5, label="model (shipped constants)")
        x = np.array([c.size_bytes for c, _ in rows]) / MIB
        ax.plot(x, [c.measured for c, _ in rows], "ko", ms=5, label="measured")
        ax.plot(x, [held.get(c.record_id, np.nan) for c, _ in rows], "x", color="tab:orange", ms=7, mew=2, label="held-out prediction")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{key}\n{first.group.network.link}, {first.group.domains} x {first.group.per_domain} GPUs", fontsize=8)
        ax.set_xlabel("message size (MiB)", fontsize=8)
        ax.set_ylabel("bus bandwidth (GB/s)", fontsize=8)
        ax.tick_params(labelsize=7)
    ax = axes.flat[len(series)]
    meas = np.array([c.measured for c, _ in singles])
    ax.loglog(meas, [p for _, p in singles], "o", color="tab:blue", ms=4, label="model (shipped)")
    ax.loglog(meas, [held.get(c.record_id, np.nan) for c, _ in singles], "x", color="tab:orange", ms=6, mew=2, label="held-out")
    span = np.array([meas.min() / 1.3, meas.max() * 1.3])
    ax.plot(span, span, "k-", lw=0.8)
    ax.fill_between(span, span / 1.15, span * 1.15, color="0.85", label="±15%")
    ax.set_title("single sizes: statements, 4-GPU runs, DeepEP all-to-all", fontsize=8)
    ax.set_xlabel("measured (GB/s)", fontsize=8)
    ax.set_ylabel("predicted (GB/s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left")
    for extra in list(axes.flat)[panels:]:
        extra.axis("off")
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
