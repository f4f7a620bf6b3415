"""Docstrings say only true things about the code base: every dotted ``shardwise.*`` name they mention
imports, and every repository file they name exists."""

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "shardwise"
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                  *(ROOT / "tests").rglob("*.py")])

DOTTED = re.compile(r"\bshardwise(?:\.[A-Za-z_]\w*)+")
# a path under a top-level folder of the repository (data/ is the package's), or a markdown file by name
FILE = re.compile(r"(?<![\w/.-])((?:docs|scripts|benchmarks|tests|examples|data|src|schemas)/[\w./*-]*[\w*]|[\w-]+\.md)\b")

# A file of another repository is named after it ("NVIDIA/nccl src/graph/tuning.cc"); this one is also
# named alone once the repository has been named nearby.
EXTERNAL = {"PERFORMANCE.md"}  # NVIDIA/nccl-tests doc/PERFORMANCE.md
REPOSITORY_BEFORE = re.compile(r"\b[\w.-]+/[\w.-]+\s+$")
# Dead references in code another change owns (the cost-model rewrite); remove an entry when it is fixed.
KNOWN_DEAD = {
    ("src/shardwise/cost/layer.py", "shardwise.cost.step"),
    ("src/shardwise/cost/flops.py", "DESIGN.md"),
}


def _docstrings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc


def _imports(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _exists(ref: str) -> bool:
    if "*" in ref:
        return any(ROOT.glob(ref)) or any(PACKAGE.glob(ref))
    if ref.endswith(".md") and "/" not in ref:
        return (ROOT / ref).exists() or (ROOT / "docs" / ref).exists()
    return (ROOT / ref).exists() or (ref.startswith("data/") and (PACKAGE / ref).exists())


def _dead(check, pattern):
    found = []
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        for line, doc in _docstrings(path):
            for match in pattern.finditer(doc):
                ref = match.group(1) if match.groups() else match.group(0)
                external = ref in EXTERNAL or REPOSITORY_BEFORE.search(doc[max(0, match.start() - 60):match.start()])
                if (rel, ref) not in KNOWN_DEAD and not external and not check(ref):
                    found.append(f"{rel}:{line}: {ref}")
    return found


def test_every_dotted_shardwise_name_in_a_docstring_imports():
    assert not _dead(_imports, DOTTED)


def test_every_repository_file_a_docstring_names_exists():
    assert not _dead(_exists, FILE)


@pytest.mark.parametrize("ref, ok", [("shardwise.specs.model.ModelSpec", True), ("shardwise.specs.model.Nope", False),
                                     ("shardwise.nowhere", False)])
def test_the_import_check_can_fail(ref, ok):
    assert _imports(ref) is ok


def test_the_file_check_can_fail():
    assert _exists("docs/serving.md") and _exists("data/gpus.yaml") and _exists("README.md")
    assert not _exists("docs/nowhere.md") and not _exists("serving-formulas.md")
