"""Fit serving's constants on the `fit` rows of data/serving_measurements.yaml.

Fitted: per GPU family (A100, H100) the decode memory-bandwidth efficiency and the prefill compute
efficiency; for the engine the per-iteration overhead, the per-sequence overhead, the API-server
latency before a request reaches the scheduler, and the latency of one TP all-reduce. Each candidate
set of constants re-simulates every fit record; the residuals are log(simulated / published) of the
median TTFT, the median TPOT and the offline throughput, minimised with a robust (soft-L1) loss so no
single row dominates. Writes data/serving_constants.json with the fit residuals.

    .venv/bin/python scripts/fit_serving_constants.py [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.optimize import least_squares

from shardwise.serve.constants import CONSTANTS_FILE, ServingConstants
from shardwise.serve.validate import run_validation
from shardwise.specs._loading import data_path

FAMILIES = ("A100-80GB", "H100-SXM")
# name, start, lower, upper, scale
PARAMS = [
    *[(f"{fam}.memory_efficiency", 0.72, 0.4, 0.95, 0.1) for fam in FAMILIES],
    *[(f"{fam}.compute_efficiency", 0.60, 0.25, 0.9, 0.1) for fam in FAMILIES],
    ("step_overhead_s", 1.5e-3, 1e-4, 8e-3, 1e-3),
    ("per_seq_overhead_s", 10e-6, 0.0, 60e-6, 1e-5),
    ("frontend_s", 15e-3, 0.0, 60e-3, 1e-2),
    ("allreduce_latency_s", 8e-6, 2e-6, 60e-6, 1e-5),
]
KEYS = ("ttft_median_ms", "tpot_median_ms", "request_throughput")


def constants_for(x: np.ndarray) -> ServingConstants:
    scalars: dict[str, float] = {}
    families: dict[str, dict[str, float]] = {}
    for (name, *_), value in zip(PARAMS, x, strict=True):
        if "." in name:
            fam, field = name.split(".")
            families.setdefault(fam, {})[field] = float(value)
        else:
            scalars[name] = float(value)
    return ServingConstants().with_updates(scalars, families)


def residuals(x: np.ndarray) -> np.ndarray:
    rows = run_validation(split="fit", constants=constants_for(x), keys=KEYS)
    return np.array([np.log1p(r["error"]) for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the fit, do not write the file")
    args = ap.parse_args()
    x0 = np.array([p[1] for p in PARAMS])
    lo, hi = np.array([p[2] for p in PARAMS]), np.array([p[3] for p in PARAMS])
    t0 = time.perf_counter()
    fit = least_squares(residuals, x0, bounds=(lo, hi), x_scale=np.array([p[4] for p in PARAMS]),
                        diff_step=0.03, loss="soft_l1", f_scale=0.1, max_nfev=60)
    c = constants_for(fit.x)
    rows = run_validation(split="fit", constants=c, keys=KEYS)
    print(f"fit in {time.perf_counter() - t0:.0f} s, {fit.nfev} evaluations; status: {fit.message}")
    for (name, *_), v in zip(PARAMS, fit.x, strict=True):
        print(f"  {name:32s} {v:.6g}")
    for r in rows:
        print(f"  {r['id']:36s} {r['metric']:20s} published {r['published']:9.2f} simulated {r['simulated']:9.2f} {r['error']:+.1%}")
    if args.dry_run:
        return
    out = {
        "about": "written by scripts/fit_serving_constants.py from the fit rows of serving_measurements.yaml; do not edit by hand",
        "constants": c.to_dict(),
        "fit": {"keys": list(KEYS), "loss": "soft_l1 on log(simulated/published), f_scale 0.1",
                "residuals": [{k: r[k] for k in ("id", "metric", "published", "simulated", "error")} for r in rows]},
    }
    path = data_path(CONSTANTS_FILE)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
