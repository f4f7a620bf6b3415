"""One iteration's batch: the requests the generator serves, and the packed rows the trainer runs.

The batch is ``prompts_per_step`` prompts, each sampled ``group`` times (GRPO's group shares its prompt, so a
prompt's length is drawn once and repeated), sent to the generator all at once (an offline batch, as verl,
OpenRLHF and NeMo-RL submit it). Response lengths come from the job's distribution, cut at its maximum.

Packing (verl ``use_remove_padding`` with dynamic batch size, OpenRLHF ``--packing_samples``): sequences of
prompt + response are placed in rows of ``pack_len`` tokens by best-fit decreasing (each sequence, longest
first, into the fullest row it still fits; Johnson 1974: at most 11/9 OPT + 4 rows). Without packing each
sequence is a padded row of the longest sequence.

An optimizer step's rows are rounded up to micro-batch x data-parallel ranks. Packed by a token budget, the
step's tokens are spread over those rows (verl balances sequence lengths over the data-parallel ranks,
``seqlen_balancing``), so a step with fewer tokens than full rows runs shorter rows: each as long as the
step's tokens per row, but no shorter than the longest sequence (it cannot be split) and no longer than the
budget. Unpacked, every row is padded to the longest sequence.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from shardwise.serve.lengths import LengthSpec, describe_lengths, sample_lengths
from shardwise.serve.workload import Requests


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
class TrainBatch:
    """The packed batch the training GPUs run: rows per optimizer step of `seq_len` tokens."""

    seq_len: int  # tokens per row
    rows: int  # rows of the whole batch (before rounding to the data-parallel layout)
    tokens: int  # real tokens (prompt + response) of the batch
    packed: bool
    longest: int = 0  # the longest sequence (prompt + response); 0: seq_len

    @property
    def fill(self) -> float:
        """Real tokens over row tokens."""
        return self.tokens / (self.rows * self.seq_len)

    def rows_per_step(self, mini_batches: int, per_step: int) -> int:
        """Rows of one optimizer step: the batch split into `mini_batches`, rounded up to a multiple of
        micro_batch x dp (`per_step`; the padding rows are counted as work)."""
        rows = math.ceil(self.rows / mini_batches)
        return max(per_step, math.ceil(rows / per_step) * per_step)

    def row_len(self, mini_batches: int, per_step: int) -> int:
        """Tokens per row of one optimizer step (module docstring): packed, the step's tokens over its rows,
        between the longest sequence and the budget; unpacked, the padded length."""
        if not self.packed:
            return self.seq_len
        spread = math.ceil(self.tokens / mini_batches / self.rows_per_step(mini_batches, per_step) / 128) * 128
        return min(self.seq_len, max(self.longest or self.seq_len, spread))


def train_batch(requests: Requests, packing: bool, pack_len: int | None) -> TrainBatch:
    """Rows of the training batch from the generated lengths (module docstring)."""
    seq = requests.input_len + requests.output_len
    longest = int(seq.max())
    if not packing:
        return TrainBatch(longest, len(seq), int(seq.sum()), False, longest)
    row = max(pack_len or longest, longest)
    return TrainBatch(row, pack_rows(seq, row), int(seq.sum()), True, longest)
