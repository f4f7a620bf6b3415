"""Reference tables of the job files, generated from the pydantic models that parse them.

The models are the single description of the job formats: every field carries its description there.
``scripts/job_docs.py`` writes one markdown table per section between ``<!-- job-docs: KEY -->`` and
``<!-- /job-docs -->`` markers in the README and the docs; ``tests/test_job_docs.py`` fails when a table
there differs from what :func:`render` generates, or when a field has no description.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from shardwise.serve.adapters import AdapterSpec
from shardwise.serve.config import (
    DeploymentSpec,
    EngineSpec,
    LengthClass,
    PoolSpec,
    ServeJobSpec,
    SLOSpec,
    SpeculativeSpec,
)
from shardwise.serve.lengths import LengthSpec
from shardwise.serve.precision import PrecisionSpec
from shardwise.serve.workload import SessionSpec, WorkloadSpec
from shardwise.specs.hardware import GroupSpec, GroupsSpec, HostSpec, NetworkSpec, NicSpec
from shardwise.specs.hetero import HeteroLayoutFields
from shardwise.specs.job import ClusterSpec
from shardwise.specs.model import ModelSpec
from shardwise.specs.reliability import CheckpointSpec, ReliabilitySpec, StorageSpec
from shardwise.specs.training import LoraSpec, MoeSpec, TrainingSpec, TrainPlan

#: key -> (model, what a reader calls it). Training jobs: model, cluster, training, parallel; serve jobs:
#: the top level and its blocks.
SECTIONS: dict[str, tuple[type[BaseModel], str]] = {
    "train-model": (ModelSpec, "model mapping"),
    "train-cluster": (ClusterSpec, "cluster"),
    "train-network": (NetworkSpec, "network"),
    "train-host": (HostSpec, "host"),
    "train-training": (TrainingSpec, "training"),
    "train-moe": (MoeSpec, "moe"),
    "train-lora": (LoraSpec, "lora"),
    "train-parallel": (TrainPlan, "parallel"),
    "train-reliability": (ReliabilitySpec, "reliability"),
    "train-storage": (StorageSpec, "storage"),
    "train-checkpoint": (CheckpointSpec, "checkpoint"),
    "train-groups": (GroupsSpec, "cluster with groups"),
    "train-group": (GroupSpec, "group"),
    "train-nic": (NicSpec, "nic"),
    "train-layout": (HeteroLayoutFields, "parallel on a cluster with groups"),
    "serve-job": (ServeJobSpec, "serve job"),
    "serve-deployment": (DeploymentSpec, "deployment"),
    "serve-pool": (PoolSpec, "pool"),
    "serve-length-class": (LengthClass, "length class"),
    "serve-engine": (EngineSpec, "engine"),
    "serve-workload": (WorkloadSpec, "workload"),
    "serve-length": (LengthSpec, "length"),
    "serve-slo": (SLOSpec, "slo"),
    "serve-adapters": (AdapterSpec, "adapters"),
    "serve-precision": (PrecisionSpec, "precision mapping"),
    "serve-speculative": (SpeculativeSpec, "speculative"),
    "serve-sessions": (SessionSpec, "sessions"),
}

#: Fields the parser takes in a wider shape than their annotation (validated later or converted first).
TYPE_OVERRIDES: dict[tuple[type[BaseModel], str], str] = {
    (DeploymentSpec, "engine"): "engine",
    (PoolSpec, "engine"): "engine",
    (LoraSpec, "targets"): "list of q, k, v, o, gate, up, down",
    (AdapterSpec, "targets"): "list of q, k, v, o, gate, up, down, or all",
    (ServeJobSpec, "model"): "str or model mapping",
    (TrainPlan, "dp"): "int > 0 or auto",
    (ReliabilitySpec, "spare_nodes"): "int >= 0 or auto",
    (WorkloadSpec, "input_len"): "int, str or length",
    (WorkloadSpec, "output_len"): "int, str or length",
    (WorkloadSpec, "rate"): "float > 0 or inf",
}

#: The files holding generated tables, relative to the repository root.
DOC_FILES = ("README.md", "docs/serving.md", "docs/hetero.md", "docs/goodput.md")

_BLOCK = re.compile(r"(<!-- job-docs: ([a-z-]+) -->\n)(.*?)(<!-- /job-docs -->)", re.S)


def _section_name(model: type[BaseModel]) -> str:
    for cls, name in SECTIONS.values():
        if cls is model:
            return name
    raise KeyError(f"{model.__name__} is nested in a job section but has no table; add it to SECTIONS")


def _bounds(field: FieldInfo) -> str:
    signs = {Gt: (">", "gt"), Ge: (">=", "ge"), Lt: ("<", "lt"), Le: ("<=", "le")}
    parts = []
    for meta in field.metadata:
        for kind, (sign, attr) in signs.items():
            if isinstance(meta, kind):
                parts.append(f"{sign} {getattr(meta, attr)}")
    return (" " + ", ".join(parts)) if parts else ""


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        shown = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(shown)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin is typing.Annotated:  # a name checked against a registry: its JSON schema lists the names
        enum = next((m.json_schema.get("enum") for m in annotation.__metadata__ if hasattr(m, "json_schema")), None)
        return "one of " + ", ".join(str(a) for a in enum) if enum else _type_text(args[0])
    if origin is tuple:
        return "[" + ", ".join(_type_text(a) for a in args) + "]"
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict or annotation is Any:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _section_name(annotation)
    return getattr(annotation, "__name__", str(annotation))


def _value_text(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, BaseModel):
        shown = value.model_dump(exclude_defaults=True)
        return "{" + ", ".join(f"{k}: {_value_text(v)}" for k, v in shown.items()) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return _value_text(field.default_factory())
    if field.default is PydanticUndefined:
        return "required"
    return _value_text(field.default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(key: str) -> str:
    """The markdown table of one section: field, type, default, description."""
    model, _ = SECTIONS[key]
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        kind = TYPE_OVERRIDES.get((model, name)) or _type_text(field.annotation) + _bounds(field)
        rows.append(f"| `{name}` | {_cell(kind)} | {_cell(_default_text(field))} | {_cell(field.description or '')} |")
    return "\n".join(rows) + "\n"


def refresh(text: str) -> str:
    """`text` with every marked table regenerated."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


def keys_in(text: str) -> list[str]:
    """The section keys of the marked tables in `text`."""
    return [m.group(2) for m in _BLOCK.finditer(text)]


def refresh_files(root: Path, write: bool) -> list[Path]:
    """Regenerate the tables of DOC_FILES under `root`; returns the files that were (or would be) changed."""
    changed = []
    for rel in DOC_FILES:
        path = root / rel
        text = path.read_text()
        new = refresh(text)
        if new != text:
            changed.append(path)
            if write:
                path.write_text(new)
    return changed
