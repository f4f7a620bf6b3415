"""docs/extending.md's toy examples, run: a GPU, a pipeline schedule, a serving scheduler policy, an
export target and an architecture feature, each added in-process the way the checklist says and run through the public path
(:mod:`shardwise.api`); and the file counts the page states, checked against :data:`FILES`."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from shardwise import api
from shardwise.cost.constants import default_constants
from shardwise.cost.flops import model_flops_per_token
from shardwise.engines import targets
from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export
from shardwise.pipeline.registry import register as register_schedule
from shardwise.pipeline.registry import unregister as unregister_schedule
from shardwise.serve import schedulers
from shardwise.serve.config import parse_serve_job
from shardwise.serve.memory import weight_bytes_per_gpu
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import simulate
from shardwise.specs import hardware, layer
from shardwise.specs.job import TrainJob
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import LoraSpec
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
    "an architecture feature of the layer's shapes": [
        "src/shardwise/specs/model.py", "src/shardwise/specs/layer.py",
        "src/shardwise/specs/hf_config.py (read from a config.json only)"],
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


def _serve(scheduler: str | None, **engine: object) -> dict:
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

def toy_export(job: TrainJob, version: str = "1.0") -> Export:
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


# -- an architecture feature: a field of ModelSpec and its linears in specs/layer.py ----------------------
# The toy: gated attention (Qiu et al. 2025, arXiv:2505.06708, the G1 gate; Qwen3-Next): an elementwise
# sigmoid gate on the attention output, computed by one more column-parallel linear h -> heads x d_v.
# (The toy leaves the gate's elementwise multiply uncosted; a real feature would add it in cost/layer.py.)

class GatedAttentionSpec(ModelSpec):
    """The field a newcomer adds to ModelSpec (here on a subclass, to leave the real one alone)."""

    attn_output_gate: bool = True


@pytest.fixture
def gated_attention(monkeypatch):
    """The entry a newcomer adds to specs/layer.py's attention_linears."""
    real = layer.attention_linears

    def with_gate(m):
        lins = real(m)
        if getattr(m, "attn_output_gate", False):
            lins += (layer.Linear("g", m.hidden, m.heads * m.d_v_head, "attention", "column"),)
        return lins

    monkeypatch.setattr(layer, "attention_linears", with_gate)
    yield lambda name: GatedAttentionSpec(**load_model(name).model_dump())


def test_toy_architecture_feature_reaches_flops_memory_serving_exports_and_the_executor(gated_attention):
    base, gated = load_model("llama-3.1-70b"), gated_attention("llama-3.1-70b")
    gate = gated.hidden * gated.heads * gated.d_v_head  # weights of one layer's gate
    assert gated.params_total - base.params_total == gated.layers * gate
    assert model_flops_per_token(gated, 4096) - model_flops_per_token(base, 4096) == 6 * gated.layers * gate
    # the estimate (FLOPs, layer time, weights) reads it through the public path
    job = _small(TRAIN_JOB)
    e_base, e_gated = api.estimate(job), api.estimate({**job, "model": gated})
    flops = lambda e: e.model_tflops_per_gpu * 1e12 / e.tokens_per_s_per_gpu  # noqa: E731
    seq = TRAIN_JOB["training"]["seq_len"]
    assert flops(e_gated) - flops(e_base) == pytest.approx(6 * gated.layers * gate, rel=1e-6)
    assert flops(e_base) == pytest.approx(model_flops_per_token(base, seq), rel=1e-9)
    assert e_gated.step_time_s > e_base.step_time_s
    assert max(e_gated.memory_per_rank_gib) > max(e_base.memory_per_rank_gib)
    # serving: the weights a GPU holds grow by the gate's, the KV cache per token does not
    small_base, small_gated = load_model("llama-3.1-8b"), gated_attention("llama-3.1-8b")
    w = Precision().weight_bytes
    grown = weight_bytes_per_gpu(small_gated, 2, 1, Precision()) - weight_bytes_per_gpu(small_base, 2, 1, Precision())
    assert grown == pytest.approx(small_gated.layers * small_gated.hidden * small_gated.heads * small_gated.d_v_head * w / 2)
    assert small_gated.kv_cache_bytes_per_token() == small_base.kv_cache_bytes_per_token()
    parsed = parse_serve_job(_serve(None))  # a serving job names its model; the toy spec goes in parsed
    served = compute_metrics(simulate(replace(parsed, model=small_gated)), parsed.slo)
    assert served["ttft_ms"]["mean"] > api.simulate_serving(_serve(None))["ttft_ms"]["mean"]
    # a LoRA fine-tune on every linear adapts the gate too
    assert "g" in LoraSpec.linears(small_gated)
    # the exports: torchtitan has no config of this architecture, megatron no flag for the gate; both say so
    from shardwise.handoff.torchtitan import torchtitan_model

    assert torchtitan_model(base)[1] == "llama3_70b"
    with pytest.raises(ShardwiseError, match="no config with this architecture"):
        torchtitan_model(gated)
    assert "--num-layers" in api.export(job, "megatron", format="args")
    with pytest.raises(ShardwiseError, match="no megatron flag .* attention.g"):
        api.export({**job, "model": gated}, "megatron", format="args")
    # the executor does not build the gate: it says so instead of running another network
    torch_model = pytest.importorskip("shardwise.execute.model")
    with pytest.raises(ShardwiseError, match="attention.g"):
        torch_model.check_executable(small_gated)
