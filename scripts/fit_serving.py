"""Fit the serving constants on the public serving runs and cross-validate them source by source.

    .venv/bin/python scripts/fit_serving.py             # fit + leave-one-source-out, writes the data file
    .venv/bin/python scripts/fit_serving.py --no-cv     # fit only (keeps the stored cross-validation)
    .venv/bin/python scripts/fit_serving.py --dry-run   # print, write nothing
    .venv/bin/python scripts/fit_serving.py --cv-only   # the leave-one-source-out only, on the shipped constants
                                                        # (after scripts/fit_constants.py, which fits the serving
                                                        # constants with the training ones but not their CV)

Fits (shardwise.calibration.serving_fit): the engines' per-iteration and per-sequence CPU overheads,
the API-server latency of vLLM and of SGLang, and the HBM streaming efficiency of each GPU family with
serving runs, on the device constants of the shipped training fit. Writes into
src/shardwise/data/fitted_constants.json the section `serving` (constants, the fit's record with which
parameters the data determine, and `cv`: each source's rows predicted by constants fitted without that
source, which `shardwise serve validate --cv` prints) and each family's `memory_efficiency` under
`per_gpu`. The training fit (scripts/fit_constants.py) is not rerun: its GEMM and attention
efficiencies are taken as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from shardwise.calibration.serving_fit import FAMILIES, fit_serving, leave_one_source_out
from shardwise.cost.constants import FITTED_FILE, Constants, default_constants, fitted_data
from shardwise.serve.validate import per_source, verdict
from shardwise.specs._loading import data_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    parser.add_argument("--no-cv", action="store_true", help="skip the leave-one-source-out refits")
    parser.add_argument("--cv-only", action="store_true", help="keep the shipped constants; only redo the "
                        "leave-one-source-out refits from them")
    parser.add_argument("--max-nfev", type=int, default=60, help="function evaluations of the full fit")
    parser.add_argument("--cv-nfev", type=int, default=30, help="function evaluations of each held-out refit")
    args = parser.parse_args()
    t0 = time.time()
    device = default_constants()
    if args.cv_only:
        data = fitted_data()
        record = data["serving"]["fit"]
        data["serving"]["cv"] = _cv(device, record, args.cv_nfev, t0)
        if not args.dry_run:
            data_path(FITTED_FILE).write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote the cross-validation into {data_path(FITTED_FILE)} ({time.time() - t0:.0f} s)")
        return
    consts, record = fit_serving(device, max_nfev=args.max_nfev)
    print(f"full fit ({time.time() - t0:.0f} s) on sources {', '.join(record['sources'])}:")
    for name, value in record["parameters"].items():
        d = record["determined"].get(name, {"verdict": "kept", "sources": []})
        print(f"  {name:32s} {value:.6g}   {d['verdict']}: {', '.join(d['sources'])}")
    data = fitted_data()
    out = dict(data)
    per_gpu = {k: dict(v) for k, v in data.get("per_gpu", {}).items()}
    for fam in FAMILIES:
        per_gpu.setdefault(fam, {})["memory_efficiency"] = record["parameters"][f"{fam}.memory_efficiency"]
    out["per_gpu"] = per_gpu
    serving = {"constants": consts.to_dict(), "fit": {"script": "scripts/fit_serving.py", **record}}
    if args.no_cv:
        if "cv" in data.get("serving", {}):
            serving["cv"] = data["serving"]["cv"]
    else:
        serving["cv"] = _cv(device, record, args.cv_nfev, t0)
    out["serving"] = serving
    if args.dry_run:
        return
    data_path(FITTED_FILE).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {data_path(FITTED_FILE)} ({time.time() - t0:.0f} s)")


def _cv(device: Constants, record: dict, cv_nfev: int, t0: float) -> dict:
    """Each source's rows predicted by constants refitted without it (from the full fit's values)."""

    def progress(source: str) -> None:
        print(f"  holding out {source} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)

    folds = leave_one_source_out(device, record, cv_nfev, progress)
    rows = [r for fold in folds.values() for r in fold["rows"]]
    by_source = per_source(rows)
    cv = {"method": "leave one source out; refit from the full fit", "folds": folds, "per_source": by_source,
          "verdict": verdict(by_source)}
    for source, s in by_source.items():
        print(f"  {source:28s} {s['figures']:3d} figures  held-out mean |error| {s['mape']:6.1%}  largest {s['max']:6.1%}")
    v = cv["verdict"]
    print(f"  {v['within_bar']}/{v['sources']} sources within 15%, worst {v['worst']:.1%}: {'meets' if v['met'] else 'misses'} the bar")
    return cv


if __name__ == "__main__":
    main()
