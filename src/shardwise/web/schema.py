"""The OpenAPI description of the request bodies, built from the same pydantic models that check job files
and options, with the catalog's names as enums (what a person reading /docs, or a fuzzer, should send)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from shardwise.rl.spec import RLJobSpec
from shardwise.serve.config import DeploymentSpec, SLOSpec
from shardwise.serve.workload import WorkloadSpec
from shardwise.specs.job import ClusterSpec
from shardwise.specs.model import ModelSpec
from shardwise.specs.reliability import CheckpointSpec
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.web.inputs import (
    RLPlanBody,
    ScheduleCompareBody,
    ScheduleSimulateBody,
    ServePlanBody,
    ServeSimulateBody,
    TrainExportBody,
    TrainPlanBody,
)

REF = "#/components/schemas/{model}"


class TrainJobDocument(BaseModel):
    """A training job document, as in a job file (`parallel.dp` may be "auto")."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    model: str | dict[str, Any]
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: TrainPlan
    checkpoint: CheckpointSpec | None = None


class ServeJobDocument(BaseModel):
    """A serve job document, as in a job file (`workload.path` is replaced by an uploaded `trace_csv`)."""

    model_config = ConfigDict(extra="forbid")

    model: str | dict[str, Any]
    precision: str | dict[str, Any] = "bf16"
    deployment: DeploymentSpec
    workload: WorkloadSpec
    slo: SLOSpec | None = None
    name: str | None = None


class HFConfig(BaseModel):
    """A Hugging Face config.json, pasted (the fields Shardwise reads; others are ignored)."""

    model_config = ConfigDict(extra="allow")

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    intermediate_size: int | None = None
    model_type: str | None = None


# Request body of each POST endpoint, by path.
BODIES: dict[str, type[BaseModel] | dict[str, Any]] = {
    "/api/train/estimate": TrainJobDocument,
    "/api/train/plan": TrainPlanBody,
    "/api/train/export": TrainExportBody,
    "/api/schedule/simulate": ScheduleSimulateBody,
    "/api/schedule/compare": ScheduleCompareBody,
    "/api/serve/simulate": ServeSimulateBody,
    "/api/serve/plan": ServePlanBody,
    "/api/rl/estimate": RLJobSpec,
    "/api/rl/plan": RLPlanBody,
}


def _ref(name: str, nullable: bool = False) -> dict[str, Any]:
    ref = {"$ref": REF.format(model=name)}
    return {"anyOf": [ref, {"type": "null"}], "default": None} if nullable else ref


def _model_ref(nullable: bool = False) -> dict[str, Any]:
    from shardwise.specs.model import preset_names

    kinds = [{"type": "string", "enum": preset_names()}, _ref("ModelSpec"), _ref("HFConfig")]
    return {"anyOf": kinds + ([{"type": "null"}] if nullable else []),
            "description": "a preset name, a ModelSpec mapping or a pasted Hugging Face config.json"}


def _gpu() -> dict[str, Any]:
    from shardwise.specs.hardware import gpu_names

    one = {"type": "string", "enum": gpu_names()}
    return {"anyOf": [one, {"type": "array", "items": one}, {"type": "null"}], "default": None,
            "description": "GPU type(s) from the catalog (or aliases such as h100; comma-separated to compare)"}


def _overrides() -> dict[tuple[str, str], dict[str, Any]]:
    """(component, property) -> the schema to document: fields the models keep loose (the CLI's parsers
    check them, with the CLI's messages) are described by the models of the job files."""
    return {
        ("TrainJobDocument", "model"): _model_ref(),
        ("ServeJobDocument", "model"): _model_ref(),
        ("ServeSimulateBody", "model"): _model_ref(),
        ("TrainPlanBody", "model"): _model_ref(nullable=True),
        ("ServePlanBody", "model"): _model_ref(nullable=True),
        ("TrainPlanBody", "job"): _ref("TrainJobDocument", nullable=True),
        ("TrainExportBody", "job"): _ref("TrainJobDocument"),
        ("TrainPlanBody", "gpu"): _gpu(),
        ("ServePlanBody", "job"): _ref("ServeJobDocument", nullable=True),
        ("ServePlanBody", "workload"): _ref("WorkloadSpec", nullable=True),
        ("ServeSimulateBody", "deployment"): _ref("DeploymentSpec"),
        ("ServeSimulateBody", "workload"): _ref("WorkloadSpec"),
        ("ServeSimulateBody", "slo"): _ref("SLOSpec", nullable=True),
        ("RLJobSpec", "policy"): _model_ref(),
        ("RLJobSpec", "cluster"): _ref("ClusterSpec"),
        ("RLJobSpec", "parallel"): _ref("TrainPlan", nullable=True),
        ("RLPlanBody", "job"): _ref("RLJobSpec"),
    }


def _schema(cls: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = cls.model_json_schema(ref_template=REF)
    components.update(schema.pop("$defs", {}))
    components[cls.__name__] = schema
    return _ref(cls.__name__)


@lru_cache(maxsize=1)
def body_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """(request-body schema by path, component schemas to add to the OpenAPI document)."""
    components: dict[str, Any] = {}
    for cls in (ModelSpec, HFConfig, ServeJobDocument):
        _schema(cls, components)
    bodies = {path: _schema(cls, components) for path, cls in BODIES.items()}
    for (name, prop), schema in _overrides().items():
        components[name]["properties"][prop] = schema
    return bodies, components


def add_bodies(openapi: dict[str, Any]) -> dict[str, Any]:
    """Put the request-body schemas into an OpenAPI document made by FastAPI."""
    bodies, components = body_schemas()
    openapi.setdefault("components", {}).setdefault("schemas", {}).update(components)
    for path, ref in bodies.items():
        op = openapi["paths"].get(path, {}).get("post")
        if op is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref}}}
    return openapi
