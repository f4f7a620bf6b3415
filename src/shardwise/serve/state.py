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
    """Pooled inter-token gaps (vLLM's ITL: every gap between streamed chunks of every request)."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.weights: list[int] = []
        self.values: list[float] = []
        self.counts: list[int] = []

    def add_array(self, gaps_s: np.ndarray, weight: int) -> None:
        if weight > 0 and len(gaps_s):
            self.arrays.append(gaps_s)
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
        """(gap seconds, multiplicity) of every recorded gap."""
        vals = [np.asarray(self.values, float), *self.arrays]
        wts = [np.asarray(self.counts, float), *(np.full(len(a), w, float) for a, w in zip(self.arrays, self.weights, strict=True))]
        return np.concatenate(vals), np.concatenate(wts)
