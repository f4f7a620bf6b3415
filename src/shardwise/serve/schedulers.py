"""Serving scheduler policies chosen by name (``engine.scheduler`` in a serve job): one class per policy
holding its label, the engine family it replays, the releases it stands for (its version rule), the
batching it runs (an :mod:`shardwise.serve.policies` engine class, by name), its release-dependent defaults
and the knob checks it imposes on the token budget. :data:`SCHEDULERS` is the registry by name; a name not
in it is refused with the known ones.

Adding a policy: one subclass here (or in a module imported before use) decorated with :func:`register`;
if its batching is new, one :mod:`shardwise.serve.policies` engine class too (two files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from shardwise.serve.config import EngineSpec

#: vLLM releases from this one on have only the V1 engine: prefills always chunked into mixed batches, no
#: multi-step scheduling (the V0 engine and --num-scheduler-steps are gone from vllm/engine/arg_utils.py;
#: the 0.33.0 flag table in data/engines/vllm.json has neither).
VLLM_V1_ONLY = (0, 11)
#: The V1 engine is vLLM's default from this release on (VLLM_USE_V1=1 by default; vLLM 0.8.0 release notes).
VLLM_V1_DEFAULT = (0, 8)
#: vLLM V1 schedules step n+1 while step n runs by default from this release on (vLLM PR #27614; v0.14.0).
VLLM_ASYNC_DEFAULT = (0, 14)
#: SGLang's overlap scheduler (CPU scheduling of the next batch while the GPU runs this one) is on by
#: default from this release on (SGLang v0.4 release blog, "zero-overhead batch scheduler").
SGLANG_OVERLAP = (0, 4)


class Scheduler:
    """One named scheduler policy. ``family``: the inference engine it replays (``vllm``, ``sglang``);
    ``chunked`` / ``unchunked``: the batching policy (:data:`shardwise.serve.policies.ENGINE_POLICIES`)
    with ``chunked_prefill`` true / false."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    family: ClassVar[str] = "vllm"
    chunked: ClassVar[str] = "mixed"
    unchunked: ClassVar[str] = "prefill-first"

    @classmethod
    def replays(cls, family: str, release: tuple[int, ...]) -> bool:
        """Version rule: whether a job that gives only ``version`` (``family``-``release``) runs this policy."""
        return False

    @classmethod
    def batching(cls, chunked_prefill: bool) -> str:
        return cls.chunked if chunked_prefill else cls.unchunked

    @classmethod
    def overlaps(cls, release: tuple[int, ...]) -> bool:
        """The CPU work of a step overlaps the GPU's by default at ``release``."""
        return False

    @classmethod
    def async_output(cls, family: str, release: tuple[int, ...]) -> bool:
        """Each token reaches the client one iteration after it is sampled."""
        return False

    @classmethod
    def caches_prefixes(cls) -> bool:
        """Prefix caching on by default."""
        return False

    @classmethod
    def check(cls, spec: EngineSpec) -> None:
        """Raise ValueError for knobs this policy does not have (the budget checks of the engine block)."""
        if spec.num_scheduler_steps > 1:
            raise ValueError("num_scheduler_steps is vLLM V0's multi-step scheduling (removed with the V0 engine in "
                             "vLLM 0.11); drop it, or set version: vllm-0.6.0 to replay an old benchmark")


SCHEDULERS: dict[str, type[Scheduler]] = {}
#: The policy of an engine block that names neither a scheduler nor a version.
DEFAULT = "vllm-v1"


def register(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: make a scheduler policy selectable by its ``name``."""
    if not cls.name or (cls.name in SCHEDULERS and SCHEDULERS[cls.name] is not cls):
        raise ValueError(f"scheduler policy {cls.__name__} needs a unique name, got {cls.name!r}")
    SCHEDULERS[cls.name] = cls
    return cls


def scheduler(name: str) -> type[Scheduler]:
    """The policy called ``name``; an unknown name is a ValueError listing the known ones."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name]


def for_version(family: str, release: tuple[int, ...]) -> type[Scheduler]:
    """The policy a bare ``version`` selects (the first registered whose version rule claims it)."""
    return next((s for s in SCHEDULERS.values() if s.replays(family, release)), SCHEDULERS[DEFAULT])


@register
class VllmV1(Scheduler):
    """vLLM's V1 engine (current): prefills always chunked into mixed batches; async scheduling by
    default from 0.14."""

    name = "vllm-v1"
    label = "vLLM V1 (current vLLM)"

    @classmethod
    def replays(cls, family: str, release: tuple[int, ...]) -> bool:
        return family == "vllm" and release >= VLLM_V1_DEFAULT

    @classmethod
    def overlaps(cls, release: tuple[int, ...]) -> bool:
        return release >= VLLM_ASYNC_DEFAULT

    @classmethod
    def check(cls, spec: EngineSpec) -> None:
        if not spec.chunked_prefill:
            raise ValueError("chunked_prefill: false is the prefill-first scheduler of vLLM's V0 engine (removed in "
                             "vLLM 0.11) or of SGLang; current vLLM always chunks prefills: drop it, or set "
                             "version: vllm-0.6.0 (or scheduler: sglang) to replay that scheduler")
        super().check(spec)


@register
class Sglang(Scheduler):
    """SGLang 0.4+ (overlap scheduler, radix cache); older releases replay their prefill-first scheduler."""

    name = "sglang"
    label = "SGLang"
    family = "sglang"
    chunked = "chunked-prefill-first"

    @classmethod
    def replays(cls, family: str, release: tuple[int, ...]) -> bool:
        return family == "sglang"

    @classmethod
    def overlaps(cls, release: tuple[int, ...]) -> bool:
        return release >= SGLANG_OVERLAP

    @classmethod
    def caches_prefixes(cls) -> bool:
        return True


@register
class VllmV0(Scheduler):
    """vLLM's V0 engine, kept to replay benchmarks of vLLM before 0.11: prefill-first or chunked, multi-step
    scheduling, async output processing from 0.6.0 (PR #7049)."""

    name = "vllm-v0"
    label = "vLLM V0 (replay)"

    @classmethod
    def replays(cls, family: str, release: tuple[int, ...]) -> bool:
        return family == "vllm" and release < VLLM_V1_DEFAULT

    @classmethod
    def async_output(cls, family: str, release: tuple[int, ...]) -> bool:
        return family == "vllm" and release >= (0, 6)

    @classmethod
    def check(cls, spec: EngineSpec) -> None:
        pass


__all__ = ["DEFAULT", "SCHEDULERS", "Scheduler", "for_version", "register", "scheduler"]
