"""`shardwise schema train|serve`: the shipped schemas are the generated ones, every example job points at
its schema and validates against it, and the schema and the parser agree on what a job file may hold."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")

from shardwise.cli.main import main  # noqa: E402
from shardwise.errors import ShardwiseError  # noqa: E402
from shardwise.job_schema import KINDS, job_schema  # noqa: E402
from shardwise.rl.spec import parse_rl_job  # noqa: E402
from shardwise.serve.config import parse_serve_job  # noqa: E402
from shardwise.specs.job import job_from_mapping  # noqa: E402

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if p.name != "sweep.yaml")  # sweep.yaml: a sweep
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


class Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 floats (``15e12`` is a number, as editors read it; PyYAML's YAML 1.1 needs a dot)."""


Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                   re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"),
                                   list("-+0123456789."))


def validator(kind):
    schema = job_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_accepts(kind: str, doc: Any) -> bool:
    return validator(kind).is_valid(doc)


def parser_accepts(kind: str, doc: Any) -> bool:
    try:
        if kind == "train":
            job_from_mapping(doc)
        elif kind == "rl":
            parse_rl_job(doc)
        else:
            parse_serve_job(doc, base_dir=ROOT / "examples")
    except ShardwiseError:
        return False
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_schema_is_the_generated_one(kind, capsys):
    shipped = json.loads((ROOT / "schemas" / f"{kind}.schema.json").read_text())
    assert shipped == job_schema(kind), f"regenerate: shardwise schema {kind} -o schemas/{kind}.schema.json"
    assert main(["schema", kind]) == 0
    assert json.loads(capsys.readouterr().out) == shipped


def test_schema_writes_a_file_and_rejects_an_unknown_kind(tmp_path, capsys):
    assert main(["schema", "serve", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["title"].startswith("Shardwise serving")
    assert main(["schema", "plan"]) == 2
    assert "train or serve" in capsys.readouterr().err


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_names_its_schema_and_validates(path):
    first = path.read_text().splitlines()[0]
    match = MODELINE.match(first)
    assert match, f"{path.name}: first line should be '# yaml-language-server: $schema=...'"
    kind = "serve" if path.name.startswith("serve") else "rl" if path.name.startswith("rl-") else "train"
    target = (path.parent / match.group(1)).resolve()
    assert target == (ROOT / "schemas" / f"{kind}.schema.json").resolve()
    doc = yaml.load(path.read_text(), Loader=Yaml12Loader)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(kind).iter_errors(doc)]
    assert not errors, errors
    plain = yaml.safe_load(path.read_text())  # PyYAML reads YAML 1.1: 15e12 would be a string there
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(kind).iter_errors(plain)]
    assert not errors, f"a YAML 1.1 reader sees {errors}"
    assert parser_accepts(kind, plain)


TRAIN = {"model": "llama-3.1-8b", "cluster": {"gpu": "H100-SXM", "gpus": 16},
         "training": {"seq_len": 4096, "global_batch": 64}, "parallel": {"tp": 2, "pp": 2}}
SERVE = {"model": "llama-3.1-8b", "deployment": {"gpu": "a100-80gb"},
         "workload": {"rate": 2, "num_requests": 10}}


def _with(doc, path, value):
    out = json.loads(json.dumps(doc))
    *parents, last = path
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize("kind, doc, ok", [
    ("train", TRAIN, True),
    ("train", _with(TRAIN, ["parallel", "dp"], "auto"), True),
    ("train", _with(TRAIN, ["parallel", "dp"], 4), True),
    ("train", _with(TRAIN, ["model"], {"layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 100}), True),
    ("train", [TRAIN, _with(TRAIN, ["name"], "second")], None),  # a list of jobs (the parser reads lists in load_jobs)
    ("train", _with(TRAIN, ["parallel", "tensor_parallel"], 2), False),
    ("train", _with(TRAIN, ["parallel", "recompute"], "some"), False),
    ("train", _with(TRAIN, ["parallel", "zero"], 4), False),
    ("train", _with(TRAIN, ["parallel", "tp"], 0), False),
    ("train", _with(TRAIN, ["training", "precision"], "int4"), False),
    ("train", _with(TRAIN, ["cluster", "gpu_count"], 16), False),
    ("train", _with(TRAIN, ["optimizer"], {}), False),
    ("train", _with(TRAIN, ["model"], {"layers": 2, "hidden": 64}), False),
    ("serve", SERVE, True),
    ("serve", _with(SERVE, ["workload", "input_len"], 512), True),
    ("serve", _with(SERVE, ["workload", "input_len"], "sharegpt"), True),
    ("serve", _with(SERVE, ["workload", "input_len"], {"dist": "uniform", "min": 1, "max": 9}), True),
    ("serve", _with(SERVE, ["workload", "rate"], "inf"), True),
    ("serve", _with(SERVE, ["deployment", "engine"], {"max_num_seqs": 64, "prefix_caching": True}), True),
    ("serve", _with(SERVE, ["deployment", "engine"], {"max_num_sequences": 64}), False),
    ("serve", _with(SERVE, ["deployment", "router"], "random"), False),
    ("serve", _with(SERVE, ["precision"], "int2"), False),
    ("serve", _with(SERVE, ["workload", "input_len"], {"dist": "zipf"}), False),
    ("serve", _with(SERVE, ["slo"], {"ttft_ms": -1}), False),
    ("serve", _with(SERVE, ["replicas"], 2), False),
])
def test_schema_and_parser_agree(kind, doc, ok):
    if ok is None:
        assert schema_accepts(kind, doc)
        assert all(parser_accepts(kind, d) for d in doc)
        return
    assert schema_accepts(kind, doc) is ok
    assert parser_accepts(kind, doc) is ok


def test_15e12_is_a_string_to_yaml_11_readers_and_the_schema_says_how_to_write_tokens():
    """Issue 30: a job file's `tokens: 15e12` is a string to PyYAML (YAML 1.1 wants a dot and a signed
    exponent); the schema's description of tokens says so and the spelling that every reader takes."""
    assert yaml.safe_load("tokens: 15e12")["tokens"] == "15e12"
    assert yaml.safe_load("tokens: 15.0e+12")["tokens"] == 15e12
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("tokens"), dict):
                found.append(node["tokens"].get("description", ""))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(job_schema("train"))
    assert found and all("15.0e+12" in d and "15e12" in d for d in found)
    assert not schema_accepts("train", _with(TRAIN, ["training", "tokens"], "15e12"))
    assert schema_accepts("train", _with(TRAIN, ["training", "tokens"], 15e12))
