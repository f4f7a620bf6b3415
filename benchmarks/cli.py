#!/usr/bin/env python
"""Command-line start-up: wall-clock seconds of whole `shardwise` calls a user types (interpreter start,
imports, data files, the job, the output), the median of `--runs` runs each.

    python benchmarks/cli.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS = [
    ("--help", ["--help"]),
    ("train estimate (default example)", ["train", "estimate", "examples/llama3.1-70b-64xh100.yaml"]),
    ("train estimate --format json", ["train", "estimate", "examples/llama3.1-70b-64xh100.yaml", "--format", "json"]),
    ("schedule simulate zbv pp 32 x 256, json", ["schedule", "simulate", "--schedule", "zbv", "--pp", "32",
                                                  "--microbatches", "256", "--format", "json"]),
    ("the same with --timeline", ["schedule", "simulate", "--schedule", "zbv", "--pp", "32", "--microbatches", "256",
                                  "--format", "json", "--timeline"]),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    for label, argv in CALLS:
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "shardwise.cli.main", *argv], cwd=ROOT, capture_output=True)
            times.append(time.perf_counter() - t)
            if out.returncode != 0:
                sys.exit(f"{label}: exit {out.returncode}: {out.stderr.decode()[-300:]}")
        print(f"{label:45s} median {statistics.median(times):6.3f} s  (min {min(times):.3f}, {len(out.stdout):,} bytes out)")


if __name__ == "__main__":
    main()
