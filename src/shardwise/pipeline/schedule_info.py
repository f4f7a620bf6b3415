"""What a pipeline schedule is, in one record: :class:`ScheduleInfo`.

Everything outside the generators learns about a schedule from its record and nowhere else: which
stages per rank it admits (:class:`VppRule`), where its stages live (placement), which time is its step
(:class:`StepTime`), which micro-batch counts it admits, and the closed forms the planner's screen uses
instead of simulating (peak in-flight micro-batches per rank, bubble in stage units). The registry
(:mod:`shardwise.pipeline.registry`) holds one record per schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import Schedule, loop_placement, v_placement

LOOP = "loop"  # stage s on rank s % pp
V = "v"  # stages s and 2pp-1-s on rank s (two per rank)
V_WHEN_TWO = "v with vpp 2, else loop"  # auto: searched on either placement


@dataclass(frozen=True)
class VppRule:
    """Which vpp (stages per rank) a schedule admits: ``lowest <= vpp <= highest`` (None: no upper
    bound); ``default`` when vpp is not set. A V-shaped schedule holds ``fixed`` stages per rank whatever
    vpp says (it admits 1, read as "not set", and 2)."""

    code: str  # short form in JSON answers: "1", ">=2", ">=1", "2"
    label: str  # as `shardwise schedule list` shows it
    lowest: int
    highest: int | None
    default: int
    hint: str  # why a vpp is refused and what to do instead
    fixed: int | None = None

    def admits(self, vpp: int) -> bool:
        return self.lowest <= vpp and (self.highest is None or vpp <= self.highest)

    def check(self, name: str, vpp: int) -> None:
        """Raise :class:`ShardwiseError` when ``vpp`` is not admitted, naming the schedule."""
        if not self.admits(vpp):
            raise ShardwiseError(f"schedule {name!r} does not admit vpp={vpp}: {self.hint}")

    def held(self, pp: int, vpp: int) -> int:
        """Stages each of ``pp`` ranks holds when run with ``vpp``."""
        return self.fixed if self.fixed is not None and pp > 1 else vpp

    def options(self, choices: tuple[int, ...], layers: int) -> list[int]:
        """The vpp values a plan search tries, out of ``choices`` and at most ``layers``."""
        if self.fixed is not None:
            return [self.fixed]
        if self.highest == self.lowest:
            return [self.lowest]
        return [v for v in choices if self.admits(v) and v <= layers]


ONE_STAGE = VppRule("1", "1", 1, 1, 1, "it has one stage per rank (use 'interleaved' or 'bfs' for several)")
SEVERAL_STAGES = VppRule(">=2", ">= 2", 2, None, 2, "it needs at least two stages per rank (use '1f1b' for one)")
ANY_STAGES = VppRule(">=1", ">= 1", 1, None, 1, "vpp must be a positive integer")
V_SHAPED = VppRule("2", "2 (V)", 1, 2, 1, "it is V-shaped with exactly two stages per rank (omit vpp or pass 2)",
                   fixed=2)


class StepTime(Enum):
    """Which time of a simulated step is the step time (the value is what reports print).

    Classic schedules synchronise all stages at the optimizer step: a step lasts the global makespan.
    The zero-bubble family runs, as in its papers, with optimizer post-validation (Qi et al. 2024, Sec. 4):
    the optimizer step does not synchronise the stages, so the steady-state step is the longest per-rank
    span (first to last action of a rank)."""

    MAKESPAN = "global makespan (the optimizer step synchronises the stages)"
    RANK_SPAN = "longest per-rank span (zero-bubble optimizer post-validation)"


#: (pp, vpp, micro-batches, rank) -> peak in-flight micro-batches of one stage on that rank
Inflight = Callable[[int, int, np.ndarray, int], np.ndarray]
#: (pp, vpp, micro-batches) -> idle time of the critical rank in units of one stage's F+I+W
BubbleUnits = Callable[[int, int, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ScheduleInfo:
    """One pipeline schedule: how to build it and every fact the planner, the timing and the CLI use.

    ``inflight`` and ``bubble_units`` are the screen's closed forms with equal stages and F = I = W
    (vectorised over micro-batch counts; tested against the simulator: in-flight never below it, bubble
    within a third of pp stage units). ``rounds_of_pp``: with vpp > 1 the order groups micro-batches in
    rounds of about pp (:func:`.gen_classic.interleave_group`), so only counts that rounds divide are
    admitted and the steady state repeats every pp micro-batches. ``min_microbatches_per_rank``: fewer
    than that many micro-batches per rank are not admitted. ``parameters``: keywords the generator takes
    (a schedule with any is built for given stage times, e.g. ``auto``). ``planner_order``: rank among
    the schedules `train plan` searches by default, ties between equally good plans going to the lower
    (None: searched only when asked for). ``compare_with_vpp``: `schedule compare --vpp` applies to it
    (otherwise it runs with its default stages per rank). ``torch_class``: the torch.distributed.pipelining
    class whose order equals ours (``train run`` falls back to it when torch's runtime rejects our IR;
    torchtitan's ``pipeline_parallel_schedule`` names it without ``Schedule``), over the vpp range
    ``torch_vpp`` (elsewhere torchtitan runs our CSV). ``uneven_split``: ``train run`` runs an uneven layer
    split (``parallel.layer_split``) with it, one stage per rank."""

    name: str
    description: str  # one line, with its source
    build: Callable[..., Schedule]  # (pp, microbatches, vpp, **parameters) -> Schedule
    vpp_rule: VppRule
    placement: str  # LOOP, V or V_WHEN_TWO
    step_time: StepTime
    inflight: Inflight
    bubble_units: BubbleUnits
    rounds_of_pp: bool = False
    min_microbatches_per_rank: int = 0
    parameters: frozenset[str] = frozenset()
    planner_order: int | None = None
    compare_with_vpp: bool = False
    torch_class: str | None = None
    torch_vpp: tuple[int, int | None] = (1, None)
    uneven_split: bool = False

    def torch_class_at(self, vpp: int) -> str | None:
        """The torch class whose order equals ours with ``vpp`` stages per rank (None: none does)."""
        lo, hi = self.torch_vpp
        return self.torch_class if self.torch_class and lo <= vpp and (hi is None or vpp <= hi) else None

    def placement_at(self, vpp: int) -> str:
        """LOOP or V: where the stages live when run with ``vpp`` stages per rank."""
        if self.placement == V_WHEN_TWO:
            return V if vpp == 2 else LOOP
        return self.placement

    def stage_to_rank(self, pp: int, vpp: int) -> tuple[int, ...]:
        """Stage-to-rank map for ``pp`` ranks and ``vpp`` stages per rank, without generating the schedule."""
        return _placement(self.placement_at(vpp) == V, pp, vpp)

    def stages_per_rank(self, pp: int, vpp: int | None) -> int:
        """Stages each rank holds with ``vpp`` (None: the rule's default); raises :class:`ShardwiseError`
        for a vpp the schedule does not admit."""
        vpp = self.vpp_rule.default if vpp is None else int(vpp)
        self.vpp_rule.check(self.name, vpp)
        return self.vpp_rule.held(pp, vpp)

    def admits(self, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """Vectorised: which (pp, micro-batches, vpp) the generator builds (the vpp rule aside)."""
        pp, m, vpp = np.asarray(pp), np.asarray(m), np.asarray(vpp)
        ok = np.ones(np.broadcast(pp, m, vpp).shape, dtype=bool)
        if self.rounds_of_pp:
            rounds = np.maximum(1, m // pp)
            ok &= np.where(vpp > 1, m % rounds == 0, True)
        if self.min_microbatches_per_rank:
            ok &= m >= self.min_microbatches_per_rank * pp
        return ok

    @property
    def takes_costs(self) -> bool:
        """Built for given stage times and a memory cap (a search, not a fixed order)."""
        return "f_s" in self.parameters


@lru_cache(maxsize=256)
def _placement(v: bool, pp: int, vpp: int) -> tuple[int, ...]:
    """:meth:`ScheduleInfo.stage_to_rank` (cached: a pure function of the placement, pp and vpp)."""
    return tuple(v_placement(pp) if v else loop_placement(pp, vpp))
