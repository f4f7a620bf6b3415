"""Refresh the vendored calibration data from the shared folder, leaving out the reserved records.

    python scripts/refresh_calibration.py [--shared ../shared/calibration]

Reserved for independent evaluation (never read, transcribed or fitted here): the Zero Bubble paper's
14.6B and 28.3B rows. The communication and serving records are copied whole (the serving ones are
turned into serve jobs by shardwise.serve.measurements).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

RESERVED = re.compile(r"^zb_.*(14\.6B|28\.3B)")
TARGET = Path(__file__).resolve().parents[1] / "src" / "shardwise" / "data" / "calibration"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "calibration"))
    args = parser.parse_args()
    shared = Path(args.shared)
    records = json.loads((shared / "training-measurements.json").read_text())
    kept = [r for r in records if not RESERVED.match(r["id"])]
    (TARGET / "training-measurements.json").write_text(json.dumps(kept, indent=1, ensure_ascii=False))
    copied = []
    for name in ("comm-measurements.json", "serving-measurements.json"):
        if (shared / name).exists():
            shutil.copy(shared / name, TARGET / name)
            copied.append(name)
    print(f"training: {len(kept)} of {len(records)} records (reserved rows left out); copied: {', '.join(copied) or 'nothing'}")


if __name__ == "__main__":
    main()
