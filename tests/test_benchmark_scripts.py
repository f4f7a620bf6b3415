"""The estimate benchmark runs against the current cost model (it clears the model's caches by name, so a
renamed cache breaks it; its figures are not asserted: tests never time anything)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_estimate_benchmark_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "estimate.py"), "--seconds", "0.05"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "cold, no caches" in out.stdout and "estimates/s" in out.stdout
