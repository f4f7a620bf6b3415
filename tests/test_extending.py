"""docs/extending.md's toy examples, run: a GPU, a pipeline schedule, a serving scheduler policy and an
export target, each added in-process the way the checklist says and run through the public path
(:mod:`shardwise.api`); and the file counts the page states, checked against :data:`FILES`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from shardwise import api
from shardwise.cost.constants import default_constants
from shardwise.engines import targets
from shardwise.handoff.common import Export
from shardwise.pipeline.registry import register as register_schedule
from shardwise.pipeline.registry import unregister as unregister_schedule
from shardwise.serve import schedulers
from shardwise.specs import hardware
from tests.pipeline.test_new_schedule import NAME as TOY_SCHEDULE
from tests.pipeline.test_new_schedule import TOY

ROOT = Path(__file__).resolve().parents[1]
TRAIN_JOB = yaml.safe_load((ROOT / "examples/llama3.1-70b-64xh100.yaml").read_text())
SERVE_JOB = yaml.safe_load((ROOT / "examples/serve-llama3.1-8b-a100.yaml").read_text())

#: What each addition needs, counted from the code: the files a newcomer writes or edits (generated files
#: -- a flag table written by scripts/extract_engine_flags.py, tables written by scripts/job_docs.py -- and
#: tests and docs not counted). The page's table must say the same.
FILES = {
    "a GPU of a known architecture": ["src/shardwise/data/gpus.yaml"],
    "a pipeline schedule": ["src/shardwise/pipeline/gen_*.py", "src/shardwise/pipeline/registry.py"],
    "a serving scheduler policy": ["src/shardwise/serve/schedulers.py", "src/shardwise/serve/policies.py (new batching only)"],
    "an export target": ["src/shardwise/handoff/<target>.py", "src/shardwise/engines/targets.py"],
}


def _count(files: list[str]) -> str:
    optional = sum("only)" in f for f in files)
    return f"{len(files) - optional}–{len(files)}" if optional else str(len(files))


def test_doc_counts_match_the_code():
    text = (ROOT / "docs/extending.md").read_text()
    rows = dict(re.findall(r"^\| (a[n]? [^|]+?) \| ([0-9–]+) \|", text, re.M))
    assert rows == {k: _count(v) for k, v in FILES.items()}
    for files in FILES.values():
        for f in files:
            path = f.split(" ")[0]
            if "*" not in path and "<" not in path:
                assert (ROOT / path).exists(), path


def _small(job: dict, gpu: str | None = None) -> dict:
    job = {**job, "cluster": {**job["cluster"]}, "parallel": {**job["parallel"]}}
    if gpu:
        job["cluster"]["gpu"] = gpu
    return job


# -- a GPU: one entry in data/gpus.yaml (here added to the loaded catalog in-process) -----------------------

@pytest.fixture
def toy_gpu(monkeypatch):
    real = hardware.load_yaml

    def with_toy(path):
        raw = real(path)
        if Path(str(path)).name == "gpus.yaml":
            raw = {**raw, "TOY-H100": {**raw["H100-SXM"], "aliases": ["toyh100"], "family": "H100-SXM"}}
        return raw

    def clear():  # the catalog, and the constants that read its families
        hardware._catalog.cache_clear()
        hardware._alias_index.cache_clear()
        default_constants.cache_clear()

    monkeypatch.setattr(hardware, "load_yaml", with_toy)
    clear()
    yield "TOY-H100"
    monkeypatch.undo()
    clear()


def test_toy_gpu_estimates_as_its_family(toy_gpu):
    toy = api.estimate(_small(TRAIN_JOB, toy_gpu))
    assert toy.gpu == toy_gpu
    ref = api.estimate(_small(TRAIN_JOB, "H100-SXM"))
    assert toy.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)


# -- a pipeline schedule: tests/pipeline/test_new_schedule.py's toy, one generator and one registration ---

def test_toy_schedule_runs_through_the_estimate():
    register_schedule(TOY)
    try:
        job = _small(TRAIN_JOB)
        job["parallel"]["schedule"] = TOY_SCHEDULE
        e = api.estimate(job)
        assert e.plan["schedule"] == TOY_SCHEDULE and e.step_time_s > 0
        # no torch class on its record: torchtitan would run it from our CSV
        from shardwise.handoff.torchtitan import schedule_choice

        assert schedule_choice(TOY_SCHEDULE, 4, 1) == ("1F1B", True)
    finally:
        unregister_schedule(TOY_SCHEDULE)


# -- a serving scheduler policy: one class registered by name ----------------------------------------------

class ToyPrefillFirstV1(schedulers.VllmV1):
    """vLLM V1's knobs with V0's prefill-first batching (a test exercise)."""

    name = "toy-prefill-first"
    label = "toy: prefill-first batches"
    chunked = "prefill-first"

    @classmethod
    def replays(cls, family, release):
        return False


@pytest.fixture
def toy_policy():
    schedulers.register(ToyPrefillFirstV1)
    yield ToyPrefillFirstV1.name
    schedulers.SCHEDULERS.pop(ToyPrefillFirstV1.name)


def _serve(scheduler: str | None, **engine) -> dict:
    job = {**SERVE_JOB, "workload": {**SERVE_JOB["workload"], "num_requests": 200}}
    deployment = {**job["deployment"], "engine": {**job["deployment"]["engine"], **engine}}
    if scheduler:
        deployment["engine"]["scheduler"] = scheduler
    return {**job, "deployment": deployment}


def test_toy_policy_is_chosen_by_name(toy_policy):
    toy = api.simulate_serving(_serve(toy_policy))
    v0 = api.simulate_serving(_serve("vllm-v0", chunked_prefill=False))
    v1 = api.simulate_serving(_serve(None))
    assert toy["ttft_ms"] != v1["ttft_ms"]  # its own batching ran
    assert toy["request_throughput"] == pytest.approx(v0["request_throughput"], rel=0.05)


def test_unknown_policy_lists_the_known():
    with pytest.raises(Exception, match="known: vllm-v1, sglang, vllm-v0"):
        api.simulate_serving(_serve("no-such"))


# -- an export target: an exporter module and one registration ---------------------------------------------

def toy_export(job, version: str = "1.0") -> Export:
    """The toy exporter: the plan's degrees as flags."""
    p = job.plan
    return Export("toy", version, [f"--tp={p.tp}", f"--pp={p.pp}", f"--dp={p.dp}"], launcher=["toyrun"])


@pytest.fixture
def toy_target():
    targets.register(targets.ExportTarget("toy", "training", "Toy", f"{__name__}:toy_export", "1.0", abbrev="ty",
                                          rules="torchtitan"))
    yield "toy"
    targets.unregister("toy")


def test_toy_export_target_through_cli_api_and_support(toy_target):
    from shardwise.engines.support import job_verdict, parse_engines
    from shardwise.specs.job import job_from_mapping

    job = _small(TRAIN_JOB)
    text = api.export(job, toy_target, format="args")
    assert "--tp=8" in text and "--pp=4" in text
    assert toy_target in targets.choices_help("training")
    assert parse_engines("toy,megatron") == ("toy", "megatron")
    tj = job_from_mapping(job)
    assert job_verdict(tj, "toy").runnable == job_verdict(tj, "torchtitan").runnable  # its rules: torchtitan's
    with pytest.raises(Exception, match="toy"):
        api.export(job, "nope")
