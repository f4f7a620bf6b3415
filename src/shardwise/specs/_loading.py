"""Reading the package's data files and user YAML/JSON with errors a user can act on."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from shardwise.errors import ShardwiseError


def data_path(name: str) -> Path:
    """Path of a file shipped in ``shardwise/data``."""
    return Path(str(resources.files("shardwise") / "data" / name))


@lru_cache(maxsize=32)
def load_yaml(path: Path) -> Any:
    """Load a packaged YAML data file (cached: these never change at run time)."""
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def read_document(path: str | Path) -> Any:
    """Parse a user's YAML or JSON file; any problem is a ShardwiseError naming the file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ShardwiseError(f"file not found: {p}")
    if p.is_dir():
        raise ShardwiseError(f"{p} is a directory; give a YAML or JSON file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShardwiseError(f"cannot read {p}: {exc}") from None
    try:
        if p.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ShardwiseError(f"{p}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ShardwiseError(f"{p}: malformed YAML{where}: {problem}") from None


def format_validation_error(exc: ValidationError, where: str) -> str:
    """One line per pydantic error, prefixed with the dotted field path."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"] if x != "__root__")
        field = f"{where}.{loc}" if loc else where
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the README for the job file fields)"
        parts.append(f"{field}: {msg}")
    return "; ".join(parts)
