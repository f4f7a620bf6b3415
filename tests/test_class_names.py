"""One class per name across the package: a reader who meets `SimResult` should not have to ask which. The
pairs that remain are listed with where they live, and the list may only shrink."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"

#: class name -> the modules that still define it
KNOWN = {
    "SimResult": {"pipeline/simulate.py", "serve/simulate.py"},
    "PlanResult": {"train/planner.py", "serve/planner.py"},
    "Option": {"serve/planner.py", "train/hetero_plan.py"},
}


def shared_names() -> dict[str, set[str]]:
    where = defaultdict(set)
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].add(path.relative_to(SRC).as_posix())
    return {name: files for name, files in where.items() if len(files) > 1}


def test_no_new_class_name_is_defined_twice():
    shared = shared_names()
    new = {name: files for name, files in shared.items() if KNOWN.get(name) != files}
    assert not new, f"class names defined in more than one module: {new}; give each its own name"


def test_the_known_list_only_names_what_remains():
    gone = set(KNOWN) - set(shared_names())
    assert not gone, f"no longer shared, delete from KNOWN: {sorted(gone)}"
