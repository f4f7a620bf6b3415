"""Engine policies: which requests a replica admits and what a batch with prompt work looks like.

Each policy is one subclass of :class:`~shardwise.serve.engine.Engine` registered by name (the shape of
vidur's replica schedulers: a base with the block manager and the decode bookkeeping, a registry of
policies); :func:`policy_name` maps an engine block of a job file to its policy. Multi-step scheduling
(``num_scheduler_steps``) is a property of the decode stretch in the base and combines with either.

Adding a batching policy: subclass ``Engine``, set ``name``, implement the three hooks, decorate with
``@register``; the scheduler policy (:mod:`shardwise.serve.schedulers`) that selects it names it.
"""

from __future__ import annotations

from shardwise.serve.adapters import AdapterCache
from shardwise.serve.config import EngineSpec
from shardwise.serve.engine import Engine
from shardwise.serve.state import RequestTable
from shardwise.serve.timing import StepTimer

ENGINE_POLICIES: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    """Class decorator: make a policy selectable by its `name`."""
    if not cls.name or cls.name in ENGINE_POLICIES:
        raise ValueError(f"engine policy {cls.__name__} needs a unique name, got {cls.name!r}")
    ENGINE_POLICIES[cls.name] = cls
    return cls


@register
class MixedBatches(Engine):
    """vLLM V1 (vllm/v1/core/sched/scheduler.py), ``chunked_prefill: true``: every iteration runs all
    decoding requests (one token each) and fills the rest of the ``max_num_batched_tokens`` budget with
    prompt chunks, FCFS, while fewer than ``max_num_seqs`` run and KV blocks can be allocated; decodes go
    first (Sarathi-Serve's stall-free batching). No admission in an iteration that preempted."""

    name = "mixed"

    def _first_chunk_tokens(self, tokens_to_prefill: int) -> int:
        return min(tokens_to_prefill, self.spec.max_num_batched_tokens)

    def _has_prompt_work(self) -> bool:
        return bool(self.prefilling) or self._head_fits()

    def _prompt_iteration(self) -> None:
        preempted = False
        while self.num_decoding and self.new_block_due[self.decode_steps % self.block_size] > self.free:
            self._preempt_one()  # the decodes need their next blocks first
            preempted = True
        budget = self.spec.max_num_batched_tokens - self.num_decoding
        table, chunks = self.table, []
        for rid in list(self.prefilling):  # continue partial prompts first
            if budget <= 0:
                break
            before = table.computed[rid]
            owned = self._blocks(before - table.prefix_hit[rid])
            room = (owned + self.free) * self.block_size + table.prefix_hit[rid] - before
            chunk = min(table.target[rid] - before, budget, room)
            if chunk <= 0:
                continue
            self._take(self._blocks(before + chunk - table.prefix_hit[rid]) - owned)
            chunks.append((rid, before, chunk))
            budget -= chunk
        if not preempted:
            admitted, _ = self._admit_waiting(budget, whole=False)
            chunks += admitted
        if not chunks and not self.num_decoding:
            self._preempt_one()  # partial prefills hold every block: free some
            return
        self._run_iteration(chunks, self.num_decoding)


@register
class PrefillFirst(Engine):
    """vLLM V0's default scheduler (vllm/core/scheduler.py) and SGLang 0.3, ``chunked_prefill: false``:
    whole prompts in prefill-only iterations that pause the decodes, admitted whenever the head of the
    queue fits; 1% of the blocks stay free when admitting (V0 BlockSpaceManager watermark=0.01)."""

    name = "prefill-first"

    def _watermark_blocks(self, num_blocks: int) -> int:
        return max(1, num_blocks // 100)

    def _first_chunk_tokens(self, tokens_to_prefill: int) -> int:
        return tokens_to_prefill

    def _has_prompt_work(self) -> bool:
        return self._head_fits()  # a prompt always completes in its iteration: nothing is left half done

    def _prompt_iteration(self) -> None:
        chunks, _ = self._admit_waiting(self.spec.max_num_batched_tokens, whole=True)
        if not chunks:
            raise RuntimeError("prefill iteration with nothing admitted")
        self._run_iteration(chunks, 0)


@register
class ChunkedPrefillFirst(Engine):
    """SGLang 0.4+ (python/sglang/srt/managers/scheduler.py, ``scheduler: sglang`` with ``chunked_prefill``):
    an iteration with prompt work runs prompt chunks alone, up to ``max_num_batched_tokens``
    (--chunked-prefill-size) tokens, the unfinished prompt first, then new prompts FCFS while KV blocks
    last; decodes run when no prompt work is left (SGLang runs a prefill batch whenever one can be formed;
    mixed batches need --enable-mixed-chunk, which the ``mixed`` policy models)."""

    name = "chunked-prefill-first"

    def _first_chunk_tokens(self, tokens_to_prefill: int) -> int:
        return min(tokens_to_prefill, self.spec.max_num_batched_tokens)

    def _has_prompt_work(self) -> bool:
        return bool(self.prefilling) or self._head_fits()

    def _prompt_iteration(self) -> None:
        budget, table, chunks = self.spec.max_num_batched_tokens, self.table, []
        for rid in list(self.prefilling):
            before = table.computed[rid]
            owned = self._blocks(before - table.prefix_hit[rid])
            room = (owned + self.free) * self.block_size + table.prefix_hit[rid] - before
            chunk = min(table.target[rid] - before, budget, room)
            if chunk <= 0:
                continue
            self._take(self._blocks(before + chunk - table.prefix_hit[rid]) - owned)
            chunks.append((rid, before, chunk))
            budget -= chunk
        if budget > 0 and not self.hold_admission:
            admitted, _ = self._admit_waiting(budget, whole=False)
            chunks += admitted
        if not chunks:
            if self.num_decoding:
                self._decode_stretch(self.now_s)  # no room for prompt work: let the decoders free blocks
            else:
                self._preempt_one()
            return
        self._run_iteration(chunks, 0)


def policy_name(spec: EngineSpec) -> str:
    """The batching policy an engine block selects, from its named scheduler policy
    (:mod:`shardwise.serve.schedulers`): vLLM (V1 or V0) with ``chunked_prefill`` true -> mixed, false ->
    prefill-first; SGLang -> chunked-prefill-first, or prefill-first without chunking (SGLang 0.3)."""
    return spec.scheduler_policy().batching(spec.chunked_prefill)


def make_engine(timer: StepTimer, spec: EngineSpec, num_blocks: int, table: RequestTable,
                prefill_only: bool = False, adapters: AdapterCache | None = None) -> Engine:
    """One replica's engine running the policy `spec` selects (`adapters`: its LoRA adapter cache)."""
    return ENGINE_POLICIES[policy_name(spec)](timer, spec, num_blocks, table, prefill_only, adapters)
