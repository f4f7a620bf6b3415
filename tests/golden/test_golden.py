"""Golden numbers: the figures the tool computed when the files were last refreshed (tests/golden/*.json)
must still come out, to a relative 1e-9 (float round-off across platforms, nothing more). A refactor
moves code, not numbers; an intended change of a number is made visible by refreshing the files and
committing their diff."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.golden.cases import FILES, GOLDEN

REL = 1e-9
REFRESH = ".venv/bin/python scripts/refresh_golden.py"


def differences(golden: Any, now: Any, path: str = "") -> list[str]:
    """Where ``now`` departs from ``golden``: numbers beyond REL, other values unequal, keys or list
    entries missing. Keys ``now`` has in addition are not differences (new outputs are not changes)."""
    if isinstance(golden, dict):
        if not isinstance(now, dict):
            return [f"{path}: was a mapping, now {now!r}"]
        out = []
        for key, value in golden.items():
            out += differences(value, now[key], f"{path}.{key}") if key in now else [f"{path}.{key}: missing"]
        return out
    if isinstance(golden, list):
        if not isinstance(now, list) or len(now) != len(golden):
            return [f"{path}: was {len(golden)} entries, now {now!r}"[:300]]
        return [d for i, (g, n) in enumerate(zip(golden, now, strict=True)) for d in differences(g, n, f"{path}[{i}]")]
    numeric = isinstance(golden, int | float) and not isinstance(golden, bool)
    if numeric and isinstance(now, int | float) and not isinstance(now, bool):
        return [] if math.isclose(golden, now, rel_tol=REL, abs_tol=1e-12) else [f"{path}: {golden!r} -> {now!r}"]
    same = golden == now and isinstance(golden, bool) == isinstance(now, bool)
    return [] if same else [f"{path}: {golden!r} -> {now!r}"]


CASES = [(file, name) for file, (cases, _) in FILES.items() for name in cases]


@pytest.mark.parametrize("file,name", CASES, ids=[f"{f.removesuffix('.json')}:{n}" for f, n in CASES])
def test_golden_numbers_unchanged(file, name):
    golden = json.loads((GOLDEN / file).read_text())
    assert name in golden, f"tests/golden/{file} has no case {name!r}: run `{REFRESH} {file}`"
    cases, numbers = FILES[file]
    diff = differences(golden[name], json.loads(json.dumps(numbers(cases[name]))), name)
    assert not diff, (f"{len(diff)} golden number(s) of tests/golden/{file} changed:\n  " + "\n  ".join(diff[:20])
                      + f"\nIf the change is intended, run `{REFRESH}` and commit the diff of tests/golden/.")


def test_every_golden_case_is_computed():
    for file, (cases, _) in FILES.items():
        assert set(json.loads((GOLDEN / file).read_text())) == set(cases), f"run `{REFRESH} {file}`"


def test_a_changed_number_is_reported_with_its_path():
    golden = {"a": {"b": [1.0, 2.0]}, "c": "x", "d": True}
    assert differences(golden, {"a": {"b": [1.0, 2.0 * (1 + 1e-12)]}, "c": "x", "d": True, "new": 3}) == []
    assert differences(golden, {"a": {"b": [1.0, 2.001]}, "c": "y"}) == [".a.b[1]: 2.0 -> 2.001", ".c: 'x' -> 'y'",
                                                                        ".d: missing"]
    assert differences({"n": 1}, {"n": True}) == [".n: 1 -> True"]
