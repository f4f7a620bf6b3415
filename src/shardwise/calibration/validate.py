"""`shardwise validate`: prediction error against public training measurements, per source.

Error of one figure = predicted/measured - 1; per source and category the mean absolute percentage
error (MAPE). Categories: throughput (step time, tokens/s, samples/s, TFLOP/s, MFU: one primary figure
per run), memory, time (measured layer times), formula (reproductions of paper formulas, kept out of
the throughput error). With ``cv`` the throughput error of each source is the one predicted by the
constants fitted without it (:mod:`shardwise.calibration.fit`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.calibration import Case, Skip, record_cases
from shardwise.calibration.scoring import row_class, signed_error
from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, read_record_list

CATEGORIES = ("throughput", "time", "memory", "formula")


def default_data_path() -> Path:
    """The repository's copy of shared/calibration/training-measurements.json."""
    return data_path("calibration/training-measurements.json")


@dataclass
class Row:
    case: Case
    predicted: float

    @property
    def error(self) -> float:
        return signed_error(self.case.metric, self.case.measured, self.predicted)


def load_records(path: str | Path | None = None) -> list[dict[str, Any]]:
    return read_record_list(Path(path) if path else default_data_path())


def collect_cases(path: str | Path | None = None) -> tuple[list[Case], list[Skip]]:
    """Every case of every applicable record, and the skipped records with their reasons."""
    cases: list[Case] = []
    skips: list[Skip] = []
    for record in load_records(path):
        if not isinstance(record, dict) or "id" not in record:
            skips.append(Skip("?", "?", "malformed record (no id)"))
            continue
        try:
            res = record_cases(record)
        except (ShardwiseError, KeyError, TypeError, ValueError) as exc:
            res = Skip(record["id"], str(record.get("source", "?"))[:40], f"cannot build a job: {exc}")
        if isinstance(res, Skip):
            skips.append(res)
        else:
            cases.extend(res)
    return cases, skips


def predict_rows(cases: list[Case], constants: Constants | None = None) -> list[Row]:
    return [Row(c, c.predict(constants)) for c in cases]


def over_memory(cases: list[Case], constants: Constants | None = None) -> list[dict[str, Any]]:
    """The feasibility check: every throughput row is a run that ran, so its per-GPU peak memory fit in
    the GPU's memory. The rows whose estimated peak is above the GPU's memory: a planner would have
    rejected a configuration that works (or the record leaves out what made it fit)."""
    out = []
    for c in cases:
        if c.category == "throughput" and c.peak_memory_gib is not None and c.hbm_gib:
            peak = c.peak_memory_gib(constants)
            if peak > c.hbm_gib:
                out.append({"id": c.record_id, "source": c.source, "peak_gib": peak, "hbm_gib": c.hbm_gib,
                            "assumptions": c.assumptions})
    return out


def run_validation(path: str | Path | None = None, constants: Constants | None = None) -> dict[str, Any]:
    """Estimate every applicable record with `constants` (default: the fitted ones)."""
    cases, skips = collect_cases(path)
    rows = predict_rows(cases, constants)
    over = over_memory(cases, constants)
    return {"rows": rows, "skips": skips, "over_memory": over, "summary": summarise(rows, skips, over)}


def mape(rows: list[Row]) -> float | None:
    return sum(abs(r.error) for r in rows) / len(rows) if rows else None


def summarise(rows: list[Row], skips: list[Skip], over: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Per source: figures, MAPE per category, and runs (throughput rows) with how many of them the
    estimate puts above the GPU's memory (:func:`over_memory`)."""
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.case.source].append(r)
    over_by_source = Counter(o["source"] for o in over)
    sources = {
        source: {
            "group": rs[0].case.group,
            "figures": len(rs),
            "mape": {c: mape([r for r in rs if r.case.category == c]) for c in CATEGORIES},
            "runs": sum(r.case.category == "throughput" for r in rs),
            "over_memory": over_by_source[source],
        }
        for source, rs in sorted(by_source.items())
    }
    reasons = Counter(s.reason for s in skips)
    return {
        "sources": sources,
        "overall": {c: mape([r for r in rows if r.case.category == c]) for c in CATEGORIES},
        "figures": len(rows),
        "runs": sum(r.case.category == "throughput" for r in rows),
        "over_memory": len(over),
        "records": len({r.case.record_id for r in rows}),
        "skipped_records": len({s.record_id for s in skips}),
        "skip_reasons": dict(reasons.most_common()),
    }


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            "id": r.case.record_id,
            "source": r.case.source,
            "group": r.case.group,
            "metric": r.case.metric,
            "category": r.case.category,
            "measured": r.case.measured,
            "predicted": r.predicted,
            "error": r.error,
            "assumptions": r.case.assumptions,
            "tags": r.case.tags,
        }
        for r in result["rows"]
    ]
    skips = [{"id": s.record_id, "source": s.source, "reason": s.reason} for s in result["skips"]]
    out = {"summary": result["summary"], "rows": rows, "skipped": skips, "over_memory": result.get("over_memory", [])}
    if "cv" in result:
        out["cv"] = result["cv"]
    return out


