#!/usr/bin/env python
"""Fit the network model's constants on the nccl-tests / rccl-tests / DeepEP records.

    python scripts/fit_network.py [--data PATH] [--dry-run] [--plot docs/img/comm-busbw.png]

Fits every constant of shardwise.cost.comm_fit.PARAMS on all bandwidth rows of at least 1 MiB and
the 8-byte latency rows (soft-L1 on log ratios), runs leave-one-source-out cross-validation (each
source scored by constants fitted on the others, from the defaults) and writes
src/shardwise/data/network_constants.json with the fitted values, the constants the rows do not
determine and the held-out error per source. The fitting logic lives in shardwise.cost.comm_fit, so
scripts/fit_constants.py can call it too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shardwise.cost.comm_fit import all_cases, constants_json, fit, load_records, run_validation

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shardwise" / "data" / "network_constants.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="comm-measurements.json (default: the packaged copy)")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write")
    ap.add_argument("--plot", default=None, help="also draw predicted vs measured bus bandwidth to this PNG")
    args = ap.parse_args()

    cases = all_cases(load_records(args.data))[0]
    result = fit(cases)
    validation = run_validation(args.data, result.constants)
    out = constants_json(result, validation["held_out"])
    print(json.dumps(out, indent=2))
    if not args.dry_run:
        OUT.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    if args.plot:
        from shardwise.cost.comm_plot import plot_busbw

        plot_busbw(validation, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
