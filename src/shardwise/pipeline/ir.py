"""Schedule IR: per pipeline rank, an ordered list of actions ``(stage, microbatch, kind)``.

The notation is PyTorch pipelining's (``torch/distributed/pipelining/schedules.py``: ``_Action``):
``2F0`` is the forward of micro-batch 0 on stage 2, ``1I3`` the input-gradient backward, ``1W3`` the
weight-gradient backward, ``0B3`` the full backward (I and W fused). Communication and FSDP markers
(``SEND_F``, ``RECV_F``, ``SEND_B``, ``RECV_B``, ``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``) may appear;
they take no compute time here (hop latency is modelled by the simulator's ``p2p_s``).

Storage is compact: per rank an ``int32`` array of shape ``(n, 3)`` holding stage, micro-batch (``-1``
when the action has none) and a kind code, so generating and simulating 50k actions stays fast.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import NamedTuple

import numpy as np

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_PIPELINE_RANKS, MAX_SCHEDULE_ACTIONS


class Kind(str, Enum):
    """Action kinds; the value is PyTorch's ``_ComputationType`` string."""

    F = "F"
    I = "I"  # noqa: E741 - PyTorch's name
    W = "W"
    B = "B"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    REDUCE_GRAD = "REDUCE_GRAD"


KINDS: tuple[Kind, ...] = tuple(Kind)
KIND_CODE: dict[Kind, int] = {k: i for i, k in enumerate(KINDS)}
F_CODE, I_CODE, W_CODE, B_CODE = 0, 1, 2, 3
COMPUTE_CODES = (F_CODE, I_CODE, W_CODE, B_CODE)

_MAX_INDEX_DIGITS = len(str(MAX_SCHEDULE_ACTIONS))
_ACTION_RE = re.compile(r"^(\d+)(F|I|W|B|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)$")


class Action(NamedTuple):
    """One action of a rank: ``str(Action(1, 3, Kind.I)) == "1I3"``."""

    stage: int
    microbatch: int  # -1 for markers without a micro-batch (e.g. ``0REDUCE_GRAD``)
    kind: Kind

    def __str__(self) -> str:
        mb = "" if self.microbatch < 0 else str(self.microbatch)
        return f"{self.stage}{self.kind.value}{mb}"


def parse_action(text: str) -> Action:
    """Parse one action in PyTorch notation (``"0F3"``, ``"2SEND_B1"``, ``"1REDUCE_GRAD"``)."""
    m = _ACTION_RE.match(text.strip())
    if m is None:
        raise ShardwiseError(
            f"cannot parse schedule action {shorten(text)}: expected [stage][kind][microbatch] such as '0F3', "
            "'1I3', '1W3' or '0B3' (kinds F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, "
            "REDUCE_GRAD)"
        )
    stage, kind, mb = m.groups()
    if kind in ("F", "I", "W", "B") and mb == "":
        raise ShardwiseError(f"schedule action {shorten(text)} has no micro-batch index: write e.g. '{stage[:8]}{kind}0'")
    for label, digits in (("stage", stage), ("micro-batch", mb)):
        if len(digits.lstrip("0")) > _MAX_INDEX_DIGITS:  # checked before int(): no 5,000-digit conversions
            raise ShardwiseError(
                f"schedule action {shorten(text)}: {label} index too large (at most {MAX_SCHEDULE_ACTIONS:,}, "
                "the most actions one schedule may hold); fix the index"
            )
    return Action(int(stage), int(mb) if mb else -1, Kind(kind))


def loop_placement(pp: int, vpp: int) -> list[int]:
    """Looped placement (Narayanan et al. 2021): stage ``s`` lives on rank ``s % pp``."""
    return [s % pp for s in range(pp * vpp)]


def v_placement(pp: int) -> list[int]:
    """V placement (Qi et al. 2024, ZB-V): rank ``r`` holds stages ``r`` and ``2pp-1-r``."""
    return [s if s < pp else 2 * pp - 1 - s for s in range(2 * pp)]