TARGET_MIN_ROWS = 5  # a source with at least this many rows of a class carries that class's accuracy target
ROW_CLASSES = ("dense", "fp8", "moe")  # dense BF16/FP16 (issue 9's target), low-precision, mixture-of-experts
TARGET_MAE = {"dense": 0.10, "fp8": 0.15, "moe": 0.15}  # held-out MAE each class is judged against


def _class_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["error"] for r in rows]
    n = len(errors)
    return {"rows": n, "mape": sum(map(abs, errors)) / n if n else None, "mean_error": sum(errors) / n if n else None}


def source_spread(errors_by_source: dict[str, list[float]]) -> dict[str, float]:
    """Within-source noise sigma and between-source spread tau of log errors (log(1 + error)), by the
    DerSimonian & Laird (1986) moment estimator of a random-effects meta-analysis: each source's mean
    error is its bias (spread tau across sources) plus its rows' noise (sigma / sqrt(n)). Returns
    sigma, tau and kappa = sigma^2 / tau^2, the row count at which a source's bias is as well seen as
    the spread between sources (what :data:`shardwise.calibration.fit.SOURCE_NOISE_RATIO` holds)."""
    groups = [np.log1p(np.asarray(e, dtype=float)) for e in errors_by_source.values() if len(e)]
    n = np.array([len(g) for g in groups], dtype=float)
    if len(groups) < 2 or n.sum() <= len(groups):
        raise ShardwiseError("the spread between sources needs at least two sources and one with two rows or more")
    means = np.array([g.mean() for g in groups])
    sigma2 = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / float(n.sum() - len(groups))
    w = n / sigma2
    q = float((w * (means - (w * means).sum() / w.sum()) ** 2).sum())
    tau2 = max(0.0, (q - (len(groups) - 1)) / float(w.sum() - (w**2).sum() / w.sum()))
    return {"sigma": math.sqrt(sigma2), "tau": math.sqrt(tau2), "kappa": sigma2 / tau2 if tau2 > 0 else math.inf}


def cross_validation(path: str | Path | None = None) -> dict[str, Any]:
    """Held-out error per source group: each group predicted with the constants fitted without it
    (stored per fold by scripts/fit_constants.py; the predictions are recomputed with today's code),
    split into dense BF16, FP8 and MoE rows (each class has its own target)."""
    from shardwise.calibration.fit import apply, base_constants, held_out_rows
    from shardwise.cost.constants import fit_cv_data, fitted_data

    folds = fit_cv_data().get("cv", {}).get("groups", {})
    if not folds:
        raise ShardwiseError("no cross-validation stored; run: python scripts/fit_constants.py")
    cases, _ = collect_cases(path)
    base = base_constants()
    groups = {}
    for group, fold in sorted(folds.items()):
        rows = [r for r in held_out_rows(cases, group, apply(base, fold["values"])) if r["in_scope"]]
        classes = {k: _class_summary([r for r in rows if row_class(r["tags"]) == k]) for k in ROW_CLASSES}
        groups[group] = {"sources": sorted({r["source"] for r in rows}), **classes["dense"],
                         "classes": classes, "target": classes["dense"]["rows"] >= TARGET_MIN_ROWS, "held_out": rows}
    targets = {}
    for k in ROW_CLASSES:
        judged = [g["classes"][k]["mape"] for g in groups.values() if g["classes"][k]["rows"] >= TARGET_MIN_ROWS]
        targets[k] = {"sources": len(judged), "within": sum(e <= TARGET_MAE[k] for e in judged),
                      "above_20pct": sum(e > 0.20 for e in judged), "target_mae": TARGET_MAE[k]}
    return {
        "groups": groups,
        "targets": targets,
        "targeted_groups": targets["dense"]["sources"],
        "within_10pct": targets["dense"]["within"],
        "above_20pct": targets["dense"]["above_20pct"],
        "determined": fitted_data().get("fit", {}).get("determined", {}),
        "spread": _dense_spread(groups),
    }


def _dense_spread(groups: dict[str, dict[str, Any]]) -> dict[str, float | None] | None:
    """:func:`source_spread` of the dense held-out rows, JSON-safe (no spread between sources: kappa
    None); None when the data hold too few sources to tell."""
    try:
        spread = source_spread({g: [r["error"] for r in info["held_out"] if row_class(r["tags"]) == "dense"]
                                for g, info in groups.items()})
    except ShardwiseError:
        return None
    return {**spread, "kappa": spread["kappa"] if math.isfinite(spread["kappa"]) else None}
