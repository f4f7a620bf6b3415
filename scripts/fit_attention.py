#!/usr/bin/env python
"""Fit the attention kernel model's constants on the kernel benchmarks.

    python scripts/fit_attention.py [--data PATH] [--dry-run]

Fits shardwise.calibration.attention_fit on src/shardwise/data/calibration/attention-kernels.yaml (the
FlashAttention-2/-3 papers' kernel figures), runs leave-one-source-out cross-validation and writes
src/shardwise/data/attention_constants.json: per GPU family the kernels' forward asymptotes (ComputeConstants
attention_efficiency, fa3_attention_efficiency, cudnn_attention_efficiency) and per kernel the tile-loop constants (AttentionShape).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from shardwise.calibration.attention_fit import errors, fit, leave_one_source_out, load_cases

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shardwise" / "data" / "attention_constants.json"
ETA_FIELD = {"fa2": "attention_efficiency", "fa3": "fa3_attention_efficiency", "cudnn": "cudnn_attention_efficiency"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="attention-kernels.yaml (default: the packaged copy)")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write")
    args = ap.parse_args()
    cases = load_cases(args.data)
    model = fit(cases)
    errs = errors(model, cases)
    per_gpu: dict[str, dict[str, float]] = {}
    for (family, kernel), eta in sorted(model.eta.items()):
        per_gpu.setdefault(family, {})[ETA_FIELD[kernel]] = round(eta, 5)
    out = {
        "per_gpu": per_gpu,
        "shapes": {k: {f: round(v, 5) for f, v in asdict(s).items()} for k, s in model.shapes.items()},
        "fit": {
            "script": "scripts/fit_attention.py",
            "data": "calibration/attention-kernels.yaml",
            "rows": len(cases),
            "mean_abs_error": round(float(np.mean([abs(e) for _, e in errs])), 4),
            "held_out_mae": {k: round(v, 4) for k, v in leave_one_source_out(cases).items()},
        },
    }
    print(json.dumps(out, indent=2))
    for c, e in errs:
        print(f"  {c.source:12s} {c.gpu:10s} {c.kernel} {c.passes:7s} {'causal' if c.causal else 'full  '} "
              f"d{c.head_dim:<3d} s{c.seq_len:<6d} measured {c.measured_tflops:6.0f} model {c.measured_tflops * (1 + e):6.0f} ({e:+.1%})")
    if not args.dry_run:
        OUT.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
