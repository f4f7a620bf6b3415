"""A small cache keyed by object identity, for pure functions of immutable objects that are costly to
hash (frozen dataclasses with many fields, pydantic models, constants holding dicts) and are passed as
the same object many times: the catalog's GPU, the run's constants, a job's network. Each entry holds
its objects, so no other object can take their ids while it lives; the cache empties when full."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class IdentityMemo:
    """``memo(fn, objs, *values)``: ``fn(*objs, *values)``, computed once per (identity of each of `objs`,
    `values`); `values` must hash. Only for pure functions of immutable arguments."""

    __slots__ = ("_entries", "_maxsize")

    def __init__(self, maxsize: int = 256) -> None:
        self._entries: dict[tuple, tuple[tuple, Any]] = {}
        self._maxsize = maxsize

    def __call__(self, fn: Callable[..., Any], objs: tuple, *values: Any) -> Any:
        key = (*map(id, objs), *values)
        hit = self._entries.get(key)
        if hit is not None:
            return hit[1]
        out = fn(*objs, *values)
        if len(self._entries) >= self._maxsize:
            self._entries.clear()
        self._entries[key] = (objs, out)
        return out

    def clear(self) -> None:
        self._entries.clear()
