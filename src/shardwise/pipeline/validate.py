"""Schedule validator: completeness, per-rank order, placement consistency and deadlock freedom.

Checks, for every (stage, micro-batch): exactly one F, and either exactly one fused B or exactly one I
and one W; every action on the rank that holds its stage; W after its I and I/B after its F on that
rank; and that all dependencies can be met (a unit-time run of :mod:`.engine` finishes every rank).
"""

from __future__ import annotations

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.engine import blocked_actions, compile_schedule
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, KINDS, W_CODE, Schedule

_MAX_LISTED = 5


def _fmt(cells: np.ndarray, label: str) -> str:
    items = [f"{label}({s},{m})" for s, m in cells[:_MAX_LISTED].tolist()]
    more = f" and {len(cells) - _MAX_LISTED} more" if len(cells) > _MAX_LISTED else ""
    return ", ".join(items) + more


def check_schedule(sched: Schedule) -> list[str]:
    """Return a list of problems (empty when the schedule is valid)."""
    S, M, pp = sched.num_stages, sched.microbatches, sched.pp
    problems: list[str] = []
    if len(sched.codes) != pp:
        return [f"the schedule has {len(sched.codes)} rank rows but pp={pp}"]
    if any(r < 0 or r >= pp for r in sched.stage_to_rank):
        return [f"stage-to-rank map {list(sched.stage_to_rank)} names ranks outside 0..{pp - 1}"]
    if S == 0 or M == 0:
        return ["the schedule has no stages or no micro-batches"]
    counts = np.zeros((4, S, M), dtype=np.int64)
    for r, arr in enumerate(sched.codes):
        comp = arr[arr[:, 2] <= B_CODE] if len(arr) else arr
        if not len(comp):
            continue
        s, m, k = comp[:, 0], comp[:, 1], comp[:, 2]
        bad = (s < 0) | (s >= S) | (m < 0) | (m >= M)
        if bad.any():
            j = int(np.nonzero(bad)[0][0])
            problems.append(
                f"rank {r} has {s[j]}{KINDS[k[j]].value}{m[j]} outside stages 0..{S - 1} / micro-batches "
                f"0..{M - 1}"
            )
            continue
        owner = np.asarray(sched.stage_to_rank)[s]
        if (owner != r).any():
            j = int(np.nonzero(owner != r)[0][0])
            problems.append(f"rank {r} runs {s[j]}{KINDS[k[j]].value}{m[j]} but stage {s[j]} belongs to rank "
                            f"{owner[j]}")
            continue
        np.add.at(counts, (k, s, m), 1)
        # order on the rank: position of each pass
        pos = np.full((4, S, M), -1, dtype=np.int64)
        pos[k, s, m] = np.arange(len(comp))
        for later, earlier, what in ((I_CODE, F_CODE, "I before its F"), (B_CODE, F_CODE, "B before its F"),
                                     (W_CODE, I_CODE, "W before its I")):
            both = (pos[later] >= 0) & (pos[earlier] >= 0) & (pos[later] < pos[earlier])
            if both.any():
                problems.append(f"rank {r}: {what} for {_fmt(np.argwhere(both), KINDS[later].value)}")
    if problems:
        return problems
    f, i, w, b = counts
    if (f != 1).any():
        miss, dup = np.argwhere(f == 0), np.argwhere(f > 1)
        if len(miss):
            problems.append(f"missing forward passes: {_fmt(miss, 'F')}")
        if len(dup):
            problems.append(f"duplicated forward passes: {_fmt(dup, 'F')}")
        partial = [k for k in range(M) if 0 < (f[:, k] > 0).sum() < S]
        if partial:
            where = "; ".join(f"micro-batch {k} only on stages {np.nonzero(f[:, k])[0].tolist()}"
                              for k in partial[:3])
            problems.append(f"forwards cover only some stages ({where}): are micro-batch indices shifted? "
                            "(PyTorch's Schedule1F1B pipeline_order emits F1..Fm instead of F0..F(m-1) on its "
                            "last rank)")
    fused_ok = (b == 1) & (i == 0) & (w == 0)
    split_ok = (b == 0) & (i == 1) & (w == 1)
    bad = ~(fused_ok | split_ok)
    if bad.any():
        cells = np.argwhere(bad)
        detail = []
        for s, m in cells[:_MAX_LISTED].tolist():
            detail.append(f"({s},{m}): B x{b[s, m]}, I x{i[s, m]}, W x{w[s, m]}")
        more = f" and {len(cells) - _MAX_LISTED} more" if len(cells) > _MAX_LISTED else ""
        problems.append("each (stage, micro-batch) needs one fused B or one I and one W; got "
                        + "; ".join(detail) + more)
    if problems:
        return problems
    comp = compile_schedule(sched)
    if comp.deadlocked:
        problems.append("deadlock: " + "; ".join(blocked_actions(sched, comp, comp.progress)))
    return problems


def validate_schedule(sched: Schedule) -> Schedule:
    """Raise :class:`ShardwiseError` listing every problem; return ``sched`` when valid."""
    problems = check_schedule(sched)
    if problems:
        raise ShardwiseError(
            f"schedule {sched.name!r} (pp={sched.pp}, stages={sched.num_stages}, microbatches="
            f"{sched.microbatches}) is invalid: " + " | ".join(problems)
        )
    return sched
