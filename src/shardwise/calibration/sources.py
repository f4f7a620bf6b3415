"""What each calibration source states where its records are silent (``data/calibration_sources.yaml``):
its software stack, defaults, FLOP conventions and leave-one-source-out group."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from shardwise.specs._loading import data_path, load_yaml


@dataclass(frozen=True)
class Source:
    prefix: str
    label: str
    group: str
    facts: dict[str, Any] = field(default_factory=dict)  # defaults for silent records
    records: dict[str, Any] = field(default_factory=dict)  # per-record facts (a mapping) or a skip reason
    skip: str | None = None

    def record_facts(self, record_id: str) -> dict[str, Any]:
        """The source's defaults overlaid with the record's own facts."""
        own = self.records.get(record_id) or {}
        return {**self.facts, **own} if isinstance(own, dict) else dict(self.facts)


RESERVED_KEYS = ("label", "group", "records", "skip")


@lru_cache(maxsize=1)
def sources() -> dict[str, Source]:
    raw = load_yaml(data_path("calibration_sources.yaml"))
    return {
        prefix: Source(
            prefix=prefix,
            label=entry.get("label", prefix),
            group=entry.get("group", prefix),
            facts={k: v for k, v in entry.items() if k not in RESERVED_KEYS},
            records=dict(entry.get("records") or {}),
            skip=entry.get("skip"),
        )
        for prefix, entry in raw.items()
    }


def source_of(record_id: str) -> Source:
    """The source of a record, by its id prefix (the text before the first underscore)."""
    prefix = record_id.split("_", 1)[0]
    return sources().get(prefix) or Source(prefix=prefix, label=prefix, group=prefix)
