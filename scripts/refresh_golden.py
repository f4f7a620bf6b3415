"""Rewrite the golden numbers (tests/golden/*.json) from what the tool computes now.

Run it after an intended change of a number (a re-fit of the constants, a corrected formula), then review
``git diff tests/golden`` and commit the files with the change that moved them. Deterministic (seeded
workloads, no timing) and fast (a few seconds); the cases are in ``tests/golden/cases.py``.

    .venv/bin/python scripts/refresh_golden.py             # every file
    .venv/bin/python scripts/refresh_golden.py plans.json  # one file
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.golden.cases import FILES, GOLDEN, compute


def write(file: str) -> Path:
    path = GOLDEN / file
    path.write_text(json.dumps(compute(file), indent=1, sort_keys=True) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help=f"golden files to rewrite: {', '.join(FILES)} (default: all)")
    files = ap.parse_args().files or list(FILES)
    if unknown := [f for f in files if f not in FILES]:
        ap.error(f"no golden file {', '.join(unknown)}; choose from {', '.join(FILES)}")
    for file in files:
        print(f"wrote {write(file).relative_to(GOLDEN.parents[1])}")


if __name__ == "__main__":
    main()
