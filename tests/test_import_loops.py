"""No new two-module import loops. A loop hidden by a function-level import still ties two modules together:
each remaining one is listed here with why it stays, and the list may only shrink."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: pairs that still import each other (one side inside a function), and why
KNOWN = {
    ("shardwise.pipeline.auto", "shardwise.pipeline.registry"): "auto searches the registry; the registry lists auto",
}


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


def test_no_new_import_loops():
    new = loops() - set(KNOWN)
    assert not new, f"modules that import each other: {sorted(new)}; move the shared part to a third module"


def test_the_known_list_only_names_loops_that_remain():
    gone = set(KNOWN) - loops()
    assert not gone, f"no longer loops, delete from KNOWN: {sorted(gone)}"
