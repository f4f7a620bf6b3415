"""The export-target registry: one entry per engine a plan can be handed to (``train export --to``,
``serve export --to``).

An :class:`ExportTarget` says everything the rest of Shardwise reads about a target: its name, kind
(``training`` or ``serving``), how messages name it, the function that writes its launch (``module:function``,
imported when first used, so this module stays at the bottom of the layering), the release it is pinned
at, the key of its rules in the engine-rules table (:mod:`shardwise.engines.table`), the software stack a
plan offered for it is costed with and its flag table in ``data/engines/``. The CLI's ``--to`` and
``--runnable-on`` help and choices, the plan report's "runs on" column, the web API and page, the
exporters' dispatch (:mod:`shardwise.handoff`) and the engine-support checks (:mod:`shardwise.engines.support`)
read it from here.

Adding a target is two files: the exporter module and one :func:`register` call below (or in any module
imported before use; the tests register a toy one in-process).

"Engine" in names here means the program that runs a plan: a training framework (``torchtitan``,
``megatron``, ``deepspeed``, and ``torch`` for ``train run``) or an inference engine (``vllm``, ``sglang``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from shardwise.errors import ShardwiseError

Kind = Literal["training", "serving"]


@dataclass(frozen=True)
class ExportTarget:
    """One export target. ``exporter``: ``"module:function"``; a training exporter is called as
    ``fn(job)`` or ``fn(job, version)``, a serving one as ``fn(job, name, version)`` and returns one
    export per pool. ``rules``: the engine key of its entries in the engine-rules table (training; None:
    the target's own name). ``stack``: ``training.framework`` a plan offered for it is costed with (None:
    the job's). ``flag_table``: its file in ``data/engines/`` (None: no extracted table)."""

    name: str
    kind: Kind
    label: str
    exporter: str
    version: str
    abbrev: str = ""
    rules: str | None = None
    stack: str | None = None
    flag_table: str | None = None

    @property
    def rules_key(self) -> str:
        return self.rules or self.name

    def export_fn(self) -> Callable[..., Any]:
        module, _, fn = self.exporter.partition(":")
        return getattr(importlib.import_module(module), fn)


TARGETS: dict[str, ExportTarget] = {}


def register(target: ExportTarget) -> ExportTarget:
    """Add ``target`` (a name registered twice is an error)."""
    if target.kind not in ("training", "serving"):
        raise ValueError(f"export target {target.name!r}: kind must be training or serving, got {target.kind!r}")
    if target.name in TARGETS and TARGETS[target.name] != target:
        raise ValueError(f"export target {target.name!r} is already registered")
    TARGETS[target.name] = target
    return target


def unregister(name: str) -> None:
    """Remove a target (tests that register a toy one)."""
    TARGETS.pop(name, None)


def names(kind: Kind | None = None) -> tuple[str, ...]:
    """The registered targets' names, of ``kind`` (default: all), in registration order."""
    return tuple(n for n, t in TARGETS.items() if kind is None or t.kind == kind)


def get(name: str, kind: Kind | None = None) -> ExportTarget:
    """The target called ``name`` (case-insensitive); an unknown name is one error line listing the known."""
    key = (name or "").strip().lower()
    t = TARGETS.get(key)
    if t is None or (kind is not None and t.kind != kind):
        raise ShardwiseError(f"--to must be one of {', '.join(names(kind))}, got {name!r}")
    return t


def choices_help(kind: Kind) -> str:
    """``"a | b | c"``: the ``--to`` help."""
    return " | ".join(names(kind))


#: The training engine that is not an export target: ``train run`` (:mod:`shardwise.execute`), pinned at
#: the torch build the executor runs on. The engine-rules table holds its rules beside the targets'.
RUN_ENGINE = "torch"
RUN_LABEL = "train run"
RUN_VERSION = "2.13.0"
RUN_ABBREV = "T"


def rule_engines() -> tuple[str, ...]:
    """The engines the engine-rules table answers for: ``torch`` and every training target."""
    return (RUN_ENGINE, *names("training"))


def engine_label(engine: str) -> str:
    return RUN_LABEL if engine == RUN_ENGINE else TARGETS[engine].label


def engine_version(engine: str) -> str:
    return RUN_VERSION if engine == RUN_ENGINE else TARGETS[engine].version


def engine_abbrev(engine: str) -> str:
    return RUN_ABBREV if engine == RUN_ENGINE else (TARGETS[engine].abbrev or engine)


def rules_key(engine: str) -> str:
    return engine if engine == RUN_ENGINE or engine not in TARGETS else TARGETS[engine].rules_key


# The built-in targets. Megatron-LM is a source checkout (its core release tag).
register(ExportTarget("torchtitan", "training", "torchtitan", "shardwise.handoff.torchtitan:export_torchtitan",
                      "0.3.0", abbrev="tt", stack="torchtitan"))
register(ExportTarget("megatron", "training", "Megatron-LM", "shardwise.handoff.megatron:export_megatron",
                      "core_r0.20.0", abbrev="M", stack="megatron", flag_table="megatron.json"))
register(ExportTarget("deepspeed", "training", "DeepSpeed", "shardwise.handoff.deepspeed:export_deepspeed",
                      "0.19.8", abbrev="DS", stack="deepspeed"))
register(ExportTarget("vllm", "serving", "vLLM", "shardwise.handoff.serving:export_serving", "0.33.0",
                      flag_table="vllm.json"))
register(ExportTarget("sglang", "serving", "SGLang", "shardwise.handoff.serving:export_serving", "0.5.23",
                      flag_table="sglang.json"))

__all__ = ["TARGETS", "ExportTarget", "choices_help", "engine_abbrev", "engine_label", "engine_version", "get",
           "names", "register", "rule_engines", "rules_key", "unregister"]
