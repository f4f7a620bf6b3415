"""A small cache keyed by object identity, for pure functions of immutable objects that are costly to
hash (frozen dataclasses with many fields, pydantic models, constants holding dicts) and are passed as
the same object many times: the catalog's GPU, the run's constants, a job's network. Each entry holds
its objects, so no other object can take their ids while it lives; the cache empties when full."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from operator import attrgetter
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


def cached_hash(self: Any) -> int:
    """``__hash__`` for a frozen dataclass that keys many caches (assign it in the class body, where the
    dataclass decorator keeps it): the hash of the compared fields, as the generated one, computed once
    per object. Pair it with :func:`dataclass_getstate`, which leaves the value out of copies and pickles
    (string hashes differ between processes)."""
    h = self.__dict__.get("_cached_hash")
    if h is None:
        h = hash(_compared(type(self))(self))
        object.__setattr__(self, "_cached_hash", h)
    return h


def dataclass_getstate(self: Any) -> dict:
    """``__getstate__`` that drops :func:`cached_hash`'s value."""
    state = dict(self.__dict__)
    state.pop("_cached_hash", None)
    return state


_COMPARED: dict[type, Callable[[Any], tuple]] = {}


def _compared(cls: type) -> Callable[[Any], tuple]:
    """The values of the fields the dataclass's own ``__eq__`` and generated ``__hash__`` use, as a tuple
    (an attrgetter: one call reads them all)."""
    get = _COMPARED.get(cls)
    if get is None:
        names = [f.name for f in fields(cls) if f.compare and (f.hash is None or f.hash)]
        get = _COMPARED[cls] = attrgetter(*names) if len(names) > 1 else (lambda obj: tuple(getattr(obj, n) for n in names))
    return get


def quick_init(cls: type) -> type:
    """Give a frozen dataclass an ``__init__`` that writes its fields straight into the instance's dict
    (apply it above ``@dataclass``). The generated one goes through ``object.__setattr__`` once per field,
    which for the small value objects an estimate builds by the dozen (per stage, per rank, per layer
    pass) cost more than the arithmetic they carry. Same signature, defaults, default factories and
    ``__post_init__`` call; only for classes without ``__slots__`` and with every field in ``__init__``."""
    params, names, lines = [], [], []
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    for f in fields(cls):
        if not f.init:
            raise TypeError(f"quick_init: {cls.__name__}.{f.name} is init=False")
        names.append(f.name)
        if f.default_factory is not MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            lines.append(f"    if {f.name} is _FACTORY:\n        {f.name} = _factory_{f.name}()\n")
        elif f.default is not MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        else:
            params.append(f.name)
    body = "".join(lines) + f"    self.__dict__.update({', '.join(f'{n}={n}' for n in names)})\n"
    if hasattr(cls, "__post_init__"):
        body += "    self.__post_init__()\n"
    exec(f"def __init__(self, {', '.join(params)}):\n{body}", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


_FACTORY = object()  # quick_init: "call the field's default_factory"
