"""Per-request state shared by the engines of one simulation, and the pooled inter-token-latency record.

Request-indexed Python lists (fast scalar access on the hot path) hold the scheduler's working state;
numpy arrays hold what the metrics read. ITL samples are stored as (value array, weight) pairs so a
decode stretch of n steps with B running sequences costs one array, not n*B floats.
"""

from __future__ import annotations

import numpy as np

from shardwise.serve.workload import Requests

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class RequestTable:
    """Timestamps (what the metrics read) and scheduler state for every request of a run."""

    def __init__(self, requests: Requests, engine_arrival_s: np.ndarray | None = None):
        n = len(requests)
        self.requests = requests
        self.n = n
        self.send_s = requests.arrival_s  # client send time
        self.arrival_s = requests.arrival_s if engine_arrival_s is None else engine_arrival_s
        self.arrival = self.arrival_s.tolist()  # the same, as floats for the engines' scalar reads
        self.first_s = np.full(n, np.nan)  # first token
        self.finish_s = np.full(n, np.nan)  # last token
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.prompt = requests.input_len.tolist()
        self.output = requests.output_len.tolist()
        group = requests.prefix_group if requests.prefix_group is not None else np.zeros(n, dtype=np.int64)
        self.group = group.tolist()
        self.session = requests.session.tolist() if requests.session is not None else None  # conversation ids
        # scheduler working state
        self.phase = [WAITING] * n
        self.generated = [0] * n  # tokens emitted so far
        self.target = [0] * n  # tokens the current prefill must put in the KV cache
        self.computed = [0] * n  # tokens of the current prefill already in the KV cache
        self.prefix_hit = [0] * n  # tokens served from the prefix cache (a multiple of block_size)
        self.kv_at_decode_start = [0] * n  # KV tokens when the request started decoding ...
        self.step_at_decode_start = [0] * n  # ... at this decode-step count of its engine
        self.version = [0] * n  # invalidates stale finish-heap entries after a preemption
        self.last_emit = [0.0] * n  # last token time, kept while a request is preempted
        self.prefilled = [False] * n  # arrives with its prompt already in KV (disaggregated decode pool)
        self.adapter: list[int] | None = None  # each request's LoRA adapter, when the pool serves adapters


class ITLRecord:
    """Pooled inter-token gaps (vLLM's ITL: every gap between streamed chunks of every request).

    Gaps come as single values with a count, as arrays with a weight, or as ramps with a weight: a decode
    stretch's gaps ``first + slope * j`` for ``j`` in ``[start, start + count)``, kept as four numbers and
    expanded (to the same floats, in the same order) only when :meth:`samples` is read."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray | tuple[float, float, int, int]] = []  # an array or a ramp
        self.weights: list[int] = []
        self.values: list[float] = []
        self.counts: list[int] = []

    def add_array(self, gaps_s: np.ndarray, weight: int) -> None:
        if weight > 0 and len(gaps_s):
            self.arrays.append(gaps_s)
            self.weights.append(weight)

    def add_ramp(self, first_s: float, slope_s: float, start: int, count: int, weight: int) -> None:
        """The gaps ``first_s + slope_s * j`` for ``j = start .. start + count - 1``, each ``weight`` times."""
        if weight > 0 and count > 0:
            self.arrays.append((first_s, slope_s, start, count))
            self.weights.append(weight)

    def add(self, gap_s: float, count: int = 1) -> None:
        if count > 0:
            self.values.append(gap_s)
            self.counts.append(count)

    def extend(self, other: ITLRecord) -> None:
        self.arrays += other.arrays
        self.weights += other.weights
        self.values += other.values
        self.counts += other.counts

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap seconds, multiplicity) of every recorded gap: the single values, then each array or ramp in
        the order recorded."""
        vals = [np.asarray(self.values, float)]
        ramps = [a for a in self.arrays if isinstance(a, tuple)]
        if not ramps:
            vals += self.arrays
        else:  # every ramp at once: first + slope * j, the floats numpy's first + slope * arange(n) gives
            first, slope, start, count = (np.asarray(x) for x in zip(*ramps, strict=True))
            ends = np.cumsum(count)
            j = np.arange(int(ends[-1])) - np.repeat(ends - count - start, count)
            expanded = np.repeat(first, count) + np.repeat(slope, count) * j
            if len(ramps) == len(self.arrays):
                vals.append(expanded)
            else:
                pieces = iter(np.split(expanded, ends[:-1]))
                vals += [next(pieces) if isinstance(a, tuple) else a for a in self.arrays]
        sizes = [a[3] if isinstance(a, tuple) else len(a) for a in self.arrays]
        wts = [np.asarray(self.counts, float), np.repeat(np.asarray(self.weights, float), sizes)]
        return np.concatenate(vals), np.concatenate(wts)
