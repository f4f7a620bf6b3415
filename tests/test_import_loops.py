"""No two modules import each other: a loop hidden by a function-level import still ties two modules together
(imports under `if TYPE_CHECKING:` are for annotations only and do not count)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports for annotations only, never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    return [n for n in ast.walk(tree) if id(n) not in skip]


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Modules `path` imports at run time; `from package import submodule` imports the submodule (the
    package's __init__ runs first for any submodule, which is no loop of the two)."""
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardwise"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("shardwise"))
    return found & modules


def loops() -> set[tuple[str, str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    imports = {m: _imports(p, set(files)) for m, p in files.items()}
    return {tuple(sorted((a, b))) for a in files for b in imports[a] if b != a and a in imports[b]}


def test_no_two_modules_import_each_other():
    pairs = loops()
    assert not pairs, f"modules that import each other: {sorted(pairs)}; move the shared part to a third module"
