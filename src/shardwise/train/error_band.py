"""The error band an estimate carries: how far off the cross-validation found held-out runs on the same
GPU family and software stack (written by ``scripts/fit_constants.py``; see
:mod:`shardwise.calibration.bands`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from shardwise.cost.constants import default_constants, fit_cv_data


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return fit_cv_data().get("error_bands", {})


def error_band(gpu_name: str, framework: str, run_class: str = "dense") -> dict[str, Any] | None:
    """{"pct": 0.09, "rows": 31, "basis": "dense/H100-SXM/megatron"} for the most specific key with enough
    held-out runs of the same class (dense, fp8 or moe), or None when no cross-validation has been run."""
    band = _band(gpu_name, framework, run_class)
    return None if band is None else dict(band)  # a copy: the caller's own


@lru_cache(maxsize=256)
def _band(gpu_name: str, framework: str, run_class: str) -> dict[str, Any] | None:
    """:func:`error_band` (cached: a pure function of the fitted table and its three keys)."""
    table = _table()
    bands = table.get("bands", {})
    tags = {"class": run_class, "gpu_family": default_constants().family(gpu_name), "framework": framework}
    for level in table.get("levels", []):
        key = "/".join(str(tags.get(k)) for k in level) or "all"
        if key in bands:
            return {**bands[key], "basis": key}
    return None