@dataclass(frozen=True, eq=False)
class Schedule:
    """A pipeline schedule: who runs what, in which order. Timing comes from :func:`simulate`.

    ``stage_to_rank[s]`` is the rank that holds stage ``s``; ``codes[r]`` is rank ``r``'s action array
    (columns stage, micro-batch, kind code). ``params`` records generator parameters (e.g. a memory cap).
    """

    name: str
    pp: int
    microbatches: int
    stage_to_rank: tuple[int, ...]
    codes: tuple[np.ndarray, ...]
    params: dict = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return len(self.stage_to_rank)

    @property
    def vpp(self) -> int:
        """Stages per rank (virtual pipeline size); 2 for V-shaped schedules."""
        return self.num_stages // self.pp

    @property
    def placement(self) -> str:
        """``"loop"`` (stage s on rank s % pp), ``"v"`` (V shape) or ``"custom"``."""
        if list(self.stage_to_rank) == loop_placement(self.pp, self.vpp):
            return "loop"
        if self.vpp == 2 and list(self.stage_to_rank) == v_placement(self.pp):
            return "v"
        return "custom"

    def rank_stages(self, rank: int) -> list[int]:
        """Stages held by ``rank``, in stage order."""
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]

    @cached_property
    def ranks(self) -> tuple[tuple[Action, ...], ...]:
        """Per rank, the ordered actions as :class:`Action` tuples (built on first use)."""
        out = []
        for arr in self.codes:
            out.append(tuple(Action(int(s), int(m), KINDS[k]) for s, m, k in arr.tolist()))
        return tuple(out)

    @property
    def num_actions(self) -> int:
        return int(sum(len(a) for a in self.codes))

    def to_text(self) -> str:
        """One line per rank, actions separated by spaces, e.g. ``0F0 0F1 0B0 ...``."""
        return "\n".join(" ".join(str(a) for a in rank) for rank in self.ranks) + "\n"

    def same_ir(self, other: Schedule) -> bool:
        """True when both schedules have the same pp, micro-batches, placement and per-rank actions."""
        return (
            self.pp == other.pp
            and self.microbatches == other.microbatches
            and self.stage_to_rank == other.stage_to_rank
            and len(self.codes) == len(other.codes)
            and all(np.array_equal(a, b) for a, b in zip(self.codes, other.codes))
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self.same_ir(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Schedule(name={self.name!r}, pp={self.pp}, vpp={self.vpp}, microbatches={self.microbatches}, "
            f"actions={self.num_actions})"
        )


def check_schedule_size(pp: int, stages_per_rank: int, actions: int, what: str) -> None:
    """Refuse, before any work, a schedule beyond MAX_PIPELINE_RANKS ranks or MAX_SCHEDULE_ACTIONS actions."""
    if pp > MAX_PIPELINE_RANKS:
        raise ShardwiseError(
            f"{what} has pp={shorten(pp)} pipeline ranks; the limit is {MAX_PIPELINE_RANKS} (see Limits in the README): "
            "use fewer pipeline ranks"
        )
    if actions > MAX_SCHEDULE_ACTIONS:
        raise ShardwiseError(
            f"{what} would hold {actions:,} compute actions ({pp} ranks x {stages_per_rank} stage(s) per rank); the limit is "
            f"{MAX_SCHEDULE_ACTIONS:,} (see Limits in the README): use fewer micro-batches, stages or ranks — the steady state "
            "repeats, so a few hundred micro-batches show every effect (`train estimate` extrapolates by itself)"
        )


def make_schedule(
    name: str,
    pp: int,
    microbatches: int,
    stage_to_rank: Sequence[int],
    rank_actions: Sequence[Sequence[int]] | Sequence[np.ndarray],
    params: dict | None = None,
) -> Schedule:
    """Build a :class:`Schedule` from per-rank flat int lists ``[s, mb, kind, s, mb, kind, ...]``
    (or ``(n, 3)`` arrays). Generators use this; it does not validate (see :mod:`.validate`)."""
    codes = []
    for acts in rank_actions:
        arr = np.asarray(acts, dtype=np.int32)
        codes.append(arr.reshape(-1, 3))
    return Schedule(
        name=name,
        pp=int(pp),
        microbatches=int(microbatches),
        stage_to_rank=tuple(int(r) for r in stage_to_rank),
        codes=tuple(codes),
        params=dict(params or {}),
    )


def infer_stage_to_rank(rows: Sequence[Iterable[Action]]) -> list[int]:
    """Infer the stage -> rank map from which rank runs which stage; a stage on two ranks is an error."""
    owner: dict[int, int] = {}
    for rank, row in enumerate(rows):
        for a in row:
            prev = owner.setdefault(a.stage, rank)
            if prev != rank:
                raise ShardwiseError(
                    f"stage {a.stage} appears on rank {prev} and on rank {rank} (action {a}); each stage "
                    "must live on exactly one rank: fix the stage index of the offending action"
                )
    if not owner:
        raise ShardwiseError("the schedule has no actions: give at least one row with actions such as '0F0'")
    num_stages = max(owner) + 1
    missing = [s for s in range(num_stages) if s not in owner]
    if missing:
        raise ShardwiseError(
            f"stages {missing} never appear although stage {num_stages - 1} does; every stage from 0 to "
            "the last must have actions"
        )
    return [owner[s] for s in range(num_stages)]


def schedule_from_rows(
    rows: Sequence[Sequence[Action]],
    name: str = "imported",
    microbatches: int | None = None,
    stage_to_rank: Sequence[int] | None = None,
) -> Schedule:
    """Build a schedule from per-rank action lists (text or CSV import); pp = number of rows.

    ``microbatches`` defaults to the largest micro-batch index + 1; ``stage_to_rank`` is inferred.
    """
    pp = len(rows)
    if pp == 0:
        raise ShardwiseError("the schedule has no ranks: give one row of actions per pipeline rank")
    check_schedule_size(pp, 1, sum(len(row) for row in rows), "the schedule")
    if stage_to_rank is None:
        stage_to_rank = infer_stage_to_rank(rows)
    mbs = [a.microbatch for row in rows for a in row if a.microbatch >= 0]
    if microbatches is None:
        microbatches = max(mbs) + 1 if mbs else 0
    if microbatches * len(stage_to_rank) > MAX_SCHEDULE_ACTIONS:
        raise ShardwiseError(
            f"the schedule names micro-batch {microbatches - 1:,} on {len(stage_to_rank)} stage(s): a complete schedule would "
            f"hold {microbatches * len(stage_to_rank):,} forward actions, beyond the limit of {MAX_SCHEDULE_ACTIONS:,} "
            "(see Limits in the README); fix the micro-batch indices"
        )
    if max(stage_to_rank) >= pp:
        raise ShardwiseError(
            f"stage-to-rank map names rank {max(stage_to_rank)} but the schedule has only {pp} rows (ranks)"
        )
    codes = []
    for row in rows:
        codes.append([v for a in row for v in (a.stage, a.microbatch, KIND_CODE[a.kind])])
    return make_schedule(name, pp, microbatches, stage_to_rank, codes)


def from_text(text: str, name: str = "imported", microbatches: int | None = None) -> Schedule:
    """Parse the text form: one line per rank, actions separated by spaces or commas.

    Blank lines in the middle are ranks with no actions; trailing blank lines are ignored.
    """
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    rows = [[parse_action(tok) for tok in re.split(r"[,\s]+", line.strip()) if tok] for line in lines]
    return schedule_from_rows(rows, name=name, microbatches=microbatches)
