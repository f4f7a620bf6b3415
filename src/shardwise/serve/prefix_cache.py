"""Prefix caching: the KV cache keeps full blocks of earlier prompts (and, in conversations, of earlier
replies) under a key of their content, and a new prompt reuses the blocks of its longest cached prefix.

vLLM V1's block pool (vllm/v1/core/block_pool.py; vLLM's design doc on prefix caching) and SGLang's radix cache
work this way: a full block is identified by the hash of its tokens and of every token before it; a
block no running request uses stays cached but is *free* (it sits in the free queue), and allocating a
block takes the least recently freed one, evicting its content (LRU); a request frees its blocks tail
first, so the end of a prefix is evicted before its start. A hit must leave at least one prompt token
to compute.

Content keys here (a block's key stands for the hash of its prefix): block j of a request lies in its
group's shared system prompt while j < prefix_len / block_size (key: group, j), else in its
conversation (key: session, j): turn t+1 of a conversation repeats turn t's prompt and reply, so blocks
up to the end of turn t's reply are shared; a request outside any conversation is its own session.
Replies' full blocks are cached when the workload has conversations (vLLM caches decode blocks too;
they matter only to a next turn).
"""

from __future__ import annotations

from collections import OrderedDict

GROUP_BIT = 1 << 62  # keys of shared system prompts (sessions use 1 << 40 blocks each below it)
SESSION_STRIDE = 1 << 40


class PrefixCache:
    """Cached blocks: reference counts of blocks running requests use, and an LRU of unused ones."""

    def __init__(self, block_size: int, prefix_len: int, groups: list[int], sessions: list[int] | None):
        self.block_size = block_size
        self.group_blocks = prefix_len // block_size
        self.groups = groups
        self.sessions = sessions
        self.cache_replies = sessions is not None
        self.refs: dict[int, int] = {}  # key -> running requests using the block (0: in the LRU)
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.query_tokens = 0
        self.hit_tokens = 0
        self.evicted = 0

    def key(self, rid: int, j: int) -> int:
        if j < self.group_blocks:
            return GROUP_BIT + self.groups[rid] * SESSION_STRIDE + j
        owner = self.sessions[rid] if self.sessions is not None else rid
        return owner * SESSION_STRIDE + j

    def longest(self, rid: int, max_blocks: int) -> int:
        """Blocks of `rid`'s longest cached prefix, at most `max_blocks`."""
        refs, key = self.refs, self.key
        h = 0
        while h < max_blocks and key(rid, h) in refs:
            h += 1
        return h

    def take(self, rid: int, blocks: int) -> int:
        """`rid` starts using its first `blocks` cached blocks; returns how many left the LRU (no longer free)."""
        reused = 0
        for j in range(blocks):
            k = self.key(rid, j)
            if self.refs[k] == 0:
                del self.lru[k]
                reused += 1
            self.refs[k] += 1
        return reused

    def insert(self, rid: int, start: int, end: int) -> tuple[int, int]:
        """`rid`'s computed blocks start..end-1 join the cache, used by it. Returns (its own blocks that
        turned out duplicates and are freed, cached blocks that left the LRU)."""
        duplicates = reused = 0
        for j in range(start, end):
            k = self.key(rid, j)
            n = self.refs.get(k)
            if n is None:
                self.refs[k] = 1
                continue
            duplicates += 1  # computed meanwhile by another request: share that block, free ours
            if n == 0:
                del self.lru[k]
                reused += 1
            self.refs[k] = n + 1
        return duplicates, reused

    def release(self, rid: int, blocks: int, replies: tuple[int, int] | None = None) -> tuple[int, int]:
        """`rid` stops using its first `blocks` cached blocks; with `replies` = (start, end) its own full
        blocks start..end-1 are cached unused first. Blocks become free tail first (LRU order). Returns
        (cached blocks that became free, own blocks that were already cached: free as plain blocks)."""
        freed = duplicates = 0
        refs, lru = self.refs, self.lru
        if replies is not None and self.cache_replies:
            for j in range(replies[1] - 1, replies[0] - 1, -1):
                k = self.key(rid, j)
                if k in refs:
                    duplicates += 1
                else:
                    refs[k] = 0
                    lru[k] = None
        for j in range(blocks - 1, -1, -1):
            k = self.key(rid, j)
            n = refs[k] - 1
            refs[k] = n
            if n == 0:
                lru[k] = None
                freed += 1
        return freed, duplicates

    def evict(self, count: int) -> None:
        """Drop the `count` least recently freed cached blocks (their memory is being reallocated)."""
        refs, lru = self.refs, self.lru
        for _ in range(min(count, len(lru))):
            k, _ = lru.popitem(last=False)
            del refs[k]
        self.evicted += count

    def report(self) -> dict[str, float]:
        return {"hit_rate": self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
                "hit_tokens": self.hit_tokens, "prompt_tokens": self.query_tokens, "evicted_blocks": self.evicted}
