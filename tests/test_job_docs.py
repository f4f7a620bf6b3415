"""The job formats have one source, the pydantic models: every field is described there, the tables in
the README and docs are what the models generate, and the YAML examples there parse."""

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from shardwise.job_docs import DOC_FILES, SECTIONS, keys_in, refresh, render
from shardwise.serve.config import parse_serve_job
from shardwise.specs.job import job_from_mapping

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rel", DOC_FILES)
def test_generated_tables_are_up_to_date(rel):
    text = (ROOT / rel).read_text()
    assert refresh(text) == text, f"{rel}: a job-file table is out of date; run python scripts/job_docs.py"


def test_every_section_has_exactly_one_table():
    keys = [k for rel in DOC_FILES for k in keys_in((ROOT / rel).read_text())]
    assert sorted(keys) == sorted(SECTIONS)


@pytest.mark.parametrize("key", list(SECTIONS))
def test_every_field_is_described(key):
    model, _ = SECTIONS[key]
    bare = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not bare, f"{model.__name__}: fields without a description: {bare}"
    table = render(key)
    assert all(f"| `{name}` |" in table for name in model.model_fields)


def test_a_nested_model_without_a_table_is_refused():
    class Inner(BaseModel):
        x: int = 0

    class Outer(BaseModel):
        inner: Inner

    SECTIONS["test-outer"] = (Outer, "outer")
    try:
        with pytest.raises(KeyError, match="Inner"):
            render("test-outer")
    finally:
        del SECTIONS["test-outer"]


def _yaml_jobs(rel):
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / rel).read_text(), re.S)
    return [yaml.safe_load(b) for b in blocks if b.lstrip().startswith(("model:", "# job.yaml"))]


@pytest.mark.parametrize("rel", ["README.md", "docs/executor.md"])
def test_yaml_examples_in_the_docs_parse(rel):
    docs = _yaml_jobs(rel)
    assert docs, f"{rel}: no job example found"
    for doc in docs:
        if "cluster" in doc:
            job_from_mapping(doc)
        else:
            parse_serve_job(doc)
