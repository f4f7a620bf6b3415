"""CSV import/export in the layout of PyTorch pipelining's ``_dump_csv`` / ``_load_csv``.

PyTorch (``torch/distributed/pipelining/schedules.py``) writes ``pipeline_order`` with ``csv.writer``:
one row per rank (row index = rank), one cell per action in its string form (``0F3``, ``1I3``,
``2SEND_F1``), an empty cell for an idle slot (``None``). ``_load_csv(format="compute_only")`` reads it
back with ``_Action.from_str``. Overlapped DualPipeV pairs appear as ``(0F7;7B3)OVERLAP_F_B``; on import
they become their sub-actions in order (forward, then backward). Idle cells are dropped: this IR has
no time slots, the simulator derives timing from dependencies.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from shardwise.errors import ShardwiseError, clip
from shardwise.pipeline.ir import Action, Schedule, parse_action, schedule_from_rows
from shardwise.specs._loading import read_text_file

_OVERLAP_RE = re.compile(r"^\((.*)\)OVERLAP_F_B$")


def write_csv_text(sched: Schedule) -> str:
    """The CSV text PyTorch's ``_dump_csv`` would write for this schedule (compute actions only
    unless the IR carries SEND/RECV actions)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    for rank in sched.ranks:
        writer.writerow([str(a) for a in rank])
    return buf.getvalue()


def dump_csv(sched: Schedule, path: str | Path) -> None:
    """Write ``sched`` to ``path`` in PyTorch's CSV layout."""
    Path(path).write_text(write_csv_text(sched), newline="")


def _cell_actions(cell: str, rank: int, col: int) -> list[Action]:
    cell = cell.strip()
    if not cell:
        return []
    m = _OVERLAP_RE.match(cell)
    try:
        if m:
            return [parse_action(part) for part in m.group(1).split(";") if part.strip()]
        return [parse_action(cell)]
    except ShardwiseError as exc:
        raise ShardwiseError(f"CSV row {rank} (rank {rank}), column {col + 1}: {exc}") from None


def read_csv_text(text: str, name: str = "imported", microbatches: int | None = None) -> Schedule:
    """Parse CSV text in PyTorch's layout into a :class:`Schedule` (pp = number of rows).

    ``microbatches`` defaults to the largest micro-batch index + 1. Validate the result with
    :func:`~shardwise.pipeline.validate.validate_schedule` before trusting it.
    """
    rows: list[list[Action]] = []
    try:
        for rank, row in enumerate(csv.reader(io.StringIO(text))):
            acts: list[Action] = []
            for col, cell in enumerate(row):
                acts.extend(_cell_actions(cell, rank, col))
            rows.append(acts)
    except csv.Error as exc:
        raise ShardwiseError(f"malformed CSV schedule: {clip(exc, 120)}") from None
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        raise ShardwiseError("the CSV schedule is empty: expected one row of actions per pipeline rank")
    return schedule_from_rows(rows, name=name, microbatches=microbatches)


def load_csv(path: str | Path, name: str | None = None, microbatches: int | None = None) -> Schedule:
    """Read a schedule CSV written by :func:`dump_csv` or PyTorch's ``_dump_csv``."""
    p = Path(path)
    text = read_text_file(p, "schedule CSV")
    return read_csv_text(text, name=name or p.stem[:40], microbatches=microbatches)
