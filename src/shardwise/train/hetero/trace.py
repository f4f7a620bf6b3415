"""`train estimate --trace` of a job on a heterogeneous cluster: one process per pipeline (the pipeline
across groups, or one per group of data-parallel replicas), each rank's actions from the schedule
simulation with its own GPU's times, so the imbalance between GPU types shows: a replica that finishes
its micro-batches early waits for the slowest one, then every rank takes the step's tail (exposed
data-parallel reduction, optimizer step, overhead) as in :mod:`shardwise.train.trace`."""

from __future__ import annotations

from shardwise.pipeline.trace import simulation_events, slice_event
from shardwise.train.hetero.result import HeteroEstimate
from shardwise.train.pipeline_timing import simulate_pipeline
from shardwise.train.result import GIB
from shardwise.train.trace import TAIL


def hetero_events(est: HeteroEstimate, pid: int = 1, flow_id: int = 1) -> list[dict]:
    """Trace events of one heterogeneous estimate, processes from `pid` on (module docstring)."""
    sims = {}
    for key, inputs in est.pipelines.items():
        name, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, rho, cap, group = inputs
        sims[key] = (simulate_pipeline(name, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, rho, cap, group), m, acts, rho)
    end = max(res.makespan for (_, res), *_ in sims.values())
    events: list[dict] = []
    for k, (key, ((sched, res), m, acts, rho)) in enumerate(sims.items()):
        where = "pipeline across groups" if est.layout.kind == "pipeline" else f"replicas on {key}"
        title = f"{est.name}: {est.model}, {est.label()}: {where}, {m} micro-batches (estimated)"
        evs, ranks = simulation_events(sched, res, pid=pid + k, title=title, activation=acts, w_retained_fraction=rho,
                                       memory_label="activations in flight (GiB)", memory_scale=1 / GIB,
                                       flow_id=flow_id + sum(e["ph"] == "s" for e in events))
        events += evs
        for r, actions in enumerate(ranks):
            t = actions[-1]["end"] if actions else 0.0
            if end - t > 1e-9:
                events.append(slice_event(pid + k, r, "waiting for the slowest pipeline", t, end, "step", {"seconds": end - t}))
            t = max(t, end)
            for label, field in TAIL:
                dur = float(getattr(est.time_s, field))
                if dur > 0:
                    events.append(slice_event(pid + k, r, label, t, t + dur, "step", {"seconds": dur}))
                    t += dur
    return events
