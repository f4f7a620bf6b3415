"""docs/extending.md names only files and modules that exist, and keeps its checklists."""

import re
from pathlib import Path

from tests.test_doc_references import _exists, _imports

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "extending.md").read_text()
CODE = re.findall(r"`([^`\s]+)`", TEXT)


def test_every_file_it_names_exists():
    paths = [c for c in CODE if "/" in c and not c.startswith(("--", "shardwise"))]
    assert len(paths) >= 40
    assert [p for p in paths if not _exists(p.rstrip("/"))] == []


def test_every_shardwise_name_it_uses_imports():
    names = [c.rstrip(".,") for c in CODE if c.startswith("shardwise.") and "*" not in c]
    assert len(names) >= 25
    assert [n for n in names if not _imports(n)] == []


def test_it_has_both_data_flows_and_every_checklist():
    headings = re.findall(r"^#+ (.+)$", TEXT, re.M)
    for wanted in ("How a training estimate is made", "How a serving simulation runs", "A GPU", "A model family",
                   "A pipeline schedule", "A serving scheduler policy", "A calibration source", "An export target"):
        assert any(h.startswith(wanted) for h in headings), wanted
