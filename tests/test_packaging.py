"""The wheel ships py.typed (PEP 561), so type checkers read shardwise's annotations."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_py_typed(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                          str(ROOT)], capture_output=True, text=True)
    if out.returncode:
        pytest.skip(f"could not build a wheel here: {out.stderr.strip().splitlines()[-1:]}")
    wheel = next(tmp_path.glob("shardwise-*.whl"))
    assert "shardwise/py.typed" in zipfile.ZipFile(wheel).namelist()
