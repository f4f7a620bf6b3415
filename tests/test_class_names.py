"""One class per name across the package: a reader who meets `SimResult` should not have to ask which."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"


def shared_names() -> dict[str, set[str]]:
    where = defaultdict(set)
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].add(path.relative_to(SRC).as_posix())
    return {name: files for name, files in where.items() if len(files) > 1}


def test_no_class_name_is_defined_twice():
    shared = shared_names()
    assert not shared, f"class names defined in more than one module: {shared}; give each its own name"
