"""Shared helpers: a step timer with round numbers, and tiny jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardwise.serve.config import EngineSpec
from shardwise.serve.constants import ServingConstants
from shardwise.serve.policies import make_engine
from shardwise.serve.state import RequestTable
from shardwise.serve.workload import Requests

ROOT = Path(__file__).resolve().parents[2]


class FakeTimer:
    """Iteration time = fixed_s + per_token_s * tokens + ctx_s * decode context (hand-checkable)."""

    def __init__(self, fixed_s: float = 0.010, per_token_s: float = 1e-4, ctx_s: float = 0.0):
        self.fixed_s, self.per_token_s, self.decode_attn_s_per_token = fixed_s, per_token_s, ctx_s

    def iteration_s(self, tokens, n_seqs, n_logits, decode_ctx=0.0, prefill_pairs=0.0, decoders=0):
        return self.fixed_s + self.per_token_s * tokens + self.decode_attn_s_per_token * decode_ctx

    def prefill_pairs(self, done, chunk):
        return chunk * done + chunk * (chunk + 1) / 2.0

    def decode_fixed_table(self, max_batch):
        return np.array([self.iteration_s(b, b, b) if b else 0.0 for b in range(max_batch + 1)])


def make_requests(arrivals, inputs, outputs, prefix_len=0):
    return Requests(np.asarray(arrivals, float), np.asarray(inputs, np.int64), np.asarray(outputs, np.int64), prefix_len,
                    np.zeros(len(arrivals), dtype=np.int64))


def run_engine(req, spec=None, blocks=100_000, timer=None, prefill_only=False):
    """Run all requests on one engine; returns (table, engine)."""
    table = RequestTable(req)
    eng = make_engine(timer or FakeTimer(), spec or EngineSpec(), blocks, table, prefill_only)
    for rid in range(len(req)):
        eng.submit(rid)
    eng.advance()
    return table, eng


@pytest.fixture
def plain_constants():
    return ServingConstants()
