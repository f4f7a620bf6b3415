"""One replica's iteration-level scheduler: continuous batching over a paged KV cache.

Semantics (vLLM; see docs/serving.md for what is simplified):
- ``chunked_prefill: true`` = vLLM v1 (vllm/v1/core/sched/scheduler.py): every iteration runs all
  decoding requests (one token each) and fills the rest of the ``max_num_batched_tokens`` budget with
  prompt chunks, FCFS, while fewer than ``max_num_seqs`` run and KV blocks can be allocated; decodes
  go first (Sarathi-Serve's stall-free batching).
- ``chunked_prefill: false`` = vLLM v0 default scheduler: whole prompts in prefill-only iterations that
  pause the decodes, admitted whenever the head of the queue fits (prefill-first).
- ``num_scheduler_steps: k`` = vLLM v0 multi-step: decodes run in rounds of k steps, tokens stream at
  the end of a round, requests are admitted only between rounds.
- KV blocks of ``block_size`` tokens; a request that cannot get a block preempts the most recently
  admitted running request, which frees its blocks and later recomputes prompt + generated tokens
  (vLLM's preemption by recompute). Prefix caching pins one shared prefix per group after its first
  prefill; later requests of the group skip its full blocks.
Between events (arrival that can be admitted, a request finishing, KV running out) decode-only steps
are advanced in closed form: with B sequences and context sum S the step takes A(B) + C*S and S grows
by B per step, so n steps take n*A' + C*B*n(n-1)/2.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from shardwise.serve.config import EngineSpec
from shardwise.serve.state import DECODE, DONE, PREFILL, WAITING, ITLRecord, RequestTable
from shardwise.serve.timing import StepTimer, prefill_pairs


class Engine:
    """Simulates one replica (or one PP virtual engine); `advance(until)` runs it forward."""

    def __init__(self, timer: StepTimer, spec: EngineSpec, num_blocks: int, table: RequestTable, prefill_only: bool = False):
        self.timer, self.spec, self.tab = timer, spec, table
        self.prefill_only = prefill_only
        self.bs = spec.block_size
        self.free = num_blocks
        self.num_blocks = num_blocks
        self.k = spec.num_scheduler_steps
        self.a_tab = timer.decode_fixed_table(spec.max_num_seqs)
        self.c_ctx = timer.decode_attn_s_per_token
        self.t = 0.0
        self.g = 0  # decode steps run so far
        self.pending: list[int] = []  # assigned, not yet arrived (sorted by arrival)
        self.pending_at = 0
        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}  # admission order; the last is the preemption victim
        self.prefilling: list[int] = []
        self.b = 0  # decoding requests
        self.koff = 0  # sum of (kv0 - g0) over decoders: context sum = koff + b*g
        self.cnt = [0] * self.bs  # decoders needing a new block when g % bs == phase
        self.heap: list[tuple[int, int, int]] = []  # (finish step, version, id)
        self.group_last_s = 0.0  # last emission of decoders in the group ...
        self.group_n = 0
        self.stragglers: dict[int, float] = {}  # ... and of those that emitted at another time
        self.prefix_cached: set[int] = set()
        self.itl = ITLRecord()
        # vLLM v0 keeps 1% of blocks free when admitting prompts (BlockSpaceManager watermark=0.01);
        # v1 has none but admits nothing in a step that preempted.
        self.watermark = 0 if spec.chunked_prefill else max(1, num_blocks // 100)
        self.hold_admission = False
        self.iterations = 0
        self.busy_s = 0.0

    # --- intake ------------------------------------------------------------------------------------
    def submit(self, rid: int) -> None:
        self.pending.append(rid)

    def outstanding(self) -> int:
        return len(self.pending) - self.pending_at + len(self.waiting) + len(self.running)

    def _arrive(self) -> None:
        arr, pend = self.tab.arrival_s, self.pending
        while self.pending_at < len(pend) and arr[pend[self.pending_at]] <= self.t:
            self.waiting.append(pend[self.pending_at])
            self.pending_at += 1

    def _next_arrival(self) -> float:
        return float(self.tab.arrival_s[self.pending[self.pending_at]]) if self.pending_at < len(self.pending) else math.inf

    # --- main loop ---------------------------------------------------------------------------------
    def advance(self, until: float = math.inf) -> None:
        """Run iterations that start before `until` (all arrivals before `until` are submitted)."""
        while True:
            self._arrive()
            self._admit_prefilled()
            if self.t >= until:
                return
            if self.prefilling or (self.waiting and self._head_fits()):
                if self.spec.chunked_prefill:
                    self._mixed_iteration()
                elif self.waiting and self._head_fits():
                    self._prefill_iteration()
                else:
                    self._mixed_iteration()
            elif self.b:
                self._stretch(until)
            else:
                nxt = self._next_arrival()
                if self.waiting and not self.running:
                    raise RuntimeError("request cannot be scheduled on an empty replica (KV capacity checked earlier)")
                if nxt == math.inf or nxt >= until:
                    self.t = max(self.t, until) if until < math.inf else self.t
                    return
                self.t = nxt

    # --- admission ---------------------------------------------------------------------------------
    def _hit(self, rid: int) -> int:
        tab = self.tab
        if not self.spec.prefix_caching or tab.requests.prefix_len < self.bs or tab.group[rid] not in self.prefix_cached:
            return 0
        full = (tab.requests.prefix_len // self.bs) * self.bs
        return min(full, ((self._todo(rid) - 1) // self.bs) * self.bs)

    def _head_fits(self) -> bool:
        if len(self.running) >= self.spec.max_num_seqs:
            return False
        rid = self.waiting[0]
        tab = self.tab
        if tab.prefilled[rid] and tab.phase[rid] == WAITING and tab.generated[rid] == 1:
            return False  # handled by _admit_prefilled
        if self.hold_admission:
            return False
        todo = self._todo(rid) - self._hit(rid)
        first = min(todo, self.spec.max_num_batched_tokens) if self.spec.chunked_prefill else todo
        return -(-first // self.bs) + self.watermark <= self.free

    def _todo(self, rid: int) -> int:
        return self.tab.prompt[rid] + self.tab.generated[rid]

    def _admit_prefilled(self) -> None:
        """Disaggregated decode pool: requests arrive with their KV; they join the decoders at once."""
        tab = self.tab
        while self.waiting and len(self.running) < self.spec.max_num_seqs:
            rid = self.waiting[0]
            if not (tab.prefilled[rid] and tab.generated[rid] == 1 and tab.phase[rid] == WAITING):
                return
            kv = tab.prompt[rid]
            need = -(-kv // self.bs) + 1
            if need > self.free:
                return
            self.waiting.popleft()
            self.free -= need - 1
            self.running[rid] = None
            self._start_decode(rid, kv, float(tab.first_s[rid]))

    # --- decoders ----------------------------------------------------------------------------------
    def _start_decode(self, rid: int, kv: int, last_emit_s: float) -> None:
        tab = self.tab
        tab.phase[rid] = DECODE
        tab.kv0[rid], tab.g0[rid] = kv, self.g
        tab.version[rid] += 1
        self.b += 1
        self.koff += kv - self.g
        self.cnt[(self.g - kv) % self.bs] += 1
        heapq.heappush(self.heap, (self.g + tab.output[rid] - tab.generated[rid], tab.version[rid], rid))
        self.stragglers[rid] = last_emit_s

    def _stop_decode(self, rid: int) -> int:
        """Remove a decoder; returns the KV blocks it owned."""
        tab = self.tab
        kv = tab.kv0[rid] + self.g - tab.g0[rid]
        self.b -= 1
        self.koff -= tab.kv0[rid] - tab.g0[rid]
        self.cnt[(tab.g0[rid] - tab.kv0[rid]) % self.bs] -= 1
        if rid in self.stragglers:
            tab.last_emit[rid] = self.stragglers.pop(rid)
        else:
            self.group_n -= 1
            tab.last_emit[rid] = self.group_last_s
        return -(-(kv - tab.hit[rid]) // self.bs)

    def _emit_decoders(self, t_end: float, gaps: np.ndarray | None = None) -> None:
        """Every decoder emitted at `t_end` (a step or the end of a multi-step round)."""
        if self.group_n:
            if gaps is not None and self.group_last_s == self.t:
                self.itl.add_array(gaps, self.group_n)
            else:
                self.itl.add(t_end - self.group_last_s if gaps is None else gaps[0] + self.t - self.group_last_s, self.group_n)
                if gaps is not None:
                    self.itl.add_array(gaps[1:], self.group_n)
        for last in self.stragglers.values():
            self.itl.add((t_end if gaps is None else self.t + gaps[0]) - last)
        if gaps is not None and self.stragglers:
            self.itl.add_array(gaps[1:], len(self.stragglers))
        self.stragglers.clear()
        self.group_n = self.b
        self.group_last_s = t_end

    def _finish_due(self) -> None:
        tab, heap = self.tab, self.heap
        while heap and heap[0][0] <= self.g:
            _, ver, rid = heapq.heappop(heap)
            if ver != tab.version[rid] or tab.phase[rid] != DECODE:
                continue
            self.free += self._stop_decode(rid)
            tab.last_emit[rid] = self.t
            self._done(rid)

    def _done(self, rid: int) -> None:
        tab = self.tab
        tab.phase[rid] = DONE
        tab.finish_s[rid] = self.t
        del self.running[rid]

    def _preempt_one(self) -> None:
        """Preempt the most recently admitted running request (recompute later)."""
        tab = self.tab
        rid = next(reversed(self.running))
        del self.running[rid]
        if tab.phase[rid] == DECODE:
            self.free += self._stop_decode(rid)
            self.group_n = max(self.group_n, 0)
        else:
            self.prefilling.remove(rid)
            self.free += -(-(tab.computed[rid] - tab.hit[rid]) // self.bs)
        tab.phase[rid] = WAITING
        tab.computed[rid] = 0
        tab.preemptions[rid] += 1
        tab.prefilled[rid] = False
        self.waiting.appendleft(rid)
        self.hold_admission = True

    # --- decode-only stretch -----------------------------------------------------------------------
    def _blocks_for(self, n: int) -> int:
        full, rest = divmod(n, self.bs)
        need = full * self.b
        for j in range(rest):
            need += self.cnt[(self.g + j) % self.bs]
        return need

    def _steps_with_blocks(self) -> int:
        """Most decode steps the free blocks allow."""
        q, r = divmod(self.free, self.b)
        n = q * self.bs
        for j in range(self.bs):
            c = self.cnt[(self.g + n + j) % self.bs]
            if c > r:
                return n + j
            r -= c
        return n + self.bs

    @staticmethod
    def _steps_to_reach(delta: float, a1: float, slope: float) -> int:
        """Smallest n >= 1 with n*a1 + slope*n(n-1)/2 >= delta (time of n steps reaches delta)."""
        if delta <= 0:
            return 1
        if slope <= 0:
            n = math.ceil(delta / a1)
        else:
            b = a1 - slope / 2
            n = math.ceil((-b + math.sqrt(b * b + 2 * slope * delta)) / slope)
        n = max(n, 1)
        while n > 1 and (n - 1) * a1 + slope * (n - 1) * (n - 2) / 2 >= delta:
            n -= 1
        while n * a1 + slope * n * (n - 1) / 2 < delta:
            n += 1
        return n

    def _stretch(self, until: float) -> None:
        k = self.k
        n_kv = self._steps_with_blocks()
        while n_kv < k:
            self._preempt_one()
            if not self.b:
                return
            n_kv = self._steps_with_blocks()
        n_kv -= n_kv % k
        b, a = self.b, self.a_tab[self.b]
        a1 = a + self.c_ctx * (self.koff + b * (self.g + 1))
        slope = self.c_ctx * b
        n = min(n_kv, self.heap[0][0] - self.g if self.heap else n_kv)
        horizon = until
        if not self.waiting and len(self.running) < self.spec.max_num_seqs:
            horizon = min(horizon, self._next_arrival())
        if horizon < math.inf:
            n = min(n, self._steps_to_reach(horizon - self.t, a1, slope))
        n = max(n, 1)
        if k > 1:
            n = -(-n // k) * k
        gaps = a1 + slope * np.arange(n)
        total = float(n * a1 + slope * n * (n - 1) / 2)
        if k > 1:
            gaps = gaps.reshape(-1, k).sum(axis=1)
        self.free -= self._blocks_for(n)
        t_end = self.t + total
        self._emit_decoders(t_end, gaps)
        self.t = t_end
        self.g += n
        self.iterations += n
        self.busy_s += total
        self.hold_admission = False
        self._finish_due()

    # --- iterations with prompt work ---------------------------------------------------------------
    def _complete_prefill(self, rid: int) -> None:
        """A prompt (or a recompute) finished: it samples one token now."""
        tab = self.tab
        self.prefilling.remove(rid)
        if self.spec.prefix_caching and tab.requests.prefix_len >= self.bs and tab.group[rid] not in self.prefix_cached:
            self.prefix_cached.add(tab.group[rid])  # its prefix blocks now belong to the cache
            tab.hit[rid] = (tab.requests.prefix_len // self.bs) * self.bs
        if tab.generated[rid] == 0:
            tab.first_s[rid] = self.t
        else:
            self.itl.add(self.t - tab.last_emit[rid])
        tab.generated[rid] += 1
        if self.prefill_only or tab.generated[rid] >= tab.output[rid]:
            self.free += -(-(tab.computed[rid] - tab.hit[rid]) // self.bs)
            tab.last_emit[rid] = self.t
            self._done(rid)
        else:
            self._start_decode(rid, tab.computed[rid], self.t)

    def _admit_waiting(self, budget: int, whole: bool) -> tuple[list[tuple[int, int, int]], int]:
        """Admit FCFS from the queue; returns ([(id, tokens done before, chunk)], budget left)."""
        tab, sched = self.tab, []
        while self.waiting and budget > 0 and len(self.running) < self.spec.max_num_seqs:
            rid = self.waiting[0]
            if tab.prefilled[rid]:
                break
            tab.target[rid] = self._todo(rid)
            hit = self._hit(rid)
            todo = tab.target[rid] - hit
            if whole and todo > budget:
                break
            chunk = min(todo, budget)
            need = -(-chunk // self.bs)
            if need + self.watermark > self.free:
                break
            self.waiting.popleft()
            self.free -= need
            tab.hit[rid], tab.computed[rid] = hit, hit
            tab.phase[rid] = PREFILL
            self.running[rid] = None
            self.prefilling.append(rid)
            sched.append((rid, hit, chunk))
            budget -= chunk
        return sched, budget

    def _run_prefills(self, sched: list[tuple[int, int, int]], decoders: int, decode_ctx: float) -> None:
        tokens = decoders + sum(c for _, _, c in sched)
        tab = self.tab
        done = [rid for rid, before, c in sched if before + c >= tab.target[rid]]
        pairs = sum(prefill_pairs(before, c) for _, before, c in sched)
        dt = self.timer.iteration_s(tokens, decoders + len(sched), decoders + len(done), decode_ctx, pairs)
        t_end = self.t + dt
        if decoders:
            self.free -= self.cnt[self.g % self.bs]
            self._emit_decoders(t_end)
            self.g += 1
        self.t = t_end
        self.iterations += 1
        self.busy_s += dt
        self.hold_admission = False
        for rid, before, c in sched:
            tab.computed[rid] = before + c
        for rid in done:
            self._complete_prefill(rid)
        if decoders:
            self._finish_due()

    def _mixed_iteration(self) -> None:
        """vLLM v1: all decodes + prompt chunks up to the token budget."""
        preempted = False
        while self.b and self.cnt[self.g % self.bs] > self.free:
            self._preempt_one()
            preempted = True
        budget = self.spec.max_num_batched_tokens - self.b
        tab, sched = self.tab, []
        for rid in list(self.prefilling):
            if budget <= 0:
                break
            before = tab.computed[rid]
            owned = -(-(before - tab.hit[rid]) // self.bs)
            room = (owned + self.free) * self.bs + tab.hit[rid] - before
            chunk = min(tab.target[rid] - before, budget, room)
            if chunk <= 0:
                continue
            self.free -= -(-(before + chunk - tab.hit[rid]) // self.bs) - owned
            sched.append((rid, before, chunk))
            budget -= chunk
        if not preempted:
            more, _ = self._admit_waiting(budget, whole=False)
            sched += more
        if not sched and not self.b:
            self._preempt_one()  # partial prefills hold every block: free some
            return
        self._run_prefills(sched, self.b, self.koff + self.b * (self.g + 1))

    def _prefill_iteration(self) -> None:
        """vLLM v0: a prefill-only iteration of whole prompts; decodes wait."""
        sched, _ = self._admit_waiting(self.spec.max_num_batched_tokens, whole=True)
        if not sched:
            raise RuntimeError("prefill iteration with nothing admitted")
        self._run_prefills(sched, 0, 0.0)
