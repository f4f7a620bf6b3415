"""What the planner says runs, runs: across the search space, for every engine, the label the planner's
filter gives a plan (the engine-rules table over all candidates at once) agrees with the one-plan verdict,
with the engine's exporter (it writes every plan labelled runnable and refuses every other with the
table's reason) and with the engine's own code on the export (tests/handoff/engine_checks.py); for torch,
with ``train run``'s own checks (config_from_job). Plans are drawn from each case's full space,
runnable and refused alike, with a fixed seed."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.engines.support import ENGINES, first_refusal, job_verdict
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.planner import job_from_plan
from shardwise.train.search_space import engine_view, enumerate_plans

TINY = ModelSpec(name="tiny", layers=8, hidden=64, heads=8, kv_heads=4, ffn=128, vocab=256)
CASES = {  # model, gpus, seq_len, global batch, precision[, training knobs]
    "llama8b-dense": ("llama-3.1-8b", 16, 4096, 64, "bf16"),
    "llama8b-fp8": ("llama-3.1-8b", 16, 4096, 64, "fp8"),
    "mixtral": ("mixtral-8x7b", 16, 4096, 64, "bf16"),
    "qwen3-30b-a3b": ("qwen3-30b-a3b", 16, 4096, 64, "bf16"),
    "deepseek-v3": ("deepseek-v3", 64, 4096, 256, "bf16"),
    # the job-level MoE knobs: experts looped (no grouped GEMM), the all-to-alls overlapped, expandable segments
    "qwen3-30b-a3b-knobs": ("qwen3-30b-a3b", 16, 4096, 64, "bf16",
                            {"moe": {"grouped_gemm": False, "overlap_a2a": True}, "expandable_segments": True}),
    "tiny": (TINY, 8, 64, 16, "fp32"),
}
PER_SIDE = 8  # plans drawn on each side (runnable, refused) per case and engine


def _space(case):
    name, gpus, seq, batch, precision, *knobs = CASES[case]
    model = name if isinstance(name, ModelSpec) else load_model(name)
    cluster = make_cluster("h100", gpus)
    training = TrainingSpec(seq_len=seq, global_batch=batch, precision=precision, **(knobs[0] if knobs else {}))
    cands = enumerate_plans(model, cluster, training)
    return model, cluster, training, cands


_SPACES: dict = {}


def space(case):
    if case not in _SPACES:
        _SPACES[case] = _space(case)
    return _SPACES[case]


def drawn(case, engine):
    """(job, label) for plans drawn from the case's space: PER_SIDE the planner labels runnable, PER_SIDE not."""
    model, cluster, training, cands = space(case)
    ok = first_refusal(engine_view(cands, model, training), engine)[1]
    rng = np.random.default_rng(7)
    out = []
    for side in (True, False):
        idx = np.nonzero(ok == side)[0]
        for i in rng.choice(idx, size=min(PER_SIDE, len(idx)), replace=False).tolist():
            out.append((job_from_plan(model, cluster, training, cands.plan_dict(i)), side))
    return out


def _engine_accepts(engine, job, tmp_path):
    """Run the engine's exporter (train run's checks for torch) and, for the export, the engine's own code."""
    from shardwise.handoff import export_train
    from tests.handoff import engine_checks

    if engine == "torch":
        from shardwise.execute import config_from_job

        return config_from_job(job)
    exp = export_train(job, engine)
    if engine == "torchtitan":
        pytest.importorskip("torchtitan.config", reason="torchtitan 0.3.0 not installed")
        return engine_checks.torchtitan_accepts(exp, job, tmp_path)
    if engine == "deepspeed":
        pytest.importorskip("deepspeed.runtime.config", reason="deepspeed 0.19.8 not installed")
        return engine_checks.deepspeed_accepts(exp, job)
    return engine_checks.megatron_accepts(exp, job)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_planner_label_exporter_and_engine_agree(case, engine, tmp_path):
    if (engine == "torch") != (case == "tiny"):  # train run builds the model for real: the tiny case only
        pytest.skip("torch runs the tiny case; the engines the real models")
    pairs = drawn(case, engine)
    assert pairs, "the case has plans"
    for job, runnable in pairs:
        v = job_verdict(job, engine)
        assert v.runnable == runnable, (job.plan, v)
        if runnable:
            _engine_accepts(engine, job, tmp_path)
        else:
            with pytest.raises(ShardwiseError, match="cannot run this plan"):
                _engine_accepts(engine, job, tmp_path)


TOP_CASES = {"llama70b-64xh100": "bf16", "llama70b-64xh100-fp8": "fp8"}


@pytest.mark.parametrize("case", list(TOP_CASES))
def test_top_picks_run_on_every_engine_they_are_labelled_for(case, tmp_path):
    """The 70B / 64 H100 top picks (the default search and each engine's own search, bf16 and fp8) export
    to every engine whose label they carry, and the engine's own code accepts the export."""
    from shardwise.engines.support import runnable_on
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.plan_report import engine_verdicts, job_mapping
    from shardwise.train.planner import plan_search

    model, cluster = load_model("llama-3.1-70b"), make_cluster("h100", 64)
    training = TrainingSpec(seq_len=8192, global_batch=128, precision=TOP_CASES[case])
    picks = plan_search(model, cluster, training, top_k=2, max_exact=16).top
    for engine in ("torchtitan", "megatron", "deepspeed"):
        try:
            picks += plan_search(model, cluster, training, top_k=1, max_exact=16, runnable_on=(engine,)).top
        except ShardwiseError as exc:  # nothing it runs: DeepSpeed has no fp8 switch
            assert engine == "deepspeed" and training.precision == "fp8", exc
    checked = 0
    for e in picks:
        job = job_from_mapping(job_mapping(e, model, training, [cluster]))
        labels = [k for k, v in engine_verdicts(e, model, training).items() if v.runnable]
        assert labels == runnable_on(job.plan, job.model, job.training, recipe=e.fp8_recipe or "none",
                                     arch=cluster.gpu.arch)
        for engine in labels:
            if engine != "torch":  # train run builds the model for real: the agreement test's tiny case
                _engine_accepts(engine, job, tmp_path)
                checked += 1
    assert checked >= 2  # at least each engine's own pick (DeepSpeed has none in fp8)
