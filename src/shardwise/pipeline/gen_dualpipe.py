"""DualPipeV: DeepSeek's DualPipe folded into a V (two stages per rank).

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), Sec. 3.2.1 and
github.com/deepseek-ai/DualPipe; the step structure below is the one PyTorch's ``ScheduleDualPipeV``
implements. DualPipe overlaps the forward of one chunk with the backward of another to hide MoE
all-to-all communication; the IR has no overlap primitive, so an overlapped pair is written as the
forward followed by the full backward (compute is serial on the device either way; the overlap hides
communication, which this engine models as hop latency only).
"""

from __future__ import annotations

from collections import deque

from shardwise.errors import ShardwiseError
from shardwise.pipeline.ir import B_CODE, F_CODE, I_CODE, W_CODE


def dualpipev(pp: int, m: int) -> list[list[int]]:
    """DualPipeV order per rank (eight steps: F0 warm-up; F0F1; I1W1F1; overlapped F0B1/F1B0 main
    phase; B1 + F1B0; B1B0 with the second half switching to zero-bubble I; W0B0; W drain)."""
    if m < 2 * pp:
        raise ShardwiseError(
            f"dualpipev needs at least 2*pp = {2 * pp} micro-batches (one per stage of the V); got {m}. "
            f"Raise --microbatches to >= {2 * pp} or use zbv"
        )
    return [_dualpipev_rank(pp, m, r) for r in range(pp)]


def _dualpipev_rank(pp: int, m: int, r: int) -> list[int]:
    """Rank ``r``'s DualPipeV order; stages ``r`` (chunk 0) and ``2pp-1-r`` (chunk 1)."""
    s0, s1 = r, 2 * pp - 1 - r
    nf = {s0: 0, s1: 0}  # next forward micro-batch per stage
    nb = {s0: 0, s1: 0}  # next backward micro-batch per stage
    wq: deque[tuple[int, int]] = deque()
    acts: list[int] = []

    def fwd(s: int) -> None:
        acts.extend((s, nf[s], F_CODE))
        nf[s] += 1

    def bwd(s: int, split: bool) -> None:
        if split:
            acts.extend((s, nb[s], I_CODE))
            wq.append((s, nb[s]))
        else:
            acts.extend((s, nb[s], B_CODE))
        nb[s] += 1

    def weight() -> None:
        if wq:
            s, k = wq.popleft()
            acts.extend((s, k, W_CODE))

    for _ in range(2 * (pp - r - 1)):  # step 1: F0
        fwd(s0)
    for _ in range(r + 1):  # step 2: F0 F1
        fwd(s0)
        fwd(s1)
    for _ in range(pp - r - 1):  # step 3: I1 W1 F1
        bwd(s1, True)
        weight()
        fwd(s1)
    for _ in range(m - 2 * pp + r + 1):  # step 4: (F0 & B1), (F1 & B0)
        fwd(s0)
        bwd(s1, False)
        fwd(s1)
        bwd(s0, False)
    for _ in range(pp - r - 1):  # step 5: B1, (F1 & B0)
        bwd(s1, False)
        fwd(s1)
        bwd(s0, False)
    split = False
    half = (r + 1) // 2
    for i in range(r + 1):  # step 6: B1 B0, zero-bubble from the middle on
        if i == half and r % 2 == 1:
            split = True
        bwd(s1, split)
        if i == half and r % 2 == 0:
            split = True
        bwd(s0, split)
    for _ in range(pp - r - 1):  # step 7: W0 B0
        weight()
        bwd(s0, split)
    while wq:  # step 8: drain W
        weight()
    return acts
