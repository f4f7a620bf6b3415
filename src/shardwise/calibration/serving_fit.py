"""The serving fit: the engine constants and the HBM streaming efficiency per GPU family, on the `fit`
rows of the serving measurements (:mod:`shardwise.serve.measurements`), and its leave-one-source-out
cross-validation.

Each candidate set of constants re-simulates every fit record; residuals are log(simulated / published)
of the headline figures (median TTFT and TPOT, offline throughput, a static batch's latency), minimised
with a robust (soft-L1) loss. Each source weighs the same whatever its number of rows: a residual counts
1/sqrt(rows of its source). The GPU's GEMM and attention efficiencies are the device model's, fitted on
the training runs (:mod:`shardwise.calibration.fit`); decode streams the weights, so the serving runs
are what determine the device's HBM streaming efficiency, which the training estimate then uses too.

A parameter is *determined* when rows of at least two sources depend on it (a family's HBM efficiency:
rows on that family's GPUs; an API-server latency: TTFT or E2E rows through that engine's server; the
scheduler overheads: every row); otherwise it is reported as not determined (its value then rests on one source
and, with that source left out, on its starting value and the weak prior).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shardwise.calibration.fit import PRIOR_WEIGHT
from shardwise.cost.constants import Constants
from shardwise.serve.constants import ServingConstants

FAMILIES = ("A100-80GB", "H100-SXM", "MI300X")
# name, start, lower, upper, scale. As in the training fit, a weak prior (PRIOR_WEIGHT x (value - start) /
# scale) holds each parameter near its start where the runs do not tell it apart from the others: the
# HBM efficiency trades against the per-iteration and per-sequence overheads along a nearly flat valley.
PARAMS = [
    *[(f"{fam}.memory_efficiency", 0.72, 0.4, 0.95, 0.1) for fam in FAMILIES],
    ("step_overhead_s", 1.5e-3, 1e-4, 8e-3, 1e-3),
    ("per_seq_overhead_s", 10e-6, 0.0, 60e-6, 1e-5),
    ("frontend_s", 15e-3, 0.0, 60e-3, 1e-2),
    ("sglang_frontend_s", 15e-3, 0.0, 60e-3, 1e-2),
]
KEYS = ("ttft_median_ms", "tpot_median_ms", "request_throughput", "output_tokens_per_s", "e2e_median_ms")


def constants_for(x: np.ndarray, device: Constants, params: list | None = None) -> ServingConstants:
    """Serving constants for parameter vector `x`, on `device` with its per-family HBM efficiency set."""
    per_gpu = {k: dict(v) for k, v in device.per_gpu.items()}
    scalars: dict[str, float] = {}
    compute = {}
    for (name, *_), value in zip(params or PARAMS, x, strict=True):
        if name.startswith("device."):
            compute[name.split(".")[1]] = float(value)
        elif "." in name:
            fam, field = name.split(".")
            per_gpu.setdefault(fam, {})[field] = float(value)
        else:
            scalars[name] = float(value)
    device = replace(device, per_gpu=per_gpu, compute=replace(device.compute, **compute))
    return replace(ServingConstants(), **scalars, device=device)


def _depends(param: str, rec: dict[str, Any], device: Constants) -> bool:
    """Whether a record's simulation depends on `param` (module docstring)."""
    job = rec["job"]
    if param.endswith(".memory_efficiency"):
        from shardwise.specs.hardware import get_gpu

        dep = job["deployment"]
        gpus = [dep["gpu"]] if "gpu" in dep else [p["gpu"] for p in (dep.get("prefill"), dep.get("decode"), *(dep.get("pools") or [])) if p]
        return any(device.family(get_gpu(g).name) == param.split(".")[0] for g in gpus)
    if param in ("frontend_s", "sglang_frontend_s"):
        if not rec.get("frontend", True) or not {"ttft_median_ms", "e2e_median_ms"} & set(rec["measured"]):
            return False  # the API-server latency enters TTFT and E2E, not TPOT or throughput
        from shardwise.serve.config import engine_spec

        engine = engine_spec(job["deployment"].get("engine")).family()
        return (engine == "sglang") == (param == "sglang_frontend_s")
    return True


