"""`train estimate --trace`: the estimated training step as a Chrome/Perfetto trace.

One process per job. Per pipeline rank: its F/I/W actions with the estimated times (the TP/CP/EP
communication the cost model leaves exposed is inside them), the point-to-point waits, the activations
in flight in GiB (the estimate's per-stage activation bytes, counted as the simulator counts them), and
after the rank's last action the rest of the step from the estimate's time breakdown: the wait for the
slowest node, exposed data-parallel gradient reduction, optimizer step and the fixed step overhead (the largest over ranks,
as the step time uses them). Format: :mod:`shardwise.pipeline.trace`.
"""

from __future__ import annotations

from shardwise.pipeline.trace import simulation_events, slice_event, trace_document
from shardwise.train.pipeline_timing import simulate_pipeline
from shardwise.train.result import GIB, Estimate

#: (slice name, field of the time breakdown) of the step's tail, in order
TAIL = (("waiting for the slowest node", "straggler"), ("data-parallel gradient reduce (exposed)", "dp_comm"),
        ("optimizer step", "optimizer"), ("step overhead", "overhead"))


def estimate_events(est: Estimate, pid: int = 1, flow_id: int = 1) -> list[dict]:
    """Trace events of one estimate (see the module docstring)."""
    name, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, rho, cap, group = est.pipeline_inputs
    sched, res = simulate_pipeline(name, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, rho, cap, group)
    p = est.plan
    title = (f"{est.name}: {est.model} on {est.num_gpus} x {est.gpu}, tp={p['tp']} pp={pp} vpp={vpp} "
             f"dp={p['dp']} cp={p['cp']} ep={p['ep']} {res.name}, {m} micro-batches (estimated)")
    events, ranks = simulation_events(sched, res, pid=pid, title=title, activation=acts, w_retained_fraction=rho,
                                      memory_label="activations in flight (GiB)", memory_scale=1 / GIB,
                                      flow_id=flow_id)
    breakdown = est.time_s
    for r, actions in enumerate(ranks):
        t = actions[-1]["end"] if actions else 0.0
        for label, key in TAIL:
            dur = getattr(breakdown, key)
            if dur > 0:
                events.append(slice_event(pid, r, label, t, t + dur, "step", {"seconds": dur}))
                t += dur
    return events


def estimate_trace(estimates: list[Estimate]) -> dict:
    """The trace document of one or more estimates (one process each)."""
    events: list[dict] = []
    for pid, est in enumerate(estimates, start=1):
        events += estimate_events(est, pid, flow_id=1 + sum(e["ph"] == "s" for e in events))
    return trace_document(events, source="shardwise train estimate", jobs=len(estimates))
