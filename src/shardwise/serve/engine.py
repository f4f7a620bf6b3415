"""One replica's iteration-level scheduler: continuous batching over a paged KV cache.

This module is the base every engine policy shares (the policies, which decide admission and the shape
of a batch with prompt work, are classes in ``serve/policies.py``):

- intake: requests are submitted in arrival order and join the queue when the clock reaches them;
- the KV block manager: blocks of ``block_size`` tokens; a request that cannot get a block preempts the
  most recently admitted running request, which frees its blocks and later recomputes prompt +
  generated tokens (vLLM's preemption by recompute). With prefix caching, full blocks stay cached after
  use and a prompt skips its longest cached prefix; unused cached blocks count as free and are evicted
  least recently used first (:mod:`shardwise.serve.prefix_cache`);
- the decoders and the decode-only stretch: between events (an arrival that can be admitted, a request
  finishing, KV running out) decode steps are advanced in closed form: with B sequences and context
  sum S a step takes A(B) + C*S and S grows by B per step, so n steps take n*A' + C*B*n(n-1)/2.
  ``num_scheduler_steps: k`` (vLLM v0 multi-step) runs the stretch in rounds of k steps: tokens stream
  at the end of a round and requests are admitted only between rounds;
- inter-token-latency bookkeeping (``ITLRecord``);
- LoRA adapters, when the pool serves them (:mod:`shardwise.serve.adapters`): at most ``max_loras``
  distinct adapters among the running requests (vLLM V1 skips a waiting request that would exceed it),
  an LRU cache of GPU slots whose loads add to the next step, and the batched adapter GEMMs of each step.

Semantics follow vLLM; see docs/serving.md for what is simplified.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from itertools import accumulate
from typing import ClassVar

import numpy as np

from shardwise.serve.adapters import AdapterCache
from shardwise.serve.config import EngineSpec
from shardwise.serve.prefix_cache import PrefixCache
from shardwise.serve.state import DECODE, DONE, PREFILL, WAITING, ITLRecord, RequestTable
from shardwise.serve.timing import StepTimer

#: A scheduled prompt chunk: (request id, tokens already in the KV cache, tokens in this chunk).
Chunk = tuple[int, int, int]


class Engine:
    """Simulates one replica (or one PP virtual engine); `advance(until)` runs it forward.

    A policy subclass sets `name` and implements `_first_chunk_tokens` (how much of the head of the queue
    must fit to admit it), `_has_prompt_work` and `_prompt_iteration` (the batch when prompts are pending);
    it may override `_watermark_blocks`."""

    name: ClassVar[str] = ""

    def __init__(self, timer: StepTimer, spec: EngineSpec, num_blocks: int, table: RequestTable,
                 prefill_only: bool = False, adapters: AdapterCache | None = None):
        self.timer, self.spec, self.table = timer, spec, table
        self.prefill_only = prefill_only  # a disaggregated prefill pool: requests leave after the first token
        self.max_num_seqs = spec.max_num_seqs
        # a disaggregated decode pool's requests arrive prefilled (set before the run; a preemption clears it)
        self.any_prefilled = any(table.prefilled)
        self.block_size = spec.block_size
        self.prefix_caching = spec.caches_prefixes()
        self.num_blocks = num_blocks
        self.free = num_blocks  # free KV blocks
        self.watermark = self._watermark_blocks(num_blocks)
        self.steps_per_round = spec.num_scheduler_steps
        self.decode_fixed_s = timer.decode_fixed_table(spec.max_num_seqs).tolist()  # A(B): a decode step's time at context 0
        self.decode_s_per_context_token = float(timer.decode_attn_s_per_token)  # C
        # vLLM V0's asynchronous output processor (0.6-0.10): a token reaches the client after the next
        # iteration, approximated by one decode step of the batch that follows (set as iterations end)
        self.async_output = spec.async_output_processing()
        self.output_lag_s = 0.0
        self.lag_of: dict[int, float] = {}  # each request's lag, taken at its first token and kept (TPOT, ITL unchanged)
        self.now_s = 0.0
        # intake
        self.pending: list[int] = []  # submitted, not yet arrived (sorted by arrival)
        self.pending_at = 0
        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}  # admission order; the last is the preemption victim
        self.prefilling: list[int] = []
        self.hold_admission = False  # set by a preemption: nothing is admitted until the next iteration
        # decoders
        self.decode_steps = 0  # decode steps run so far (every decoder advances one token per step)
        self.num_decoding = 0
        self.context_offset = 0  # sum of (kv tokens - decode_steps) at decode start: context sum = this + num_decoding * decode_steps
        self.new_block_due = [0] * self.block_size  # decoders needing a new block when decode_steps % block_size == index
        self.finish_heap: list[tuple[int, int, int]] = []  # (decode step of the last token, version, id)
        self.cache = (PrefixCache(self.block_size, table.requests.prefix_len, table.group, table.session)
                      if self.prefix_caching else None)
        # ITL: decoders that all emitted at `synced_emit_s`, and those that emitted at another time
        self.synced_emit_s = 0.0
        self.synced_count = 0
        self.stragglers: dict[int, float] = {}
        self.itl = ITLRecord()
        self.iterations = 0
        self.busy_s = 0.0
        # LoRA adapters (None: the base model only); table.adapter holds each request's adapter
        self.adapters = adapters
        self.running_adapters: dict[int, int] = {}  # adapter -> running requests using it
        self.decoding_adapters: dict[int, int] = {}  # adapter -> decoding requests using it
        self.pending_load_s = 0.0  # adapter loads the next step waits for
        self.waiting_by_adapter: dict[int, deque[int]] = {}  # adapter -> its waiting requests, in queue order
        self.queue_key: dict[int, int] = {}  # waiting request -> its place (smaller: nearer the front)
        self.queue_front = self.queue_back = 0
        self.adapter_steps = 0
        self.adapter_distinct_sum = 0  # distinct adapters summed over steps (their mean per step)

    # --- policy hooks ------------------------------------------------------------------------------
    def _watermark_blocks(self, num_blocks: int) -> int:
        """Blocks kept free when admitting a prompt."""
        return 0

    def _first_chunk_tokens(self, tokens_to_prefill: int) -> int:
        """Prompt tokens the head of the queue must get blocks for to be admitted."""
        raise NotImplementedError

    def _has_prompt_work(self) -> bool:
        """Whether the next iteration carries prompt tokens."""
        raise NotImplementedError

    def _prompt_iteration(self) -> None:
        """Run one iteration with prompt work (the policy's batch shape)."""
        raise NotImplementedError

    # --- intake ------------------------------------------------------------------------------------
    def submit(self, rid: int) -> None:
        self.pending.append(rid)

    def outstanding(self) -> int:
        return len(self.pending) - self.pending_at + len(self.waiting) + len(self.running)

    def _arrive(self) -> None:
        arrival_s, pending, at, now_s = self.table.arrival, self.pending, self.pending_at, self.now_s
        while at < len(pending) and arrival_s[pending[at]] <= now_s:
            self.waiting.append(pending[at])
            if self.adapters is not None:
                self._index_waiting(pending[at], front=False)
            at += 1
        self.pending_at = at

    def _next_arrival_s(self) -> float:
        if self.pending_at < len(self.pending):
            return self.table.arrival[self.pending[self.pending_at]]
        return math.inf

    # --- main loop ---------------------------------------------------------------------------------
    def advance(self, until: float = math.inf) -> None:
        """Run iterations that start before `until` (all arrivals before `until` are submitted)."""
        while True:
            self._arrive()
            if self.any_prefilled:
                self._admit_prefilled()
            if self.now_s >= until:
                return
            if self._has_prompt_work():
                self._prompt_iteration()
            elif self.num_decoding:
                self._decode_stretch(until)
            else:
                next_s = self._next_arrival_s()
                if self.waiting and not self.running:
                    raise RuntimeError("request cannot be scheduled on an empty replica (KV capacity checked earlier)")
                if next_s == math.inf or next_s >= until:
                    self.now_s = max(self.now_s, until) if until < math.inf else self.now_s
                    return
                self.now_s = next_s

    # --- KV blocks and admission -------------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        """KV blocks holding `tokens` tokens."""
        return -(-tokens // self.block_size)

    def _tokens_to_prefill(self, rid: int) -> int:
        """Prompt plus tokens generated before a preemption: what a (re)prefill puts in the KV cache."""
        return self.table.prompt[rid] + self.table.generated[rid]

    def _prefix_hit(self, rid: int) -> int:
        """Tokens of `rid`'s prompt served from the prefix cache (whole blocks, at least one token left to compute)."""
        if self.cache is None:
            return 0
        return self.cache.longest(rid, (self._tokens_to_prefill(rid) - 1) // self.block_size) * self.block_size

    def _take(self, blocks: int) -> None:
        """Allocate `blocks` free blocks, evicting the least recently used cached ones they reuse."""
        self.free -= blocks
        if self.cache is not None and len(self.cache.lru) > self.free:
            self.cache.evict(len(self.cache.lru) - max(self.free, 0))

    def _release_cached(self, rid: int, replies_to: int = 0) -> None:
        """`rid` stops using its cached blocks (a finished request caches its reply's full blocks, up to
        `replies_to` tokens); those nobody uses become free."""
        if self.cache is None:
            return
        used = self.table.prefix_hit[rid] // self.block_size
        replies = (used, replies_to // self.block_size) if replies_to else None
        freed, _ = self.cache.release(rid, used, replies)
        self.free += freed

    def _is_prefilled(self, rid: int) -> bool:
        """Arrived with its KV from a prefill pool (disaggregated decode), not yet decoding."""
        table = self.table
        return table.prefilled[rid] and table.phase[rid] == WAITING and table.generated[rid] == 1

    def _head_fits(self) -> bool:
        """Whether the head of the queue can be admitted now."""
        waiting = self.waiting
        if not waiting or self.hold_admission or len(self.running) >= self.max_num_seqs:
            return False
        rid = waiting[0] if self.adapters is None else self._next_waiting()
        if rid is None or self.any_prefilled and self._is_prefilled(rid):
            return False
        table = self.table
        todo = table.prompt[rid] + table.generated[rid]  # _tokens_to_prefill
        if self.cache is not None:
            todo -= self._prefix_hit(rid)
        return -(-self._first_chunk_tokens(todo) // self.block_size) + self.watermark <= self.free  # _blocks

    def _admit_prefilled(self) -> None:
        """Disaggregated decode pool: requests arrive with their KV; they join the decoders at once."""
        if not self.any_prefilled:
            return
        table = self.table
        while self.waiting and len(self.running) < self.max_num_seqs:
            rid = self.waiting[0]
            if not self._is_prefilled(rid):
                return
            kv_tokens = table.prompt[rid]
            need = self._blocks(kv_tokens) + 1
            if need > self.free or self.adapters is not None and self._next_waiting() != rid:
                return
            self._take_waiting(rid)
            self._take(need - 1)
            self._join(rid)
            self._start_decode(rid, kv_tokens, float(table.first_s[rid]))

    def _admit_waiting(self, budget: int, whole: bool) -> tuple[list[Chunk], int]:
        """Admit FCFS from the queue (whole prompts only if `whole`); returns (chunks, token budget left)."""
        table, chunks, waiting, cache = self.table, [], self.waiting, self.cache
        plain = self.adapters is None  # no adapter limit: the queue's head is next, _join only records it
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            rid = waiting[0] if plain else self._next_waiting()
            if rid is None or table.prefilled[rid]:
                break
            target = table.target[rid] = table.prompt[rid] + table.generated[rid]  # _tokens_to_prefill
            hit = self._prefix_hit(rid) if cache is not None else 0
            todo = target - hit
            if whole and todo > budget:
                break
            chunk = min(todo, budget)
            need = -(-chunk // self.block_size)  # _blocks
            if need + self.watermark > self.free:
                break
            if plain:
                waiting.popleft()  # _take_waiting of the head
            else:
                self._take_waiting(rid)
            if cache is not None:
                self.free -= cache.take(rid, hit // self.block_size)
                cache.query_tokens += target
                cache.hit_tokens += hit
                self._take(need)
            else:
                self.free -= need  # _take without a cache to evict from
            table.prefix_hit[rid], table.computed[rid] = hit, hit
            table.phase[rid] = PREFILL
            if plain:
                self.running[rid] = None  # _join
            else:
                self._join(rid)
            self.prefilling.append(rid)
            chunks.append((rid, hit, chunk))
            budget -= chunk
        return chunks, budget

    def _preempt_one(self) -> None:
        """Preempt the most recently admitted running request (recompute later)."""
        table = self.table
        rid = next(reversed(self.running))
        self._leave(rid)
        if table.phase[rid] == DECODE:
            self.free += self._stop_decode(rid)
        else:
            self.prefilling.remove(rid)
            self.free += self._blocks(table.computed[rid] - table.prefix_hit[rid])
        self._release_cached(rid)
        table.prefix_hit[rid] = 0
        table.phase[rid] = WAITING
        table.computed[rid] = 0
        table.preemptions[rid] += 1
        table.prefilled[rid] = False
        self.waiting.appendleft(rid)
        if self.adapters is not None:
            self._index_waiting(rid, front=True)
        self.hold_admission = True

    def _done(self, rid: int) -> None:
        table = self.table
        table.phase[rid] = DONE
        table.finish_s[rid] = self.now_s + self.lag_of.pop(rid, 0.0)
        self._leave(rid)

    # --- LoRA adapters -----------------------------------------------------------------------------
    def _join(self, rid: int) -> None:
        """`rid` starts running; its adapter is made resident (the load waits for the next step)."""
        self.running[rid] = None
        if self.adapters is not None:
            adapter = self.table.adapter[rid]
            self.pending_load_s += self.adapters.activate(adapter, self.running_adapters)
            self.running_adapters[adapter] = self.running_adapters.get(adapter, 0) + 1

    def _leave(self, rid: int) -> None:
        del self.running[rid]
        if self.adapters is not None:
            _release(self.running_adapters, self.table.adapter[rid])

    def _index_waiting(self, rid: int, front: bool) -> None:
        """File a request joining the queue (at its back or, preempted, its front) under its adapter."""
        if front:
            self.queue_front -= 1
            self.queue_key[rid] = self.queue_front
            self.waiting_by_adapter.setdefault(self.table.adapter[rid], deque()).appendleft(rid)
        else:
            self.queue_back += 1
            self.queue_key[rid] = self.queue_back
            self.waiting_by_adapter.setdefault(self.table.adapter[rid], deque()).append(rid)

    def _next_waiting(self) -> int | None:
        """The first waiting request the adapter limit lets run: the head of the queue while GPU slots are
        free, else the earliest request of an adapter already running (vLLM V1 skips the others, which
        keep their places)."""
        if self.adapters is None or len(self.running_adapters) < self.adapters.cost.spec.gpu_slots:
            return self.waiting[0] if self.waiting else None
        best, key = None, self.queue_key
        for adapter in self.running_adapters:
            queue = self.waiting_by_adapter.get(adapter)
            if queue and (best is None or key[queue[0]] < key[best]):
                best = queue[0]
        return best

    def _take_waiting(self, rid: int) -> None:
        """Remove `rid` (what _next_waiting returned) from the queue."""
        if self.waiting[0] == rid:
            self.waiting.popleft()
        else:
            self.waiting.remove(rid)
        if self.adapters is not None:
            adapter = self.table.adapter[rid]
            queue = self.waiting_by_adapter[adapter]
            queue.popleft()  # the earliest of its adapter
            if not queue:
                del self.waiting_by_adapter[adapter]
            del self.queue_key[rid]

    def _adapter_step_s(self, tokens: int, distinct: int) -> tuple[float, float]:
        """(seconds a step's adapter GEMMs take, pending loads the step waits for)."""
        load_s, self.pending_load_s = self.pending_load_s, 0.0
        return self.adapters.cost.gemm_s(tokens, distinct), load_s

    # --- decoders ----------------------------------------------------------------------------------
    def _start_decode(self, rid: int, kv_tokens: int, last_emit_s: float) -> None:
        table, step = self.table, self.decode_steps
        table.phase[rid] = DECODE
        table.kv_at_decode_start[rid], table.step_at_decode_start[rid] = kv_tokens, step
        table.version[rid] += 1
        self.num_decoding += 1
        self.context_offset += kv_tokens - step
        if self.adapters is not None:
            adapter = table.adapter[rid]
            self.decoding_adapters[adapter] = self.decoding_adapters.get(adapter, 0) + 1
        self.new_block_due[(step - kv_tokens) % self.block_size] += 1
        last_step = step + table.output[rid] - table.generated[rid]
        heapq.heappush(self.finish_heap, (last_step, table.version[rid], rid))
        self.stragglers[rid] = last_emit_s

    def _stop_decode(self, rid: int) -> int:
        """Remove a decoder; returns the KV blocks it owned."""
        table = self.table
        kv0, step0 = table.kv_at_decode_start[rid], table.step_at_decode_start[rid]
        kv_tokens = kv0 + self.decode_steps - step0
        self.num_decoding -= 1
        self.context_offset -= kv0 - step0
        if self.adapters is not None:
            _release(self.decoding_adapters, table.adapter[rid])
        self.new_block_due[(step0 - kv0) % self.block_size] -= 1
        if rid in self.stragglers:
            table.last_emit[rid] = self.stragglers.pop(rid)
        else:
            self.synced_count -= 1
            table.last_emit[rid] = self.synced_emit_s
        return self._blocks(kv_tokens - table.prefix_hit[rid])

    def _context_sum_next_step(self) -> int:
        """KV tokens the decoders attend over in the next step."""
        return self.context_offset + self.num_decoding * (self.decode_steps + 1)

    def _emit_decoders(self, end_s: float, gaps_s: np.ndarray | None = None,
                       ramp: tuple[float, float, int] | None = None) -> None:
        """Every decoder emitted at `end_s` (one step) or once per round of a stretch from now: `gaps_s`
        (one gap per round), or `ramp` (first, slope, steps): one step per round, gap j = first + slope * j."""
        itl = self.itl
        if ramp is not None:
            first_s, slope_s, steps = ramp
            if self.synced_count:
                if self.synced_emit_s == self.now_s:
                    itl.add_ramp(first_s, slope_s, 0, steps, self.synced_count)
                else:
                    itl.add(first_s + self.now_s - self.synced_emit_s, self.synced_count)
                    itl.add_ramp(first_s, slope_s, 1, steps - 1, self.synced_count)
            first_emit_s = self.now_s + first_s
            if self.stragglers:
                for last_s in self.stragglers.values():
                    itl.add(first_emit_s - last_s)
                itl.add_ramp(first_s, slope_s, 1, steps - 1, len(self.stragglers))
                self.stragglers.clear()
            self.synced_count = self.num_decoding
            self.synced_emit_s = end_s
            return
        if self.synced_count:
            if gaps_s is not None and self.synced_emit_s == self.now_s:
                itl.add_array(gaps_s, self.synced_count)
            elif gaps_s is None:
                itl.add(end_s - self.synced_emit_s, self.synced_count)
            else:
                itl.add(gaps_s[0] + self.now_s - self.synced_emit_s, self.synced_count)
                itl.add_array(gaps_s[1:], self.synced_count)
        first_emit_s = end_s if gaps_s is None else self.now_s + gaps_s[0]
        for last_s in self.stragglers.values():
            itl.add(first_emit_s - last_s)
        if gaps_s is not None and self.stragglers:
            itl.add_array(gaps_s[1:], len(self.stragglers))
        self.stragglers.clear()
        self.synced_count = self.num_decoding
        self.synced_emit_s = end_s

    def _finish_due(self) -> None:
        table, heap = self.table, self.finish_heap
        while heap and heap[0][0] <= self.decode_steps:
            _, version, rid = heapq.heappop(heap)
            if version != table.version[rid] or table.phase[rid] != DECODE:
                continue  # preempted since it was pushed
            kv_tokens = table.kv_at_decode_start[rid] + self.decode_steps - table.step_at_decode_start[rid]
            self.free += self._stop_decode(rid)
            self._release_cached(rid, kv_tokens)
            table.last_emit[rid] = self.now_s
            self._done(rid)

    # --- decode-only stretch -----------------------------------------------------------------------
    def _blocks_for_steps(self, steps: int) -> int:
        """New KV blocks the decoders need over the next `steps` steps."""
        size = self.block_size
        full_cycles, rest = divmod(steps, size)
        need = full_cycles * self.num_decoding
        if rest:
            due, base = self.new_block_due, self.decode_steps % size
            end = base + rest
            need += sum(due[base:end]) + (sum(due[:end - size]) if end > size else 0)
        return need

    def _steps_with_blocks(self) -> int:
        """Most decode steps the free blocks allow."""
        size = self.block_size
        full_cycles, left = divmod(self.free, self.num_decoding)
        steps = full_cycles * size
        base = self.decode_steps % size  # steps is whole cycles: the cycle starts where it stands now
        due = self.new_block_due
        # the first step j whose blocks, with those of the steps before it, exceed what is left (size: none)
        return steps + bisect_right(list(accumulate(due[base:] + due[:base])), left)

    @staticmethod
    def _steps_to_reach(delta_s: float, first_step_s: float, slope_s: float) -> int:
        """Smallest n >= 1 with n*first + slope*n(n-1)/2 >= delta (the time of n steps reaches delta)."""
        if delta_s <= 0:
            return 1
        if slope_s <= 0:
            n = math.ceil(delta_s / first_step_s)
        else:
            b = first_step_s - slope_s / 2
            n = math.ceil((-b + math.sqrt(b * b + 2 * slope_s * delta_s)) / slope_s)
        n = max(n, 1)
        while n > 1 and (n - 1) * first_step_s + slope_s * (n - 1) * (n - 2) / 2 >= delta_s:
            n -= 1
        while n * first_step_s + slope_s * n * (n - 1) / 2 < delta_s:
            n += 1
        return n

    def _decode_step_s(self, batch: int) -> float:
        """One decode step of `batch` sequences at the running context (at least one sequence)."""
        return (self.decode_fixed_s[min(max(batch, 1), len(self.decode_fixed_s) - 1)]
                + self.decode_s_per_context_token * self._context_sum_next_step())

    def _decode_stretch(self, until: float) -> None:
        """Advance decode-only steps in closed form up to the next event (see the module docstring)."""
        k = self.steps_per_round
        steps_kv = self._steps_with_blocks()
        while steps_kv < k:
            self._preempt_one()
            if not self.num_decoding:
                return
            steps_kv = self._steps_with_blocks()
        steps_kv -= steps_kv % k
        batch = self.num_decoding
        fixed_s = self.decode_fixed_s  # _decode_step_s(batch), batch >= 1 here
        first_step_s = (fixed_s[min(batch, len(fixed_s) - 1)]
                        + self.decode_s_per_context_token * (self.context_offset + batch * (self.decode_steps + 1)))
        load_s = 0.0
        if self.adapters is not None:  # the adapters in use stay the same over the stretch
            lora_s, load_s = self._adapter_step_s(batch, len(self.decoding_adapters))
            first_step_s += lora_s
        slope_s = self.decode_s_per_context_token * batch  # the context grows by B tokens a step
        heap = self.finish_heap
        steps = min(steps_kv, heap[0][0] - self.decode_steps) if heap else steps_kv
        horizon_s = until
        if (not self.waiting or self.adapters is not None) and len(self.running) < self.max_num_seqs:
            horizon_s = min(horizon_s, self._next_arrival_s())  # (with adapters an arrival may pass skipped requests)
        if horizon_s < math.inf:
            steps = min(steps, self._steps_to_reach(horizon_s - self.now_s - load_s, first_step_s, slope_s))
        steps = max(steps, 1)
        if k > 1:
            steps = -(-steps // k) * k
        total_s = float(steps * first_step_s + slope_s * steps * (steps - 1) / 2)
        if k == 1 and not load_s:  # the gaps first + slope * j, kept as a ramp
            gaps_s, ramp = None, (first_step_s, slope_s, steps)
        else:
            gaps_s, ramp = first_step_s + slope_s * np.arange(steps), None
            gaps_s[0] += load_s
            total_s += load_s
            if k > 1:
                gaps_s = gaps_s.reshape(-1, k).sum(axis=1)  # tokens stream once per round
        if self.adapters is not None:
            self.adapter_steps += steps
            self.adapter_distinct_sum += steps * len(self.decoding_adapters)
        self._take(self._blocks_for_steps(steps))
        end_s = self.now_s + total_s
        self._emit_decoders(end_s, gaps_s, ramp)
        self.now_s = end_s
        self.decode_steps += steps
        self.iterations += steps
        self.busy_s += total_s
        self.hold_admission = False
        if self.async_output:
            self.output_lag_s = self._decode_step_s(self.num_decoding)
        self._finish_due()

    # --- iterations with prompt work ---------------------------------------------------------------
    def _complete_prefill(self, rid: int) -> None:
        """A prompt (or a recompute) finished: it samples one token now."""
        table = self.table
        self.prefilling.remove(rid)
        if self.cache is not None:  # its computed full blocks join the cache
            first, full = table.prefix_hit[rid] // self.block_size, table.computed[rid] // self.block_size
            duplicates, reused = self.cache.insert(rid, first, full)
            self.free += duplicates - reused
            table.prefix_hit[rid] = full * self.block_size
        if table.generated[rid] == 0:
            if self.async_output:
                self.lag_of[rid] = self.output_lag_s
            table.first_s[rid] = self.now_s + self.output_lag_s
        else:
            self.itl.add(self.now_s - table.last_emit[rid])
        table.generated[rid] += 1
        if self.prefill_only or table.generated[rid] >= table.output[rid]:
            self.free += self._blocks(table.computed[rid] - table.prefix_hit[rid])
            self._release_cached(rid, table.computed[rid])
            table.last_emit[rid] = self.now_s
            self._done(rid)
        else:
            self._start_decode(rid, table.computed[rid], self.now_s)

    def _run_iteration(self, chunks: list[Chunk], decoders: int) -> None:
        """One iteration: `decoders` decode tokens (0 or all decoders) plus the prompt `chunks`."""
        table, timer = self.table, self.timer
        tokens, completed, pairs = decoders, [], 0.0
        for rid, before, c in chunks:
            tokens += c
            if before + c >= table.target[rid]:
                completed.append(rid)
            pairs += timer.prefill_pairs(before, c)
        context = self.context_offset + self.num_decoding * (self.decode_steps + 1) if decoders else 0.0  # _context_sum_next_step
        dt = timer.iteration_s(tokens, decoders + len(chunks), decoders + len(completed), context, pairs, decoders)
        if self.adapters is not None:
            used = {table.adapter[rid] for rid, _, _ in chunks}
            if decoders:
                used.update(self.decoding_adapters)
            lora_s, load_s = self._adapter_step_s(tokens, len(used))
            dt += lora_s + load_s
            self.adapter_steps += 1
            self.adapter_distinct_sum += len(used)
        end_s = self.now_s + dt
        if decoders:
            self._take(self.new_block_due[self.decode_steps % self.block_size])
            self._emit_decoders(end_s)
            self.decode_steps += 1
        self.now_s = end_s
        self.iterations += 1
        self.busy_s += dt
        self.hold_admission = False
        for rid, before, c in chunks:
            table.computed[rid] = before + c
        if self.async_output:
            self.output_lag_s = self._decode_step_s(self.num_decoding + len(completed))
        for rid in completed:
            self._complete_prefill(rid)
        if decoders:
            self._finish_due()


def _release(counts: dict[int, int], key: int) -> None:
    """Decrement a use count, dropping the key at zero."""
    if counts[key] == 1:
        del counts[key]
    else:
        counts[key] -= 1
