"""A batch of `train estimate` jobs: each job is built and estimated on its own, and one that cannot be is
reported in place (its error), so one bad job does not hide the others' answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import ShardwiseError, clip


@dataclass(frozen=True)
class JobError:
    """The error of job `index` (0-based) of a batch, where its estimate would be."""

    index: int
    name: str | None
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.index, "name": self.name, "error": self.error}

    @property
    def label(self) -> str:
        return f"job[{self.index}]" + (f" ({self.name})" if self.name else "")

    def line(self) -> str:
        return f"{self.label}: {self.error}"


def _name(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return None
    for key in ("name", "model"):
        if isinstance(doc.get(key), str):
            return clip(doc[key], 80)
    return None


def estimate_batch(doc: Any, source: str = "job") -> list[tuple[Any, Any]]:
    """(job, its estimate with goodput) for each job of a parsed document, or (None, its :class:`JobError`)
    in place; a document of one job raises its error instead."""
    from shardwise.specs.job import jobs_or_errors
    from shardwise.train.goodput import estimate_with_goodput

    docs = doc if isinstance(doc, list) else [doc]
    out: list[Any] = []
    for i, job in enumerate(jobs_or_errors(doc, source)):
        if not isinstance(job, ShardwiseError):
            try:
                out.append((job, estimate_with_goodput(job)))
                continue
            except ShardwiseError as exc:
                if len(docs) == 1:
                    raise
                job = exc
        message = str(job).removeprefix(f"job[{i}].").removeprefix(f"job[{i}]: ")
        out.append((None, JobError(i, _name(docs[i]), clip(message, 400))))
    return out
