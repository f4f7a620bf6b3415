"""`shardwise validate`: prediction error against public training measurements, per source.

Error of one figure = predicted/measured - 1; per source and category (time, throughput, MFU,
memory, pipeline bubble rate) the mean absolute percentage error (MAPE) over its figures. Records used to fit the constants
are marked and reported separately from the held-out ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, read_document
from shardwise.train.calibration import Case, Skip, record_cases

CATEGORIES = ("time", "throughput", "mfu", "memory", "bubble")


def default_data_path() -> Path:
    """The repository's copy of shared/calibration/training-measurements.json."""
    return data_path("calibration/training-measurements.json")


@dataclass
class Row:
    case: Case
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.case.measured - 1.0


def load_records(path: str | Path | None) -> list[dict[str, Any]]:
    p = Path(path) if path else default_data_path()
    data = read_document(p)
    if not isinstance(data, list):
        raise ShardwiseError(f"{p}: expected a JSON list of records")
    return data


def run_validation(path: str | Path | None = None, constants: Constants | None = None) -> dict[str, Any]:
    """Estimate every applicable record; return rows, skips and the error summary."""
    rows: list[Row] = []
    skips: list[Skip] = []
    for record in load_records(path):
        if not isinstance(record, dict) or "id" not in record:
            skips.append(Skip("?", "?", "malformed record (no id)"))
            continue
        try:
            res = record_cases(record)
        except (ShardwiseError, KeyError, TypeError, ValueError) as exc:
            res = Skip(record["id"], record.get("source", "?")[:40], f"cannot build a job: {exc}")
        if isinstance(res, Skip):
            skips.append(res)
            continue
        for case in res:
            try:
                rows.append(Row(case, case.predict(constants)))
            except ShardwiseError as exc:
                skips.append(Skip(case.record_id, case.source, str(exc)))
                break
    return {"rows": rows, "skips": skips, "summary": summarise(rows, skips)}


def _mape(rows: list[Row]) -> float | None:
    return sum(abs(r.error) for r in rows) / len(rows) if rows else None


def summarise(rows: list[Row], skips: list[Skip]) -> dict[str, Any]:
    by_source: dict[tuple[str, bool], list[Row]] = defaultdict(list)
    for r in rows:
        by_source[(r.case.source, r.case.fit)].append(r)
    sources = {}
    for (source, fit), rs in sorted(by_source.items()):
        sources[f"{source} [fit]" if fit else source] = {
            "fit": fit,
            "figures": len(rs),
            "mape": {c: _mape([r for r in rs if r.case.category == c]) for c in CATEGORIES},
            "mape_all": _mape(rs),
        }
    held_out = [r for r in rows if not r.case.fit]
    reasons = Counter(s.reason.split(":")[0] if s.reason.startswith("unsupported") else s.reason for s in skips)
    return {
        "sources": sources,
        "overall_held_out": {c: _mape([r for r in held_out if r.case.category == c]) for c in CATEGORIES},
        "overall_fit": {c: _mape([r for r in rows if r.case.fit and r.case.category == c]) for c in CATEGORIES},
        "figures": len(rows),
        "records": len({r.case.record_id for r in rows}),
        "skipped_records": len({s.record_id for s in skips}),
        "skip_reasons": dict(reasons.most_common()),
    }


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            "id": r.case.record_id,
            "source": r.case.source,
            "metric": r.case.metric,
            "category": r.case.category,
            "measured": r.case.measured,
            "predicted": r.predicted,
            "error": r.error,
            "fit": r.case.fit,
            "assumptions": r.case.assumptions,
        }
        for r in result["rows"]
    ]
    skips = [{"id": s.record_id, "source": s.source, "reason": s.reason} for s in result["skips"]]
    return {"summary": result["summary"], "rows": rows, "skipped": skips}
