"""Request traces in the layout of the public Azure LLM inference traces.

Azure/AzurePublicDataset `AzureLLMInferenceTrace_{code,conv}.csv`: header
``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as ``2023-11-16 18:15:46.6805900``.
Numeric timestamps (seconds) are accepted too, and the column names are matched loosely
(timestamp/time/arrival_s; context/input/prompt tokens; generated/output tokens). An optional column
names each row's conversation (session_id, conversation_id, chat_id): its rows are turns whose prompts
repeat the conversation so far, which prefix caching reuses (:mod:`shardwise.serve.prefix_cache`).
"""

from __future__ import annotations

import csv
import io
import math
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from shardwise.errors import ShardwiseError, clip, shorten
from shardwise.limits import MAX_SEQUENCE_TOKENS, MAX_SERVE_REQUESTS
from shardwise.specs._loading import display_path, read_text_file

_TIME = ("timestamp", "time", "arrival_s", "arrival", "time_s")
_INPUT = ("contexttokens", "context_tokens", "input_tokens", "input_len", "prompt_tokens", "inputtokens")
_OUTPUT = ("generatedtokens", "generated_tokens", "output_tokens", "output_len", "completion_tokens", "outputtokens")
_SESSION = ("session_id", "sessionid", "session", "conversation_id", "conversationid", "chat_id")


def _column(header: list[str], names: tuple[str, ...], what: str, path: Path) -> int:
    keys = [h.strip().lower() for h in header]
    for name in names:
        if name in keys:
            return keys.index(name)
    raise ShardwiseError(
        f"{display_path(path)}: no {what} column in header {clip(','.join(header), 120)}; expected one of {', '.join(names)} "
        "(Azure layout: TIMESTAMP,ContextTokens,GeneratedTokens)"
    )


_ISO_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?")


