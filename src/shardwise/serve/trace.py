"""Request traces in the layout of the public Azure LLM inference traces.

Azure/AzurePublicDataset `AzureLLMInferenceTrace_{code,conv}.csv`: header
``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as ``2023-11-16 18:15:46.6805900``.
Numeric timestamps (seconds) are accepted too, and the column names are matched loosely
(timestamp/time/arrival_s; context/input/prompt tokens; generated/output tokens).
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import numpy as np

from shardwise.errors import ShardwiseError

_TIME = ("timestamp", "time", "arrival_s", "arrival", "time_s")
_INPUT = ("contexttokens", "context_tokens", "input_tokens", "input_len", "prompt_tokens", "inputtokens")
_OUTPUT = ("generatedtokens", "generated_tokens", "output_tokens", "output_len", "completion_tokens", "outputtokens")


def _column(header: list[str], names: tuple[str, ...], what: str, path: Path) -> int:
    keys = [h.strip().lower() for h in header]
    for name in names:
        if name in keys:
            return keys.index(name)
    raise ShardwiseError(
        f"{path}: no {what} column in header {header}; expected one of {', '.join(names)} "
        "(Azure layout: TIMESTAMP,ContextTokens,GeneratedTokens)"
    )


def parse_timestamp(text: str) -> float:
    """Seconds: a number, or an ISO date-time (fractional seconds beyond microseconds are cut)."""
    s = text.strip()
    try:
        return float(s)
    except ValueError:
        pass
    if "." in s:
        head, frac = s.rsplit(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        tail = frac[len(digits):]
        s = f"{head}.{digits[:6]}{tail}"
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send time s, prompt tokens, output tokens) per row, sorted by time; rows are checked one by one."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ShardwiseError(f"trace file not found: {p}")
    try:
        with open(p, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise ShardwiseError(f"cannot read trace {p}: {exc}") from None
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise ShardwiseError(f"trace {p} is empty; it needs a header TIMESTAMP,ContextTokens,GeneratedTokens and one row per request")
    header = rows[0]
    ti, ii, oi = (_column(header, names, what, p) for names, what in ((_TIME, "timestamp"), (_INPUT, "input-token"), (_OUTPUT, "output-token")))
    body = rows[1:]
    if not body:
        raise ShardwiseError(f"trace {p} has a header but no requests")
    n = len(body)
    t = np.empty(n)
    inp = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    width = max(ti, ii, oi) + 1
    for k, row in enumerate(body):
        line = k + 2
        if len(row) < width:
            raise ShardwiseError(f"{p} line {line}: expected {len(header)} columns, got {len(row)}: {','.join(row)}")
        try:
            t[k] = parse_timestamp(row[ti])
        except ValueError:
            raise ShardwiseError(f"{p} line {line}: bad timestamp {row[ti]!r}; use seconds or 'YYYY-MM-DD HH:MM:SS.ffffff'") from None
        for arr, col, what in ((inp, ii, "input"), (out, oi, "output")):
            try:
                value = float(row[col])
            except ValueError:
                raise ShardwiseError(f"{p} line {line}: {what} tokens must be a whole number, got {row[col]!r}") from None
            if value != int(value) or value < 0:
                raise ShardwiseError(f"{p} line {line}: {what} tokens must be a non-negative whole number, got {row[col]!r}")
            arr[k] = int(value)
    if np.any(inp < 1):
        bad = int(np.argmax(inp < 1)) + 2
        raise ShardwiseError(f"{p} line {bad}: a request needs at least 1 input token")
    out = np.maximum(out, 1)  # a request always returns at least one token (Azure rows with 0 are refusals)
    order = np.argsort(t, kind="stable")
    return t[order], inp[order], out[order]
