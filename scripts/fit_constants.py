#!/usr/bin/env python
"""Fit the cost model's efficiency and overlap constants on the fit split of the calibration data.

    python scripts/fit_constants.py [--data PATH] [--dry-run]

Fit split (shardwise.train.calibration.FIT_SOURCES and FIT_RECORD_IDS): Korthikanti et al. 2022 Table 4
(per-layer forward/backward times of the 22B model on A100: GEMM efficiency, TP backward overlap),
Narayanan et al. 2021 Table 1 (a weak-scaling sweep from h = 2304 to 25600: the size dependence, i.e.
the fixed per-GEMM time), Narayanan et al. 2021 Table 2 ZeRO-3 rows (the ZeRO-3 prefetch overlap) and
the two 8K-sequence rows of Llama 3 Table 4 (H100 GEMM efficiency). Kernel launch cost and memory
efficiency keep their cited values. Every other record is
held out and only reported by `shardwise validate`. Residuals are log(predicted/measured), with a
soft-L1 loss so that no single record dominates. Writes src/shardwise/data/fitted_constants.json.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from shardwise.cost.constants import DEFAULT_FAMILIES, Constants
from shardwise.train.calibration import Skip, record_cases
from shardwise.train.validate import default_data_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shardwise" / "data" / "fitted_constants.json"

# name, initial value, lower, upper
PARAMS = [
    ("a100_gemm_efficiency", 0.70, 0.30, 0.95),
    ("h100_gemm_efficiency", 0.70, 0.30, 0.95),
    ("gemm_overhead_us", 20.0, 5.0, 200.0),  # at least the kernel launch cost
    ("tp_backward_overlap", 0.50, 0.0, 1.0),
    ("zero3_prefetch_overlap", 0.80, 0.0, 1.0),
]


def constants_from(theta: np.ndarray) -> Constants:
    p = dict(zip([n for n, *_ in PARAMS], theta, strict=True))
    base = Constants(families=dict(DEFAULT_FAMILIES))
    compute = replace(base.compute, gemm_overhead_s=p["gemm_overhead_us"] * 1e-6)
    overlap = replace(base.overlap, tp_backward_overlap=p["tp_backward_overlap"], zero3_prefetch_overlap=p["zero3_prefetch_overlap"])
    per_gpu = {
        "A100-80GB": {"gemm_efficiency": p["a100_gemm_efficiency"]},
        "H100-SXM": {"gemm_efficiency": p["h100_gemm_efficiency"]},
    }
    return replace(base, compute=compute, overlap=overlap, per_gpu=per_gpu)


def fit_cases(records: list[dict]) -> list:
    cases = []
    for r in records:
        res = record_cases(r)
        if isinstance(res, Skip):
            continue
        for c in res:
            if c.fit:
                cases.append(c)
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="calibration JSON (default: shared/calibration/training-measurements.json)")
    ap.add_argument("--dry-run", action="store_true", help="print the fit, do not write the constants file")
    args = ap.parse_args()
    path = Path(args.data) if args.data else default_data_path()
    records = json.loads(path.read_text())
    cases = fit_cases(records)

    def residuals(theta: np.ndarray) -> np.ndarray:
        c = constants_from(theta)
        return np.array([math.log(case.predict(c) / case.measured) for case in cases])

    x0 = np.array([v for _, v, _, _ in PARAMS])
    bounds = (np.array([lo for *_, lo, _ in PARAMS]), np.array([hi for *_, hi in PARAMS]))
    result = least_squares(residuals, x0, bounds=bounds, loss="soft_l1", f_scale=0.05, diff_step=1e-3)
    fitted = dict(zip([n for n, *_ in PARAMS], result.x.round(4).tolist(), strict=True))
    res = residuals(result.x)
    print(f"fitted on {len(cases)} figures from {len({c.record_id for c in cases})} records")
    for case, r in zip(cases, res, strict=True):
        print(f"  {case.record_id:42s} {case.metric:14s} measured {case.measured:9.4g}  error {math.expm1(r):+6.1%}")
    print("constants:", json.dumps(fitted, indent=2))
    out = constants_from(result.x).to_dict()
    out["families"] = {}
    out["fit"] = {
        "script": "scripts/fit_constants.py",
        "data": str(path.name),
        "records": sorted({c.record_id for c in cases}),
        "parameters": fitted,
        "mean_abs_log_error": float(np.mean(np.abs(res))),
    }
    if not args.dry_run:
        OUT.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
