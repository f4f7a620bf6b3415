"""Serving workloads: when requests arrive and how long their prompts and outputs are.

Arrivals follow `vllm bench serve` (vllm/benchmarks/serve.py::get_request): Poisson, or Gamma
inter-arrival gaps with shape k = 1/cv^2 and scale 1/(rate*k) (vLLM's `burstiness` is k), or fixed
gaps; the cumulative gaps are rescaled so the last request is sent at num_requests/rate, as vLLM does
to stabilise throughput across seeds. rate = inf sends every request at t = 0 (offline throughput).
Lengths are fixed, uniform, ShareGPT-like (see :mod:`shardwise.serve.lengths`) or read from a trace:
a trace's own token counts are used unless ``input_len`` / ``output_len`` is given explicitly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shardwise.errors import ShardwiseError, shorten
from shardwise.limits import MAX_GAMMA_CV, MAX_SEQUENCE_TOKENS, MAX_SERVE_REQUESTS
from shardwise.serve.lengths import LengthSpec, describe_lengths, sample_lengths
from shardwise.serve.trace import read_trace
from shardwise.specs._loading import parse_block, path_exists

#: Speculative-decoding proposers a job may name (:class:`shardwise.serve.config.SpeculativeSpec`).
SPEC_METHODS = ("draft", "eagle", "eagle3", "mtp", "ngram")


class SessionSpec(BaseModel):
    """Multi-turn conversations (`workload.sessions`): each turn's prompt repeats the conversation so far."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    turns: int = Field(default=4, gt=0, le=10000, description="turns per conversation (its last turn may be cut by num_requests)")
    turn_gap_s: float = Field(default=10.0, ge=0, le=1e6, description="seconds between a conversation's turns (open "
                              "loop: a turn is sent this long after the one before, replied or not)")


class WorkloadSpec(BaseModel):
    """The `workload:` block of a serve job."""

    model_config = ConfigDict(extra="forbid")  # rate may be inf (offline); cv's bounds refuse inf and NaN

    arrival: Literal["poisson", "gamma", "fixed", "trace"] = Field(default="poisson", description="how send "
                                                                   "times are drawn (as `vllm bench serve`)")
    rate: float | str | None = Field(default=None, description="requests/s; 'inf' = all at t=0; with a trace: rescale to this mean rate")
    num_requests: int | None = Field(default=None, gt=0, le=MAX_SERVE_REQUESTS, description="requests to send (all of a trace's by default)")
    input_len: LengthSpec | None = Field(default=None, description="prompt tokens: a number, a distribution name, or a length "
                                         "mapping; default: a trace's own lengths, else ShareGPT-like")
    output_len: LengthSpec | None = Field(default=None, description="output tokens: a number, a distribution name, or a length "
                                          "mapping; default: a trace's own lengths, else ShareGPT-like")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="random seed of arrivals and lengths")
    cv: float = Field(default=1.0, gt=0, le=MAX_GAMMA_CV, description="coefficient of variation of gamma inter-arrival gaps")
    path: str | None = Field(default=None, description="CSV trace: timestamp, input tokens, output tokens (Azure LLM trace layout)")
    prefix_len: int = Field(default=0, ge=0, le=MAX_SEQUENCE_TOKENS, description="tokens of a shared system prompt inside input_len (for prefix caching)")
    prefix_groups: int = Field(default=1, gt=0, le=MAX_SERVE_REQUESTS, description="distinct shared prefixes; request (or conversation) i uses prefix i mod groups")
    sessions: SessionSpec | None = Field(default=None, description="multi-turn conversations: input_len / output_len "
                                         "are each turn's new user tokens and reply; a turn's prompt is the system "
                                         "prompt (prefix_len), every earlier turn and reply, and its own message")
    acceptance_rate: float | dict[str, float] | None = Field(
        default=None, description="speculative decoding on this data: the chance each drafted token is accepted, one "
                                  "number or per method ({eagle3: 0.8, ngram: 0.4})")

    @field_validator("input_len", "output_len", mode="before")
    @classmethod
    def _length(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("give a number of tokens or {dist: ...}")
        if isinstance(v, int | float):
            return {"dist": "fixed", "value": v}
        if isinstance(v, str):
            return {"dist": v}
        return v

    @field_validator("acceptance_rate")
    @classmethod
    def _acceptance(cls, v: Any) -> Any:
        values = v.values() if isinstance(v, dict) else [] if v is None else [v]
        for x in values:
            if not 0.0 <= x < 1.0:
                raise ValueError(f"an acceptance rate is a probability in [0, 1), got {x}")
        if isinstance(v, dict):
            unknown = sorted(set(v) - set(SPEC_METHODS))
            if unknown:
                raise ValueError(f"acceptance_rate: unknown method(s) {', '.join(unknown)}; use {', '.join(SPEC_METHODS)}")
        return v

    def acceptance_for(self, method: str) -> float | None:
        """The acceptance rate of `method` on this workload (None: not given)."""
        a = self.acceptance_rate
        return a.get(method) if isinstance(a, dict) else a

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, str):
            if v.strip().lower() in {"inf", "infinity", "offline"}:
                return math.inf
            try:
                v = float(v)
            except ValueError:
                raise ValueError(f"rate must be a number of requests/s or 'inf', got {shorten(v)}") from None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"rate must be a number of requests/s or 'inf', got {shorten(v)}")
        if not v > 0:
            raise ValueError(f"rate must be positive (requests/s), got {v}; use 'inf' for offline throughput")
        return float(v)

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.arrival == "trace":
            if not self.path:
                raise ValueError("arrival 'trace' needs path: a CSV with timestamp, input tokens, output tokens")
        else:
            if self.rate is None:
                raise ValueError(f"arrival '{self.arrival}' needs rate (requests/s, or 'inf')")
            if self.num_requests is None:
                raise ValueError("num_requests is required unless arrival is 'trace'")
            if any(x is not None and x.dist == "trace" for x in (self.input_len, self.output_len)):
                raise ValueError("lengths {dist: trace} need arrival: trace with a path")
        if self.sessions is not None and self.arrival == "trace":
            raise ValueError("sessions build conversations from drawn lengths; a trace gives its conversations in a "
                             "session column instead (drop sessions)")
        return self

    def length_spec(self, which: str) -> LengthSpec:
        """The `input_len` or `output_len` in force: as given, else the trace's own, else ShareGPT-like."""
        given = self.input_len if which == "input" else self.output_len
        if given is not None:
            return given
        return LengthSpec(dist="trace" if self.arrival == "trace" else "sharegpt")


