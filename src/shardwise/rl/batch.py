"""One iteration's batch: the requests the generator serves, and the packed rows the trainer runs.

The batch is ``prompts_per_step`` prompts, each sampled ``group`` times (GRPO's group shares its prompt, so a
prompt's length is drawn once and repeated), sent to the generator all at once (an offline batch, as verl,
OpenRLHF and NeMo-RL submit it). Response lengths come from the job's distribution, cut at its maximum.

Packing (verl ``use_remove_padding`` with ``use_dynamic_bsz``, OpenRLHF ``--packing_samples``): the sequences of
prompt + response run without padding, concatenated into micro-batches of at most a token budget per
data-parallel rank (verl: ``ppo_max_token_len_per_gpu`` x the Ulysses degree, ``dp_actor.update_policy``), and
attention runs within each sequence (FlashAttention-2's variable-length kernel over ``cu_seqlens``, Dao 2023
Sec. 3; verl's remove-padding path). :meth:`TrainBatch.layout` turns that into rows the training estimate
costs (:class:`StepLayout`):

- **attention span**: a row of L tokens costs every token attention over L/2 keys (causal), so rows as long
  as the token-weighted mean sequence length L = sum s^2 / sum s give the batch's own attention FLOPs
  sum_i s_i^2 (and its linear FLOPs, which only count tokens); costing a whole budget as one sequence
  would count attention across sequences that never see each other.
- **data-parallel balance** (verl ``trainer.balance_batch``, ``seqlen_balancing.get_seqlen_balanced_partitions``):
  the batch is split into one equal-count part per data-parallel rank, balanced by tokens (here greedy
  longest-first into the lightest part with room, where verl runs Karmarkar-Karp: both balance the totals);
  each rank splits its part, in batch order, into ``mini_batches`` consecutive mini-batches
  (``data.split(ppo_mini_batch_size)``), and every optimizer step waits for its busiest rank (the gradient
  reduction and FSDP's per-layer collectives are synchronous). A step is costed as every rank running the
  busiest rank's work: sum over steps of max over ranks, which grows as fewer sequences fall to each rank
  (more GPUs, more mini-batches, heavier tails). The work of a sequence is its forward FLOPs,
  s (a + b s) (:func:`shardwise.cost.flops.model_flops_per_token`, causal).
- **micro-batches**: ceil(busiest tokens / budget) per rank and step (verl ``rearrange_micro_batches``, the
  same count on every rank), each of rows of the attention span.

Without packing each sequence is a padded row of the longest sequence (every rank the same work).
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from shardwise.cost.flops import model_flops_per_token
from shardwise.serve.lengths import LengthSpec, describe_lengths, sample_lengths
from shardwise.serve.workload import Requests
from shardwise.specs.model import ModelSpec


def draw_batch(input_len: LengthSpec, output_len: LengthSpec, prompts: int, group: int, seed: int, max_model_len: int | None = None) -> Requests:
    """The generator's requests: `prompts` x `group` responses, all sent at t = 0 (module docstring)."""
    rng = np.random.default_rng(seed)
    inp = np.repeat(sample_lengths(input_len, prompts, rng, "input"), group)
    out = sample_lengths(output_len, prompts * group, rng, "output")
    if max_model_len is not None:
        inp = np.minimum(inp, max_model_len - 1)
        out = np.minimum(out, np.maximum(max_model_len - inp, 1))
    n = len(out)
    lengths = {"input": describe_lengths(input_len), "output": describe_lengths(output_len)}
    return Requests(np.zeros(n), inp.astype(np.int64), out.astype(np.int64), 0, np.arange(n, dtype=np.int64) // group, lengths)


def pack_rows(seq_lens: np.ndarray, pack_len: int) -> int:
    """Rows of `pack_len` tokens that hold every sequence, by best-fit decreasing (module docstring)."""
    free: list[int] = []  # free tokens of each open row, sorted
    for length in sorted((int(x) for x in seq_lens), reverse=True):
        k = bisect.bisect_left(free, length)
        if k < len(free):
            left = free.pop(k) - length
        else:
            left = pack_len - length
        bisect.insort(free, left)
    return len(free)


@dataclass(frozen=True)
class StepLayout:
    """One optimizer step (or forward pass) as the training estimate runs it (module docstring): on each
    data-parallel rank, `micro_batches` micro-batches of `rows` rows of `row_len` tokens."""

    row_len: int  # tokens per row: the attention span (packed) or the padded length
    rows: int  # rows per micro-batch (the estimate's micro_batch)
    micro_batches: int  # per rank and step
    rank_tokens: float  # tokens the busiest rank runs per step, in the batch's mean work per token
    mean_tokens: float  # tokens per rank and step were the batch split evenly
    imbalance: float  # busiest rank's work over the mean rank's (mean over the steps)

    def to_dict(self) -> dict[str, float]:
        return {"row_len": self.row_len, "rows_per_micro_batch": self.rows, "micro_batches": self.micro_batches,
                "busiest_rank_tokens": self.rank_tokens, "mean_rank_tokens": self.mean_tokens, "dp_imbalance": self.imbalance}


def balanced_parts(lengths: np.ndarray, parts: int) -> list[np.ndarray]:
    """Indices of `lengths` in `parts` parts of equal count (+-1), balanced by total length: longest first
    into the lightest part that has room (module docstring); each part in batch order."""
    n = len(lengths)
    cap = [n // parts + (1 if k < n % parts else 0) for k in range(parts)]
    heap = [(0, k) for k in range(parts) if cap[k] > 0]
    heapq.heapify(heap)
    members: list[list[int]] = [[] for _ in range(parts)]
    for i in np.argsort(-lengths, kind="stable"):
        load, k = heapq.heappop(heap)
        members[k].append(int(i))
        if len(members[k]) < cap[k]:
            heapq.heappush(heap, (load + int(lengths[i]), k))
    return [np.sort(np.array(m, dtype=np.int64)) for m in members]


@dataclass(frozen=True)
class TrainBatch:
    """The batch the training GPUs run: its sequences (prompt + response tokens) and how they are packed."""

    seq_len: int  # the longest row: the budget per row (packed) or the longest sequence (padded)
    rows: int  # packed rows of seq_len that hold the batch (best-fit decreasing)
    tokens: int  # real tokens (prompt + response) of the batch
    packed: bool
    longest: int = 0  # the longest sequence (prompt + response); 0: seq_len
    lengths: np.ndarray | None = field(default=None, compare=False, repr=False)  # every sequence, batch order

    @property
    def fill(self) -> float:
        """Real tokens over row tokens."""
        return self.tokens / (self.rows * self.seq_len)

    @property
    def attention_span(self) -> int:
        """Token-weighted mean sequence length sum s^2 / sum s (module docstring)."""
        if self.lengths is None or not len(self.lengths):
            return self.seq_len
        s = self.lengths.astype(np.float64)
        return max(1, round(float(np.sum(s * s) / np.sum(s))))

    def layout(self, model: ModelSpec, dp: int, mini_batches: int, micro_rows: int, quantum: int = 1) -> StepLayout:
        """Rows, micro-batches and the data-parallel balance of one step of `mini_batches` (module docstring);
        `micro_rows` x seq_len is the micro-batch's token budget per rank; packed rows are a multiple of
        `quantum` tokens (the ranks a row is split over: context x tensor parallel)."""
        if not self.packed or self.lengths is None:
            rows = math.ceil(self.rows / mini_batches)
            per_rank = max(1, math.ceil(rows / dp))
            m = math.ceil(per_rank / micro_rows)
            mean = self.tokens / mini_batches / dp
            return StepLayout(self.seq_len, micro_rows, m, mean, mean, 1.0)
        key = (self.lengths.tobytes(), model, dp, mini_batches, micro_rows, self.seq_len, quantum)
        if key not in _LAYOUTS:
            if len(_LAYOUTS) > 256:
                _LAYOUTS.clear()
            _LAYOUTS[key] = self._packed_layout(model, dp, mini_batches, micro_rows, quantum)
        return _LAYOUTS[key]

    def _packed_layout(self, model: ModelSpec, dp: int, mini_batches: int, micro_rows: int, quantum: int) -> StepLayout:
        assert self.lengths is not None
        s = self.lengths.astype(np.float64)
        a = model_flops_per_token(model, 0, causal=True)
        b = model_flops_per_token(model, 1, causal=True) - a
        work = s * (a + b * s)
        per_token = float(work.sum() / s.sum())
        busiest = []
        for part in balanced_parts(self.lengths, dp):
            busiest.append([float(work[c].sum()) for c in np.array_split(part, mini_batches)])
        per_step = np.array(busiest).max(axis=0)  # the busiest rank of each mini-batch
        mean_work = float(work.sum()) / mini_batches / dp
        rank_tokens = float(per_step.mean()) / per_token
        budget = micro_rows * self.seq_len
        m = max(1, math.ceil(rank_tokens / budget))
        span = self.attention_span
        k = max(1, round(rank_tokens / m / span))
        row = max(1, round(rank_tokens / m / k / quantum)) * quantum
        return StepLayout(row, k, m, rank_tokens, self.tokens / mini_batches / dp, float(per_step.mean()) / mean_work)


_LAYOUTS: dict[tuple, StepLayout] = {}


def train_batch(requests: Requests, packing: bool, pack_len: int | None) -> TrainBatch:
    """The training batch from the generated lengths (module docstring)."""
    seq = (requests.input_len + requests.output_len).astype(np.int64)
    longest = int(seq.max())
    if not packing:
        return TrainBatch(longest, len(seq), int(seq.sum()), False, longest, seq)
    row = max(pack_len or longest, longest)
    return TrainBatch(row, pack_rows(seq, row), int(seq.sum()), True, longest, seq)
