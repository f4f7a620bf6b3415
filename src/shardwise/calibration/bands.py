"""Error bands from the cross-validation residuals: how far off held-out runs like this one were.

For each key — the run class (dense BF16, FP8, MoE: :func:`shardwise.calibration.validate.row_class`)
with (GPU family, stack), then the stack alone, then the GPU family, then the class alone — the 80th
percentile of the absolute held-out throughput error of the runs with that key. An
estimate reports the band of the most specific key backed by at least MIN_ROWS held-out runs
(:func:`shardwise.train.error_band.error_band` reads what this module writes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.calibration.scoring import row_class

MIN_ROWS = 5
PERCENTILE = 80
LEVELS = (("class", "gpu_family", "framework"), ("class", "framework"), ("class", "gpu_family"), ("class",))


def band_key(level: tuple[str, ...], tags: dict[str, Any]) -> str:
    return "/".join(str(tags.get(k)) for k in level)


def error_bands(cv_rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Band table from :func:`shardwise.calibration.fit.leave_one_group_out` output."""
    rows = [r for fold in cv_rows.values() for r in fold["rows"] if r["in_scope"]]
    bands: dict[str, dict[str, Any]] = {}
    for level in LEVELS:
        keyed: dict[str, list[float]] = {}
        for r in rows:
            tags = {**r["tags"], "class": row_class(r["tags"])}
            keyed.setdefault(band_key(level, tags), []).append(abs(r["error"]))
        for key, errs in keyed.items():
            if len(errs) >= MIN_ROWS:
                bands[key] = {"pct": float(np.percentile(errs, PERCENTILE)), "rows": len(errs)}
    return {
        "about": f"{PERCENTILE}th percentile of the absolute leave-one-source-out throughput error of comparable runs",
        "levels": [list(level) for level in LEVELS],
        "min_rows": MIN_ROWS,
        "bands": bands,
    }
