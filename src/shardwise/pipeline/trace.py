"""Pipeline timelines as Chrome/Perfetto trace-event JSON, written directly (no tracing library).

Format: the Trace Event Format (Google, "Trace Event Format" specification; the JSON importer of
Perfetto's trace processor reads the same): an object ``{"traceEvents": [...]}`` whose events carry
``ph`` (phase), ``ts`` (microseconds), ``pid``, ``tid`` and ``name``. Used here:

- ``X`` complete events (``ts`` + ``dur``): one per compute action and per point-to-point wait;
- ``C`` counter events: Perfetto names each series ``"<name> <args key>"`` per process;
- ``s``/``f`` flow events: arrows from the action that sends a tensor to the one that receives it,
  each bound to the slice enclosing its ``ts`` (``bp: "e"`` on the ``f``);
- ``M`` metadata: ``process_name``, ``thread_name``, ``process_sort_index``, ``thread_sort_index``.

Layout: one process per timeline (a simulation; measured and predicted for a real run), one thread per
pipeline rank with its F/I/W/B actions (``args``: stage, micro-batch, action in PyTorch's notation) and
the communication it waited on, and one counter per rank with the activations in flight. The counter
follows the simulator's accounting (:mod:`shardwise.pipeline.simulate`): an F adds its stage's
activations when it starts, an I frees ``1 - w_retained_fraction`` of them when it ends, a W the rest,
a fused B all; so each counter's maximum is the simulator's peak for that rank.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shardwise.pipeline.engine import compile_schedule
from shardwise.pipeline.ir import F_CODE, Schedule
from shardwise.pipeline.simulate import SimResult

US_PER_S = 1e6


def _us(t_s: float) -> float:
    """Seconds -> microseconds, rounded to the nanosecond (rounding is monotone, so slices that touch
    in seconds still touch, never overlap, in microseconds)."""
    return round(t_s * US_PER_S, 3)


def slice_event(pid: int, tid: int, name: str, start_s: float, end_s: float, cat: str, args: dict) -> dict:
    """A complete (``X``) event from ``start_s`` to ``end_s``."""
    ts = _us(start_s)
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": ts,
            "dur": round(_us(end_s) - ts, 3), "args": args}


def _metadata(pid: int, title: str, pp: int) -> list[dict]:
    out = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": title}},
           {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}}]
    for r in range(pp):
        out += [{"ph": "M", "pid": pid, "tid": r, "name": "thread_name", "args": {"name": f"rank {r}"}},
                {"ph": "M", "pid": pid, "tid": r, "name": "thread_sort_index", "args": {"sort_index": r}}]
    return out


def activation_series(ranks: Sequence[Sequence[dict]], activation: Sequence[float] | None = None,
                      w_retained_fraction: float = 1.0) -> list[list[tuple[float, float]]]:
    """Per rank, ``(time_s, activations in flight)`` after every change (see the module docstring);
    ``activation[s]`` is what an F of stage ``s`` adds (default 1: one micro-batch of one stage)."""
    rho = float(w_retained_fraction)
    out = []
    for acts in ranks:
        level, series = 0.0, [(0.0, 0.0)]
        for a in acts:
            size = 1.0 if activation is None else float(activation[a["stage"]])
            delta = {"F": size, "I": -(1 - rho) * size, "W": -rho * size, "B": -size}[a["kind"]]
            level = max(level + delta, 0.0)  # clamp float round-off below zero
            t = a["start"] if delta > 0 else a["end"]
            if t == series[-1][0]:
                series[-1] = (t, level)
            else:
                series.append((t, level))
        out.append(series)
    return out


def timeline_events(pid: int, title: str, ranks: Sequence[Sequence[dict]], *,
                    waits: Sequence[Sequence[dict]] | None = None,
                    memory: Sequence[Sequence[tuple[float, float]]] | None = None,
                    memory_label: str = "activations in flight (micro-batches of a stage)",
                    memory_scale: float = 1.0) -> list[dict]:
    """Events of one timeline. ``ranks[r]``: rank r's actions ``{action, stage, microbatch, kind,
    start, end}`` (seconds; :meth:`SimResult.timeline`); ``waits[r]``: ``{name, start, end, args?}``
    communication rank r waited on; ``memory[r]``: its counter series, multiplied by ``memory_scale``."""
    events = _metadata(pid, title, len(ranks))
    for r, acts in enumerate(ranks):
        for a in acts:
            events.append(slice_event(pid, r, a["kind"], a["start"], a["end"], "compute",
                                      {"stage": a["stage"], "microbatch": a["microbatch"], "action": a["action"]}))
        for w in (waits[r] if waits else ()):
            events.append(slice_event(pid, r, w["name"], w["start"], w["end"], "communication", w.get("args", {})))
        for t, v in (memory[r] if memory else ()):
            events.append({"ph": "C", "pid": pid, "tid": r, "name": f"rank {r} memory", "ts": _us(t),
                           "args": {memory_label: v * memory_scale}})
    return events


def p2p_waits(sched: Schedule, res: SimResult) -> tuple[list[list[dict]], list[tuple[int, int, int, int]]]:
    """The point-to-point transfers of a simulation. Returns per rank the part of each incoming
    transfer the rank sat idle for (from the later of its previous action's end and the sender's end,
    to the arrival; the simulator's hop model, :mod:`shardwise.pipeline.engine`), and every cross-rank
    hop as ``(sender rank, sender action index, receiver rank, receiver action index)``."""
    comp = compile_schedule(sched)
    where = {}  # action id -> (rank, index in the rank's compute actions)
    for r, outs in enumerate(comp.out):
        for i, o in enumerate(outs):
            where[o] = (r, i)
    waits: list[list[dict]] = [[] for _ in range(sched.pp)]
    hops = []
    for r in range(sched.pp):
        ends = res.ends[r].tolist()
        for i, d in enumerate(comp.dep[r]):
            if d < 0 or not comp.cross[r][i]:
                continue
            src_r, src_i = where[d]
            hops.append((src_r, src_i, r, i))
            sent = float(res.ends[src_r][src_i])
            hop = res.hop_s(int(comp.stage[r][i]), "F" if int(comp.kind[r][i]) == F_CODE else "I")
            arrival = sent + hop
            lo = max(ends[i - 1] if i else 0.0, sent)
            if _us(arrival) > _us(lo):  # it starts at max(rank free, arrival): the wait ends by its start
                what = "activation" if int(comp.kind[r][i]) == F_CODE else "gradient"
                waits[r].append({"name": f"recv {what}", "start": lo, "end": arrival,
                                 "args": {"from_rank": src_r, "stage": int(comp.stage[r][i]),
                                          "microbatch": int(comp.mb[r][i]), "transfer_s": hop}})
    return waits, hops


def _flow_events(pid: int, ranks: Sequence[Sequence[dict]], hops: Sequence[tuple[int, int, int, int]], first_id: int) -> list[dict]:
    """A flow arrow per hop, from the middle of the sending slice to the middle of the receiving one."""
    out = []
    for n, (sr, si, rr, ri) in enumerate(hops):
        src, dst = ranks[sr][si], ranks[rr][ri]
        common = {"name": "p2p", "cat": "p2p", "id": first_id + n, "pid": pid}
        out.append({**common, "ph": "s", "tid": sr, "ts": _us((src["start"] + src["end"]) / 2)})
        out.append({**common, "ph": "f", "bp": "e", "tid": rr, "ts": _us((dst["start"] + dst["end"]) / 2)})
    return out


def simulation_events(sched: Schedule, res: SimResult, *, pid: int = 1, title: str | None = None,
                      activation: Sequence[float] | None = None, w_retained_fraction: float = 1.0,
                      memory_label: str = "activations in flight (micro-batches of a stage)",
                      memory_scale: float = 1.0, flow_id: int = 1) -> tuple[list[dict], list[list[dict]]]:
    """Events of a simulated schedule (compute, exposed point-to-point waits, flow arrows per hop,
    activations in flight); also returns the per-rank actions so callers can add slices after them."""
    ranks = [res.timeline(r) for r in range(res.pp)]
    waits, hops = p2p_waits(sched, res)
    heading = title or f"{res.name} pp={res.pp} vpp={res.vpp} microbatches={res.microbatches} (simulated)"
    events = timeline_events(pid, heading, ranks, waits=waits,
                             memory=activation_series(ranks, activation, w_retained_fraction),
                             memory_label=memory_label, memory_scale=memory_scale)
    return events + _flow_events(pid, ranks, hops, flow_id), ranks


def trace_document(events: list[dict], **metadata: Any) -> dict:
    """The JSON object Perfetto and chrome://tracing open (``metadata`` goes to ``otherData``)."""
    doc: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if metadata:
        doc["otherData"] = {k: v if isinstance(v, str | int | float | bool) else str(v) for k, v in metadata.items()}
    return doc


def simulation_trace(sched: Schedule, res: SimResult, activation: Sequence[float] | None = None,
                     w_retained_fraction: float = 1.0) -> dict:
    """The trace document of one simulation (times in the simulation's units, taken as seconds)."""
    events, _ = simulation_events(sched, res, activation=activation, w_retained_fraction=w_retained_fraction)
    return trace_document(events, source="shardwise schedule simulate", schedule=res.name, pp=res.pp, vpp=res.vpp,
                          microbatches=res.microbatches, makespan_s=res.makespan,
                          bubble_fraction=res.bubble_fraction)


def write_trace(doc: dict, path: str | Path) -> Path:
    """Write ``doc`` as compact JSON (a ``.json`` file Perfetto opens)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path
