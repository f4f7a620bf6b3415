"""The seam between the cost model and pipeline schedules: per-stage F/I/W times in, makespan, bubble
and peak in-flight activations per rank out.

Closed forms (equal micro-batch work per rank r, t_r = sum of its stages' F+I+W):
- gpipe, 1f1b: makespan = (m - 1) * max_r t_r + sum_r t_r  ((p-1)(t_F+t_B) bubble for equal stages;
  Huang et al. 2019; Narayanan et al. 2021 Sec. 2.2); in flight on rank r: m (GPipe) or min(p - r, m).
- interleaved: bubble (p-1)/v of a rank's micro-batch time (Narayanan et al. 2021 Sec. 2.2.2); in flight
  (chunks) on rank r: min(2(p-r-1) + (v-1)p + 1, v*m) (Megatron-LM's warm-up count).
Point-to-point transfers block in Megatron-LM's schedules: 2 per micro-batch chunk on the critical path.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ShardwiseError

CLOSED_FORM = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class PipelineTiming:
    makespan_s: float  # pipelined forward/backward work, first start to last end
    bubble_s: float  # idle time of the busiest rank within the makespan
    pp_comm_s: float  # point-to-point time on the critical path
    peak_activation: tuple[float, ...]  # per rank, in the units of the per-stage activations given
    bubble_definition: str = "global makespan"

    @property
    def step_s(self) -> float:
        return self.makespan_s


def schedule_names() -> list[str]:
    return list(CLOSED_FORM)


def known_schedule(name: str) -> bool:
    return name.lower() in CLOSED_FORM


def stage_to_rank(pp: int, vpp: int) -> list[int]:
    """Interleaved placement: virtual stage s lives on rank s % pp."""
    return [s % pp for s in range(pp * vpp)]


def pipeline_timing(
    schedule: str,
    pp: int,
    vpp: int,
    microbatches: int,
    f_s: list[float],
    i_s: list[float],
    w_s: list[float],
    p2p_s: float,
    activation: list[float],
) -> PipelineTiming:
    """Makespan, bubble and peak activations for `schedule` over per-virtual-stage costs."""
    name = schedule.lower()
    if name not in CLOSED_FORM:
        raise ShardwiseError(f"parallel.schedule: unknown schedule {schedule!r}; use one of {', '.join(CLOSED_FORM)}")
    m, p, v = microbatches, pp, vpp
    if name != "interleaved" and v > 1:
        raise ShardwiseError(f"parallel.vpp: {v} virtual stages need schedule: interleaved (got {schedule})")
    if name == "interleaved" and v < 2:
        raise ShardwiseError("parallel.vpp: the interleaved schedule needs vpp >= 2 (vpp 1 is plain 1f1b)")
    if name == "interleaved" and m % p:
        raise ShardwiseError(f"parallel.schedule: interleaved needs micro-batches ({m}) to be a multiple of pp ({p})")
    ranks = stage_to_rank(p, v)
    per_rank = [0.0] * p
    act_rank = [0.0] * p
    for s, r in enumerate(ranks):
        per_rank[r] += f_s[s] + i_s[s] + w_s[s]
        act_rank[r] += activation[s] / v
    busiest = max(per_rank)
    if name == "interleaved":
        fill = (p - 1) * busiest / v
        inflight = [min(2 * (p - r - 1) + (v - 1) * p + 1, v * m) for r in range(p)]
    else:
        fill = sum(per_rank) - busiest
        inflight = [m if name == "gpipe" else min(p - r, m) for r in range(p)]
    pp_comm = 2 * (m * v + p - 1) * p2p_s if p > 1 else 0.0
    makespan = m * busiest + fill + pp_comm
    peak = tuple(act_rank[r] * inflight[r] for r in range(p))
    return PipelineTiming(makespan_s=makespan, bubble_s=fill, pp_comm_s=pp_comm, peak_activation=peak)