def parse_timestamp(text: str) -> float:
    """Seconds: a number, or an ISO date-time (fractional seconds beyond microseconds are cut; a time without
    a zone is read as UTC, so a trace that crosses a daylight-saving change keeps its gaps)."""
    s = text.strip()
    try:
        value = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"timestamp {s!r} is not finite")
        return value
    if len(s) > 64:
        raise ValueError("timestamp too long")
    if "." in s:
        head, frac = s.rsplit(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        tail = frac[len(digits):]
        s = f"{head}.{digits[:6]}{tail}"
    stamp = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def _columns_at_once(body: list[list[str]], ti: int, ii: int, oi: int) -> tuple[np.ndarray, ...] | None:
    """(times, inputs, outputs) of well-formed rows, converted a column at a time; None if any cell is not
    (a number, or an ISO date-time without a zone; whole token counts within the limit), so that the row
    by row reader finds and names the bad line."""
    width = max(ti, ii, oi) + 1
    if any(len(row) < width for row in body):
        return None
    try:
        counts = np.array([(row[ii], row[oi]) for row in body], dtype=np.float64)
    except ValueError:
        return None
    if not (np.isfinite(counts).all() and (counts >= 0).all() and (counts == np.floor(counts)).all()
            and (counts <= MAX_SEQUENCE_TOKENS).all()):
        return None
    stamps = [row[ti].strip() for row in body]
    try:
        t = np.array(stamps, dtype=np.float64)
    except ValueError:
        if not all(_ISO_NAIVE.fullmatch(x) for x in stamps):
            return None
        try:  # UTC, as parse_timestamp; numpy keeps up to nanoseconds, parse_timestamp cuts at microseconds
            t = np.array(stamps, dtype="datetime64[us]").astype(np.int64) / 1e6
        except ValueError:
            return None
    if not np.isfinite(t).all():
        return None
    return t, counts[:, 0].astype(np.int64), counts[:, 1].astype(np.int64)


def read_trace(path: str | Path, max_rows: int | None = None, sessions: bool = False) -> tuple[np.ndarray | None, ...]:
    """(send time s, prompt tokens, output tokens) per row, sorted by time; rows are checked one by one.
    `max_rows`: read only the first rows of the file (a trace's `num_requests`). With `sessions`, a fourth
    array: each row's conversation number (0, 1, ... in order of first appearance), or None without a
    session column."""
    p = Path(path).expanduser()
    shown = display_path(p)
    text = read_text_file(p, "trace file")
    try:
        rows = []
        for r in csv.reader(io.StringIO(text, newline="")):
            if r and "".join(r).strip():  # some cell is not blank
                rows.append(r)
                if max_rows is not None and len(rows) > max_rows:
                    break
                if len(rows) > MAX_SERVE_REQUESTS + 1:
                    raise ShardwiseError(
                        f"trace {shown} has more than {MAX_SERVE_REQUESTS:,} requests (the most one simulation holds); "
                        "set workload.num_requests to replay its first rows, or split the trace"
                    )
    except csv.Error as exc:
        raise ShardwiseError(f"trace {shown}: malformed CSV: {clip(exc, 120)}") from None
    if not rows:
        raise ShardwiseError(f"trace {shown} is empty; it needs a header TIMESTAMP,ContextTokens,GeneratedTokens and one row per request")
    header = rows[0]
    ti, ii, oi = (_column(header, names, what, p) for names, what in ((_TIME, "timestamp"), (_INPUT, "input-token"), (_OUTPUT, "output-token")))
    body = rows[1:]
    if not body:
        raise ShardwiseError(f"trace {shown} has a header but no requests")
    fast = _columns_at_once(body, ti, ii, oi)
    if fast is not None:
        t, inp, out = fast
    else:
        t, inp, out = _columns_row_by_row(body, header, ti, ii, oi, shown)
    if np.any(inp < 1):
        bad = int(np.argmax(inp < 1)) + 2
        raise ShardwiseError(f"{shown} line {bad}: a request needs at least 1 input token")
    out = np.maximum(out, 1)  # a request always returns at least one token (Azure rows with 0 are refusals)
    order = np.argsort(t, kind="stable")
    if not sessions:
        return t[order], inp[order], out[order]
    keys = [h.strip().lower() for h in header]
    col = next((keys.index(name) for name in _SESSION if name in keys), None)
    if col is None:
        return t[order], inp[order], out[order], None
    ids: dict[str, int] = {}
    sess = np.array([ids.setdefault(row[col].strip() if col < len(row) else "", len(ids)) for row in body], dtype=np.int64)
    return t[order], inp[order], out[order], sess[order]


def _columns_row_by_row(body: list[list[str]], header: list[str], ti: int, ii: int, oi: int,
                        shown: str) -> tuple[np.ndarray, ...]:
    """(times, inputs, outputs) read a row at a time, naming the first bad line (ShardwiseError)."""
    n = len(body)
    t = np.empty(n)
    inp = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    width = max(ti, ii, oi) + 1
    for k, row in enumerate(body):
        line = k + 2
        if len(row) < width:
            raise ShardwiseError(f"{shown} line {line}: expected {len(header)} columns, got {len(row)}: {clip(','.join(row), 120)}")
        try:
            t[k] = parse_timestamp(row[ti])
        except (ValueError, OverflowError, OSError):
            raise ShardwiseError(f"{shown} line {line}: bad timestamp {shorten(row[ti])}; use seconds or 'YYYY-MM-DD HH:MM:SS.ffffff'") from None
        for arr, col, what in ((inp, ii, "input"), (out, oi, "output")):
            cell = row[col].strip()
            try:
                value = float(cell) if len(cell) <= 32 else math.nan
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value >= 0 and value == int(value)):
                raise ShardwiseError(f"{shown} line {line}: {what} tokens must be a non-negative whole number, got {shorten(row[col])}")
            if value > MAX_SEQUENCE_TOKENS:
                raise ShardwiseError(f"{shown} line {line}: {what} tokens {shorten(row[col])} exceed the limit of {MAX_SEQUENCE_TOKENS:,} per request")
            arr[k] = int(value)
    return t, inp, out
