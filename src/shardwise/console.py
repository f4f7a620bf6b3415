"""What every command prints through: one rich console (full terminal width, or 160 columns when output
is piped) and one JSON writer that only ever writes strict JSON."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console


def make_console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=160)


def _finite(node: Any) -> Any:
    """`node` with numpy scalars as Python numbers and every NaN/±inf as None (null): RFC 8259 has no
    NaN or Infinity, and `json.dumps` would otherwise write them."""
    if isinstance(node, dict):
        return {str(k): _finite(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_finite(v) for v in node]
    if hasattr(node, "item") and callable(node.item) and getattr(node, "ndim", 1) == 0:  # numpy scalar
        node = node.item()
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return node


def json_text(payload: Any, indent: int = 2) -> str:
    """Strict JSON (no NaN/Infinity literals: non-finite numbers become null)."""
    return json.dumps(_finite(payload), indent=indent, allow_nan=False, default=float)


def echo_json(payload: Any, indent: int = 2) -> None:
    print(json_text(payload, indent))
