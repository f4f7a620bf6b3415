"""Compare `rl estimate` with published RL runs (``data/rl_measurements.yaml``).

Each record holds a job reproducing the source's setup and the per-iteration seconds it reports; the estimate
runs the job and each figure is compared (error = estimated / measured - 1: + means the estimate takes
longer than measured). Nothing is fitted on these rows. The response-length distribution is
not stated by the sources, so each record is re-estimated at the `sensitivity` medians and the spread reported.

What the data do determine (:func:`implied_lengths`): the policy update is a training job whose work grows
with the tokens generated, so the measured update time implies a median response length under the model (the
lognormal's sigma and cut kept). One median per source (its records share one workload: same model, data set
and recipe) is fitted to the source's update times, and the other phases (rollout, old log-probs, the step) are
then compared at that length: a check of the serving and forward models that does not lean on the assumed
length. Records of one source whose own implied medians differ tell a scaling error of the training estimate
from a wrong length assumption.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from shardwise.cost.goodput import golden_max
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


# --- the response length the update phase implies ----------------------------------------------------------

LENGTH_FIGURE = "update_actor_s"  # the phase the length is read from
MEDIAN_RANGE = (32.0, 16384.0)  # tokens searched; a median at an end means the measurement lies outside


def _at_median(record: dict[str, Any], median: float) -> RLEstimate:
    return estimate_rl(parse_rl_job(_with_median(record["job"], round(median))))


def fit_median(records: list[dict[str, Any]], key: str = LENGTH_FIGURE) -> float:
    """The one output-length median (tokens) under which the estimated `key` matches the records' measured
    values best (least squares in log error; golden-section search over log median in MEDIAN_RANGE)."""
    memo: dict[int, float] = {}

    def loss(log_median: float) -> float:
        median = round(math.exp(log_median))
        if median not in memo:
            memo[median] = sum(math.log(figure(_at_median(r, median), key) / float(r["measured"][key])) ** 2
                               for r in records)
        return memo[median]

    return float(round(math.exp(golden_max(lambda x: -loss(x), *map(math.log, MEDIAN_RANGE), xatol=0.02))))


def implied_lengths(records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per record, the median its own update time implies; per source, the median fitted to all its update
    times and every figure's error at that median (module docstring)."""
    data = load_measurements()
    records = [r for r in (records if records is not None else data["records"]) if LENGTH_FIGURE in r["measured"]]
    per_record = {r["id"]: fit_median([r]) for r in records}
    per_source = {}
    for src in dict.fromkeys(r["source"] for r in records):
        mine = [r for r in records if r["source"] == src]
        median = fit_median(mine)
        rows = {}
        for r in mine:
            est = _at_median(r, median)
            rows[r["id"]] = {k: figure(est, k) / float(m) - 1 for k, m in r["measured"].items()}
        held_out = {k: float(np.mean([abs(e[k]) for e in rows.values() if k in e]))
                    for k in FIGURES if k != LENGTH_FIGURE and any(k in e for e in rows.values())}
        per_source[src] = {"median": median, "assumed_median": float(mine[0]["job"]["rollout"]["output_len"]["median"]),
                           "at_range_end": median <= MEDIAN_RANGE[0] * 1.05 or median >= MEDIAN_RANGE[1] / 1.05,
                           "errors": rows, "mean_abs_error": held_out}
    return {"figure": LENGTH_FIGURE, "per_record": per_record, "per_source": per_source}