@dataclass(frozen=True)
class Requests:
    """A concrete request list, sorted by arrival; all arrays have one entry per request."""

    arrival_s: np.ndarray  # float64, seconds from the start of the run
    input_len: np.ndarray  # int64 prompt tokens (prefix included)
    output_len: np.ndarray  # int64 generated tokens (>= 1)
    prefix_len: int = 0
    prefix_group: np.ndarray | None = None  # int64 shared-prefix id per request
    lengths: dict[str, str] | None = None  # where the input and output lengths came from (for the report)
    session: np.ndarray | None = None  # int64 conversation id per request (multi-turn traffic); None: none

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0:
            raise ShardwiseError("the workload has no requests; give num_requests > 0 or a non-empty trace")
        if len(self.input_len) != n or len(self.output_len) != n:
            raise ShardwiseError("arrival, input and output arrays must have the same length")
        if np.any(self.input_len < 1) or np.any(self.output_len < 1):
            raise ShardwiseError("every request needs at least 1 input and 1 output token")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ShardwiseError("request arrivals must be sorted in time")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def mean_rate(self) -> float:
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return math.inf if span <= 0 else (len(self) - 1) / span

    def subset(self, mask: np.ndarray) -> Requests:
        group = None if self.prefix_group is None else self.prefix_group[mask]
        session = None if self.session is None else self.session[mask]
        return Requests(self.arrival_s[mask], self.input_len[mask], self.output_len[mask], self.prefix_len, group, self.lengths, session)


def arrival_times(kind: str, rate: float, n: int, rng: np.random.Generator, cv: float = 1.0) -> np.ndarray:
    """Send times as `vllm bench serve` draws them (see the module docstring)."""
    if n <= 0:
        raise ShardwiseError(f"num_requests must be positive, got {n}")
    if not rate > 0:
        raise ShardwiseError(f"rate must be positive (requests/s), got {rate}")
    if math.isinf(rate):
        return np.zeros(n)
    if kind == "fixed":
        gaps = np.full(n, 1.0 / rate)
    elif kind == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif kind == "gamma":
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    else:
        raise ShardwiseError(f"unknown arrival {kind!r}; use poisson, gamma, fixed or trace")
    times = np.cumsum(gaps)
    if not times[-1] > 0:  # every gap underflowed to zero (very bursty gamma): all sent at once
        return np.zeros(n)
    return times * ((n / rate) / times[-1])


