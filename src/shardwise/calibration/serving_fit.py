"""The serving part of the one fit: the engine constants and the HBM streaming efficiency per GPU family,
on the `fit` rows of ``data/serving_measurements.yaml``.

Each candidate set of constants re-simulates every fit record; residuals are log(simulated / published)
of the median TTFT, the median TPOT and the offline throughput, minimised with a robust (soft-L1) loss.
The GPU's GEMM and attention efficiencies are the device model's, fitted on the training runs
(:mod:`shardwise.calibration.fit`); decode streams the weights, so the serving runs are what determine
the device's HBM streaming efficiency, which the training estimate then uses too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shardwise.calibration.fit import PRIOR_WEIGHT
from shardwise.cost.constants import Constants
from shardwise.serve.constants import ServingConstants

FAMILIES = ("A100-80GB", "H100-SXM")
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
KEYS = ("ttft_median_ms", "tpot_median_ms", "request_throughput")


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


def fit_serving(device: Constants, fit_hbm: bool = True, max_nfev: int = 60) -> tuple[ServingConstants, dict[str, Any]]:
    """Fit the serving parameters on `device`'s constants; with `fit_hbm` also the HBM streaming
    efficiency per family (otherwise `device`'s is kept). Returns the constants (their `device` carries
    the HBM efficiencies) and a record of the fit."""
    from shardwise.serve.validate import run_validation

    params = [p for p in PARAMS if fit_hbm or "." not in p[0]]  # the device's constants only with fit_hbm

    def residuals(x: np.ndarray) -> np.ndarray:
        consts = constants_for(x, device, params)
        rows = run_validation(split="fit", constants=consts, keys=KEYS)
        serving = np.array([np.log1p(r["error"]) for r in rows])
        prior = PRIOR_WEIGHT * (x - start) / scale
        return np.concatenate([serving, prior])

    start, scale = np.array([p[1] for p in params]), np.array([p[4] for p in params])
    lo, hi = np.array([p[2] for p in params]), np.array([p[3] for p in params])
    res = least_squares(residuals, np.clip(start, lo, hi), bounds=(lo, hi), x_scale=scale,
                        diff_step=0.03, loss="soft_l1", f_scale=0.1, max_nfev=max_nfev)
    consts = constants_for(res.x, device, params)
    rows = run_validation(split="fit", constants=consts, keys=KEYS)
    kept = {f"{fam}.memory_efficiency": consts.device.compute_for(fam).memory_efficiency for fam in FAMILIES}
    record = {
        "parameters": {**kept, **{p[0]: float(v) for p, v in zip(params, res.x, strict=True)}},
        "keys": list(KEYS),
        "loss": "soft_l1 on log(simulated/published), f_scale 0.1, with the training fit's weak prior on each parameter",
        "residuals": [{k: r[k] for k in ("id", "metric", "published", "simulated", "error")} for r in rows],
    }
    return consts, record
