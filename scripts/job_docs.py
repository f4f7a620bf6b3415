"""Regenerate the job-file tables in the README and the docs from the pydantic models.

    .venv/bin/python scripts/job_docs.py          # rewrite the tables
    .venv/bin/python scripts/job_docs.py --check  # exit 1 if a table is out of date

The tables sit between `<!-- job-docs: KEY -->` and `<!-- /job-docs -->`; shardwise.job_docs renders them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardwise.job_docs import refresh_files

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files")
    args = parser.parse_args()
    changed = refresh_files(ROOT, write=not args.check)
    for path in changed:
        print(f"{'out of date' if args.check else 'rewrote'}: {path.relative_to(ROOT)}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