def build_requests(spec: WorkloadSpec | dict[str, Any], base_dir: Path | None = None, max_len: int | None = None) -> Requests:
    """Draw a concrete request list from a workload spec (deterministic for a given seed)."""
    if isinstance(spec, dict):
        spec = parse_block(WorkloadSpec, spec, "workload")
    rng = np.random.default_rng(spec.seed)
    if spec.arrival == "trace":
        path = Path(spec.path or "")
        if base_dir is not None and not path.is_absolute() and not path_exists(path):
            path = base_dir / path
        t, inp, out, trace_sessions = read_trace(path, spec.num_requests, sessions=True)
        if spec.num_requests is not None:
            t, inp, out = t[: spec.num_requests], inp[: spec.num_requests], out[: spec.num_requests]
            trace_sessions = None if trace_sessions is None else trace_sessions[: spec.num_requests]
        t = t - t[0]
        if spec.rate is not None:
            if math.isinf(spec.rate):
                t = np.zeros_like(t)
            elif t[-1] > 0:
                t = t * ((len(t) - 1) / spec.rate / t[-1])
        n = len(t)
        if spec.length_spec("input").dist != "trace":
            inp = sample_lengths(spec.length_spec("input"), n, rng, "input")
        if spec.length_spec("output").dist != "trace":
            out = sample_lengths(spec.length_spec("output"), n, rng, "output")
        session = trace_sessions
    elif spec.sessions is not None:
        return _conversations(spec, rng, max_len)
    else:
        n = int(spec.num_requests or 0)
        rate = float(spec.rate)  # type: ignore[arg-type]
        t = arrival_times(spec.arrival, rate, n, rng, spec.cv)
        inp, out = _draw_lengths(spec, n, rng)
        session = None
    if max_len is not None:
        inp = np.minimum(inp, max_len - 1)
        out = np.minimum(out, np.maximum(max_len - inp, 1))
    if spec.prefix_len and np.any(inp < spec.prefix_len):
        raise ShardwiseError(f"workload.prefix_len ({spec.prefix_len}) is longer than some prompts; lower it or raise input_len")
    owner = np.arange(n, dtype=np.int64) if session is None else session  # a conversation keeps its system prompt
    group = owner % spec.prefix_groups
    lengths = {w: describe_lengths(spec.length_spec(w)) for w in ("input", "output")}
    return Requests(np.asarray(t, float), np.asarray(inp, np.int64), np.asarray(out, np.int64), spec.prefix_len, group, lengths, session)


def _conversations(spec: WorkloadSpec, rng: np.random.Generator, max_len: int | None) -> Requests:
    """Multi-turn traffic (`workload.sessions`): conversations start by the arrival process at rate / turns
    (so turns arrive at `rate`); turn t is sent (t - 1) x turn_gap_s after the first; its prompt is the
    system prompt (prefix_len), the earlier turns' messages and replies and its own message (derived: a
    chat completion resends the history). A conversation stops early where a turn would exceed max_len."""
    assert spec.sessions is not None
    n = int(spec.num_requests or 0)
    turns, gap = spec.sessions.turns, spec.sessions.turn_gap_s
    count = -(-n // turns)
    rate = float(spec.rate)  # type: ignore[arg-type]
    starts = arrival_times(spec.arrival, rate / turns if math.isfinite(rate) else rate, count, rng, spec.cv)
    msg, reply = _draw_lengths(spec, count * turns, rng)
    t, inp, out, sess = [], [], [], []
    limit = max_len or 10**12
    for c in range(count):
        history = spec.prefix_len
        for k in range(turns):
            if len(t) == n:
                break
            i = c * turns + k
            prompt = history + int(msg[i])
            if prompt + 1 > limit:
                break
            t.append(starts[c] + k * gap)
            inp.append(prompt)
            out.append(max(1, min(int(reply[i]), limit - prompt)))
            sess.append(c)
            history = prompt + out[-1]
    order = np.argsort(np.asarray(t), kind="stable")
    m = len(t)
    group = np.asarray(sess, np.int64)[order] % spec.prefix_groups
    lengths = {w: describe_lengths(spec.length_spec(w)) + " per turn" for w in ("input", "output")}
    return Requests(np.asarray(t, float)[order], np.asarray(inp, np.int64)[order], np.asarray(out, np.int64)[order],
                    spec.prefix_len, group if m else None, lengths, np.asarray(sess, np.int64)[order])


def _draw_lengths(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """ShareGPT input and output lengths are drawn jointly (the dataset filter caps their sum)."""
    inp, out = spec.length_spec("input"), spec.length_spec("output")
    if inp.dist == "sharegpt" and out.dist == "sharegpt":
        from shardwise.serve.lengths import sharegpt_pairs

        return sharegpt_pairs(n, rng)
    return sample_lengths(inp, n, rng, "input"), sample_lengths(out, n, rng, "output")
