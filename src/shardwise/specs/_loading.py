"""Reading the package's data files and user YAML/JSON/CSV files with errors a user can act on.

A user's file is read as UTF-8 text (:func:`read_text_file`), parsed, and checked for what a parser
accepts but no job needs (:func:`check_document`): nesting deeper than ``MAX_DOCUMENT_DEPTH``, YAML
aliases that expand to more than ``MAX_DOCUMENT_VALUES`` values (an "anchor bomb"), NaN, and numbers
beyond ``MAX_NUMBER``. Pydantic errors become one line per field (:func:`format_validation_error`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from shardwise.errors import ShardwiseError, clip, shorten
from shardwise.limits import HOW_TO_PROCEED, MAX_DOCUMENT_DEPTH, MAX_NUMBER

M = TypeVar("M", bound=BaseModel)

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, and bounds its nesting depth

#: Values (after expanding YAML aliases) a job document may hold; real job files hold under 100.
MAX_DOCUMENT_VALUES = 100_000


def data_path(name: str) -> Path:
    """Path of a file shipped in ``shardwise/data``."""
    return Path(str(resources.files("shardwise") / "data" / name))


@lru_cache(maxsize=32)
def load_yaml(path: Path) -> Any:
    """Load a packaged YAML data file (cached: these never change at run time)."""
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_YAML_LOADER)  # libyaml: ~7x faster than the pure-Python loader


def display_path(path: str | Path) -> str:
    """A path as echoed in a message (shortened when absurdly long)."""
    text = str(path)
    return text if len(text) <= 120 else shorten(text)


def path_exists(path: str | Path) -> bool:
    """Whether a user's path names something; a name no file system accepts (too long, a NUL byte) does
    not (``Path.exists`` raises OSError or ValueError on those)."""
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):
        return False


def read_text_file(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of a user's file; a missing, unreadable or binary file is one ShardwiseError."""
    p = Path(path).expanduser()
    shown = display_path(p)
    try:
        exists, is_dir = p.exists(), p.is_dir()
        data = p.read_bytes() if exists and not is_dir else b""
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise ShardwiseError(f"cannot read {what} {shown}: {clip(getattr(exc, 'strerror', None) or exc, 120)}") from None
    if not exists:
        raise ShardwiseError(f"{what} not found: {shown}")
    if is_dir:
        raise ShardwiseError(f"{shown} is a directory; give a {what}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ShardwiseError(
            f"{shown} is not a UTF-8 text {what} (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8 text"
        ) from None


def _field(path: tuple[Any, ...]) -> str:
    return ".".join(str(k) if not isinstance(k, int) else f"[{k}]" for k in path).replace(".[", "[") or "document"


def check_document(doc: Any, where: str = "") -> Any:
    """Reject what parses but no job holds; returns ``doc``. Shared values (YAML aliases) are visited once
    but counted at every use, so an alias bomb is caught without being expanded."""
    sizes: dict[int, int] = {}

    def visit(node: Any, path: tuple[Any, ...], depth: int) -> int:
        if depth > MAX_DOCUMENT_DEPTH:
            raise ShardwiseError(
                f"{where or 'the document'} is nested deeper than {MAX_DOCUMENT_DEPTH} levels (at {clip(_field(path[:4]), 60)}...); "
                "a job file needs at most a few levels"
            )
        if isinstance(node, bool) or node is None or isinstance(node, str):
            return 1
        if isinstance(node, int | float):
            if isinstance(node, float) and math.isnan(node):
                raise ShardwiseError(f"{_field(path)}: NaN is not a number; give a finite value")
            if math.isfinite(node) and abs(node) > MAX_NUMBER:
                raise ShardwiseError(f"{_field(path)}: {shorten(node)} is out of range (at most {MAX_NUMBER:.0e} in magnitude)")
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a self-referencing alias counts once
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        total = 1
        for k, v in items:
            if isinstance(node, dict) and not isinstance(k, str | int | float | bool) and k is not None:
                raise ShardwiseError(f"{_field(path)}: keys must be plain names, got {shorten(k)}")
            total += visit(v, (*path, k), depth + 1)
            if total > MAX_DOCUMENT_VALUES:
                raise ShardwiseError(
                    f"{where or 'the document'} expands to more than {MAX_DOCUMENT_VALUES:,} values (YAML aliases?); "
                    "a job file holds a few dozen"
                )
        sizes[key] = total
        return total

    visit(doc, (), 0)
    return doc


def read_document(path: str | Path) -> Any:
    """Parse a user's YAML or JSON file; any problem is a ShardwiseError naming the file."""
    p = Path(path).expanduser()
    shown = display_path(p)
    text = read_text_file(p, "YAML or JSON file")
    try:
        if p.suffix.lower() == ".json":
            doc = json.loads(text)
        else:
            doc = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader (libyaml's when present)
    except json.JSONDecodeError as exc:
        raise ShardwiseError(f"{shown}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        if "nesting depth" in str(exc):
            raise ShardwiseError(f"{shown} is nested too deeply to parse; a job file needs at most a few levels") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ShardwiseError(f"{shown}: malformed YAML{where}: {clip(problem, 120)}") from None
    except RecursionError:
        raise ShardwiseError(f"{shown} is nested too deeply to parse; a job file needs at most a few levels") from None
    except (ValueError, OverflowError) as exc:  # e.g. a 5,000-digit integer in JSON
        raise ShardwiseError(f"{shown}: {clip(exc, 120)}") from None
    return check_document(doc, shown)


def read_record_list(path: str | Path) -> list[Any]:
    """A calibration data file: a JSON (or YAML) list of records."""
    data = read_document(path)
    if not isinstance(data, list):
        raise ShardwiseError(f"{path}: expected a JSON list of records")
    return data


def _union_tag(part: Any) -> bool:
    """Pydantic names the member a union error comes from in the location ('str', 'dict[str,any]', ...)."""
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool", "dict", "list", "none"})


def format_validation_error(exc: ValidationError, where: str = "") -> str:
    """One short clause per offending field, prefixed with its dotted path (``training.seq_len: ...``).

    Union members are not listed separately (one clause per field), echoed values are shortened, and at
    most three fields are named."""
    clauses: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        loc = [x for x in err["loc"] if x != "__root__" and not _union_tag(x)]
        dotted = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in loc).replace(".[", "[")
        field = f"{where}.{dotted}" if where and dotted else (where or dotted or "value")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the README for the job file fields)"
        elif err["type"] in ("less_than_equal", "less_than") and loc and loc[-1] in HOW_TO_PROCEED:
            bound = err.get("ctx", {}).get("le", err.get("ctx", {}).get("lt"))
            msg = f"{shorten(err.get('input'))} exceeds the limit of {bound:,} (see Limits in the README); {HOW_TO_PROCEED[loc[-1]]}"
        if field in clauses:  # a union: several members failed for one field
            if msg not in clauses[field]:
                clauses[field] += f", or {msg[0].lower()}{msg[1:]}"
            continue
        clauses[field] = msg
    parts = [f"{clip(f, 100)}: {clip(m, 200)}" for f, m in clauses.items()]
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def parse_block(cls: type[M], data: Any, where: str) -> M:
    """Validate one block of a job file; pydantic errors become one ShardwiseError line."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ShardwiseError(f"{where or 'the job'} must be a mapping, got {type(data).__name__}: {shorten(data)}")
    try:
        return cls(**data)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, where)) from None
