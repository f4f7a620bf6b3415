"""Engine policies behind the registry: selection from the engine block, and a new policy in one class."""

import pytest

from shardwise.serve.config import EngineSpec
from shardwise.serve.policies import ENGINE_POLICIES, MixedBatches, PrefillFirst, make_engine, policy_name, register
from shardwise.serve.state import RequestTable
from tests.serve.conftest import FakeTimer, make_requests


def test_engine_block_selects_the_policy():
    assert policy_name(EngineSpec()) == "mixed"
    assert policy_name(EngineSpec(chunked_prefill=False)) == "prefill-first"
    table = RequestTable(make_requests([0.0], [10], [2]))
    assert type(make_engine(FakeTimer(), EngineSpec(), 100, table)) is MixedBatches
    assert type(make_engine(FakeTimer(), EngineSpec(chunked_prefill=False), 100, table)) is PrefillFirst


def test_only_prefill_first_keeps_a_watermark():
    table = RequestTable(make_requests([0.0], [10], [2]))
    assert make_engine(FakeTimer(), EngineSpec(), 1000, table).watermark == 0
    assert make_engine(FakeTimer(), EngineSpec(chunked_prefill=False), 1000, table).watermark == 10  # 1% (vLLM V0)


def test_a_new_policy_is_one_registered_class():
    class OnePromptPerIteration(MixedBatches):
        """Mixed batches that admit at most one new prompt per iteration (a toy)."""

        name = "one-prompt"

        def _admit_waiting(self, budget, whole):
            head = self._tokens_to_prefill(self.waiting[0]) if self.waiting else budget
            return super()._admit_waiting(min(budget, head), whole)

    register(OnePromptPerIteration)
    try:
        assert ENGINE_POLICIES["one-prompt"] is OnePromptPerIteration
        with pytest.raises(ValueError, match="unique name"):
            register(OnePromptPerIteration)
        table = RequestTable(make_requests([0.0, 0.0], [10, 10], [2, 2]))
        engine = OnePromptPerIteration(FakeTimer(), EngineSpec(), 100, table)
        for rid in (0, 1):
            engine.submit(rid)
        engine.advance()
        # FakeTimer: 10 ms + 0.1 ms per token. Iteration 1: prompt 0 alone (11 ms); iteration 2: request 0's
        # last decode + prompt 1 (11 tokens, 11.1 ms); iteration 3: request 1's last decode (10.1 ms).
        assert table.first_s == pytest.approx([0.011, 0.0221])
        assert table.finish_s == pytest.approx([0.0221, 0.0322])
    finally:
        ENGINE_POLICIES.pop("one-prompt", None)
