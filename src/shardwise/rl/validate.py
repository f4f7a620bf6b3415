"""Compare `rl estimate` with published RL runs (``data/rl_measurements.yaml``).

Each record holds a job reproducing the source's setup and the per-iteration seconds it reports; the estimate
runs the job and each figure is compared (error = estimated / measured - 1: + means the estimate takes
longer than measured). Nothing is fitted on these rows. The response-length distribution is
not stated by the sources, so each record is re-estimated at the `sensitivity` medians and the spread reported.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from shardwise.rl.spec import parse_rl_job
from shardwise.rl.step import RLEstimate, estimate_rl
from shardwise.specs._loading import data_path, load_yaml

MEASUREMENTS_FILE = "rl_measurements.yaml"
#: measured key -> the estimate's phase (None: the iteration time).
FIGURES = {"step_s": None, "rollout_s": "rollout", "old_log_prob_s": "forward: old log-probs", "update_actor_s": "train: policy"}


def load_measurements() -> dict[str, Any]:
    return load_yaml(data_path(MEASUREMENTS_FILE))


def figure(est: RLEstimate, key: str) -> float:
    """The estimate's value of one measured figure (seconds)."""
    phase = FIGURES[key]
    return est.period_s if phase is None else est.phases_s.get(phase, 0.0)


def _with_median(job: dict[str, Any], median: float) -> dict[str, Any]:
    job = copy.deepcopy(job)
    job["rollout"]["output_len"] = {**job["rollout"]["output_len"], "median": median}
    return job


def validate_record(record: dict[str, Any]) -> dict[str, Any]:
    """Estimate one record (and its sensitivity variants); per-figure estimate, measurement and error."""
    est = estimate_rl(parse_rl_job(record["job"]))
    figures = {}
    for key, measured in record["measured"].items():
        predicted = figure(est, key)
        figures[key] = {"measured": float(measured), "estimated": predicted, "error": predicted / float(measured) - 1}
    sens = {}
    for median in record.get("sensitivity", []):
        other = estimate_rl(parse_rl_job(_with_median(record["job"], median)))
        sens[str(median)] = {k: figure(other, k) / float(m) - 1 for k, m in record["measured"].items()}
    return {"id": record["id"], "source": record["source"], "row": record["row"], "figures": figures,
            "sensitivity": sens, "output_median": record["job"]["rollout"]["output_len"]["median"],
            "placement": est.placement, "notes": est.notes}


def run_validation(records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every record's comparison, and the mean absolute error per source and figure."""
    data = load_measurements()
    rows = [validate_record(r) for r in (records if records is not None else data["records"])]
    per_source: dict[str, dict[str, float]] = {}
    for src in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == src]
        per_source[src] = {k: float(np.mean([abs(r["figures"][k]["error"]) for r in mine if k in r["figures"]]))
                           for k in FIGURES if any(k in r["figures"] for r in mine)}
    return {"rows": rows, "per_source": per_source, "sources": {k: data["sources"][k] for k in per_source},
            "assumed": data.get("assumed", {})}
