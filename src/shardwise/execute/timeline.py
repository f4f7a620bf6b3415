"""Measured timelines in the simulator's shape, and calibrated predictions (no torch).

A measured step becomes the same mapping :meth:`shardwise.pipeline.SimResult.to_dict` writes
(``makespan``, ``rank_spans``, ``rank_busy``, ``bubble_fraction``, ``bubble_ratio``,
``stage_bubble_ratio``, ``ranks`` = per pipeline rank the ordered ``{action, stage, microbatch, kind,
start, end}``), plus ``comms`` (per rank, the waits on communication that were visible). Times start at
the step's first action. Bubble definitions are the simulator's (see :mod:`shardwise.pipeline.simulate`).

Calibration (``--calibrate``): the median measured duration of each (stage, kind) (with the time the
runtime then spends posting its sends), plus the median host overhead between actions, is fed to :func:`shardwise.pipeline.simulate` together with a measured
point-to-point hop time; the predicted makespan is compared with the measured one.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict

from shardwise.pipeline import Schedule, SimResult, simulate
from shardwise.pipeline.trace import activation_series, simulation_events, timeline_events, trace_document


def measured_timeline(rows: list[dict], name: str, pp: int, vpp: int, num_stages: int,
                      microbatches: int) -> dict:
    """Summarise one step. ``rows[r]`` is pipeline rank r's ``{"actions": [...], "comms": [...]}`` as
    recorded by :class:`~shardwise.execute.record.Recorder` (absolute seconds)."""
    starts = [a[3] for row in rows for a in row["actions"]]
    t0 = min(starts) if starts else 0.0
    ranks, comms, spans, busy = [], [], [], []
    for row in rows:
        acts = sorted(row["actions"], key=lambda a: a[3])
        ranks.append([
            {"action": f"{s}{k}{m}", "stage": s, "microbatch": m, "kind": k, "start": a - t0, "end": b - t0}
            for k, s, m, a, b in acts
        ])
        comms.append([{"name": n, "start": a - t0, "end": b - t0} for n, a, b in sorted(row["comms"], key=lambda c: c[1])])
        busy.append(sum(b - a for _, _, _, a, b in acts))
        spans.append(max(b for *_, b in acts) - min(a for _, _, _, a, _ in acts) if acts else 0.0)
    makespan = max((e["end"] for r in ranks for e in r), default=0.0)
    total_busy = sum(busy)
    idle = pp * makespan - total_busy
    crit = max(range(len(ranks)), key=lambda r: (spans[r], spans[r] - busy[r])) if ranks else 0
    return {
        "schedule": name, "pp": pp, "vpp": vpp, "num_stages": num_stages, "microbatches": microbatches,
        "source": "measured",
        "makespan": makespan, "stage_span": max(spans, default=0.0),
        "bubble_fraction": idle / (pp * makespan) if makespan > 0 else 0.0,
        "bubble_ratio": idle / total_busy if total_busy > 0 else 0.0,
        "stage_bubble_ratio": (spans[crit] - busy[crit]) / spans[crit] if spans and spans[crit] > 0 else 0.0,
        "critical_rank": crit, "rank_spans": spans, "rank_busy": busy,
        "ranks": ranks, "comms": comms,
    }


def _with_posting(row: dict) -> list[tuple[str, int, int, float, float]]:
    """A rank's actions, each extended by the time spent posting sends/receives right after it
    (``P2P_POST``: the runtime blocks there; e.g. an F that hands its activation to the next rank)."""
    acts = sorted(row["actions"], key=lambda a: a[3])
    extra = [0.0] * len(acts)
    starts = [a[3] for a in acts]
    for name, a, b in row["comms"]:
        if name != "P2P_POST":
            continue
        i = bisect.bisect_right(starts, a) - 1  # the last action that started before the posting
        if i >= 0 and acts[i][4] <= a + 1e-9:
            extra[i] += b - a
    return [(k, s, m, t0, t1 + e) for (k, s, m, t0, t1), e in zip(acts, extra)]


def stage_costs(rows: list[dict], num_stages: int) -> dict[str, list[float | None]]:
    """Median duration per stage of each kind seen (``F``, ``I``, ``W``, ``B``) over all given steps'
    actions, including the posting of the sends that follow the action; ``None`` where a kind never
    ran on a stage."""
    durs: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        for k, s, _m, a, b in _with_posting(row):
            durs[(k, s)].append(b - a)
    out: dict[str, list[float | None]] = {}
    for kind in "FIWB":
        vals = [statistics.median(durs[(kind, s)]) if durs.get((kind, s)) else None for s in range(num_stages)]
        if any(v is not None for v in vals):
            out[kind] = vals
    return out


def action_overhead_s(rows: list[dict]) -> float:
    """Median host time between consecutive actions of a rank that is neither waiting on nor posting
    communication (the runtime's bookkeeping). The simulator has no such term, so :func:`predict` adds
    it to every action."""
    gaps = []
    for row in rows:
        acts = sorted(row["actions"], key=lambda a: a[3])
        comms = row["comms"]
        for prev, nxt in zip(acts, acts[1:]):
            lo, hi = prev[4], nxt[3]
            waited = sum(max(0.0, min(b, hi) - max(a, lo)) for _, a, b in comms)
            gaps.append(max(0.0, hi - lo - waited))
    return statistics.median(gaps) if gaps else 0.0


def predict(sched: Schedule, costs: dict[str, list[float | None]], p2p_s: float, overhead_s: float = 0.0) -> SimResult:
    """Simulate ``sched`` with measured per-stage costs (each action lengthened by ``overhead_s``). A
    schedule with fused backward only (``B``) gets ``i_s = w_s = b_s / 2`` (unused by its actions); one
    with ``I``/``W`` only gets ``b_s = i_s + w_s``."""
    S = sched.num_stages

    def fill(vals, default):
        return [(default[s] if v is None else v) + overhead_s for s, v in enumerate(vals or [None] * S)]

    zero = [0.0] * S
    f = fill(costs.get("F"), zero)
    if "I" in costs or "W" in costs:
        i = fill(costs.get("I"), zero)
        w = fill(costs.get("W"), zero)
        b = fill(costs.get("B"), [x + y - overhead_s for x, y in zip(i, w)])
    else:
        b = fill(costs.get("B"), zero)
        i = [x / 2 for x in b]
        w = [x / 2 for x in b]
    return simulate(sched, f_s=f, i_s=i, w_s=w, b_s=b, p2p_s=p2p_s)


def prediction_error(predicted_s: float, measured_s: float) -> float:
    """Relative makespan prediction error ``(predicted - measured) / measured``."""
    return (predicted_s - measured_s) / measured_s if measured_s > 0 else float("nan")


def run_trace(sched: Schedule, measured: dict, predicted: SimResult, title: str) -> dict:
    """A measured step and its prediction as one Chrome/Perfetto trace (:mod:`shardwise.pipeline.trace`):
    process 1 the measured actions with the communication the rank waited on (names as recorded:
    ``P2P_POST``, ``P2P_WAIT``, ``REDUCE_GRAD``) and the activations in flight by the action order;
    process 2 the simulation. Times start at the step's first event."""
    shift = -min([0.0] + [c["start"] for row in measured["comms"] for c in row])

    def moved(rows):
        return [[{**e, "start": e["start"] + shift, "end": e["end"] + shift} for e in row] for row in rows]

    ranks = moved(measured["ranks"])
    events = timeline_events(1, f"{title}: measured (last step)", ranks, waits=moved(measured["comms"]),
                             memory=activation_series(ranks))
    simulated, _ = simulation_events(sched, predicted, pid=2, title=f"{title}: predicted from the stage costs")
    return trace_document(events + simulated, source="shardwise train run", layout=title)