def determined(recs: list[dict[str, Any]], device: Constants, params: list | None = None) -> dict[str, dict[str, Any]]:
    """For each parameter: the sources whose rows depend on it, and whether two or more do."""
    out = {}
    for name, *_ in params or PARAMS:
        sources = sorted({r["source"] for r in recs if _depends(name, r, device)})
        verdict = "determined" if len(sources) >= 2 else f"not determined ({len(sources)} source{'s' if len(sources) != 1 else ''})"
        out[name] = {"sources": sources, "verdict": verdict}
    return out


def fit_serving(device: Constants, fit_hbm: bool = True, max_nfev: int = 60, exclude: set[str] | None = None,
                start: dict[str, float] | None = None) -> tuple[ServingConstants, dict[str, Any]]:
    """Fit the serving parameters on `device`'s constants without the sources in `exclude`; with
    `fit_hbm` also the HBM streaming efficiency per family (otherwise `device`'s is kept). `start`:
    values to start from (the prior stays at the PARAMS starts). Returns the constants (their `device`
    carries the HBM efficiencies) and a record of the fit."""
    from shardwise.serve.validate import compare, records

    params = [p for p in PARAMS if fit_hbm or "." not in p[0]]  # the device's constants only with fit_hbm
    recs = records("fit", exclude=exclude)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["source"]] = counts.get(r["source"], 0) + sum(k in KEYS for k in r["measured"])
    prior_at = np.array([p[1] for p in params])

    def residuals(x: np.ndarray) -> np.ndarray:
        rows = compare(recs, constants_for(x, device, params), KEYS)
        serving = np.array([np.log1p(r["error"]) / np.sqrt(counts[r["source"]]) for r in rows])
        return np.concatenate([serving, PRIOR_WEIGHT * (x - prior_at) / scale])

    scale = np.array([p[4] for p in params])
    lo, hi = np.array([p[2] for p in params]), np.array([p[3] for p in params])
    x0 = np.array([(start or {}).get(p[0], p[1]) for p in params])
    res = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale=scale,
                        diff_step=0.03, loss="soft_l1", f_scale=0.1, max_nfev=max_nfev)
    consts = constants_for(res.x, device, params)
    rows = compare(recs, consts, KEYS)
    kept = {f"{fam}.memory_efficiency": consts.device.compute_for(fam).memory_efficiency for fam in FAMILIES}
    record = {
        "parameters": {**kept, **{p[0]: float(v) for p, v in zip(params, res.x, strict=True)}},
        "determined": determined(recs, device, params),
        "sources": sorted(counts),
        "keys": list(KEYS),
        "loss": "soft_l1 on log(simulated/published), f_scale 0.1, each source weighted 1/sqrt(its rows), with the "
                "training fit's weak prior on each parameter",
        "residuals": [{k: r[k] for k in ("id", "source", "metric", "published", "simulated", "error")} for r in rows],
    }
    return consts, record


def leave_one_source_out(device: Constants, full: dict[str, Any], max_nfev: int = 30,
                         progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """For each source of fit rows: refit without it (from the full fit's values) and predict its rows.
    Returns source -> {"parameters": the fold's values, "rows": the held-out rows}."""
    from shardwise.serve.validate import compare, records

    out = {}
    for source in sorted({r["source"] for r in records("fit")}):
        if progress:
            progress(source)
        consts, fold = fit_serving(device, max_nfev=max_nfev, exclude={source}, start=full["parameters"])
        rows = compare(records("fit", sources={source}), consts, KEYS)
        out[source] = {"parameters": fold["parameters"],
                       "rows": [{k: r[k] for k in ("id", "source", "metric", "published", "simulated", "error", "headline", "split")}
                                for r in rows]}
    return out
