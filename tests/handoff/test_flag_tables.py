"""Every flag an export writes exists, with or without a value as the engine's parser expects, in the
flag table extracted from the pinned engine (scripts/extract_engine_flags.py): Megatron-LM from its real
parser; vLLM 0.33.0 and SGLang 0.5.23 from their wheels' source. Megatron-LM's own parse_args and
validate_args also accept the exports in tests/handoff/test_megatron_real.py when a checkout is given."""

import json

import pytest

from shardwise.handoff import export_serve, export_train
from shardwise.serve.config import load_serve_job
from shardwise.specs._loading import data_path
from tests.handoff.conftest import ROOT, jobs_for, resolve_job


def table(engine):
    return json.loads(data_path(f"engines/{engine}.json").read_text())["flags"]


def check_flags(args, flags):
    """Walk the argument list: each option is known; a switch takes no value, an option takes one (or more)."""
    i = 0
    while i < len(args):
        opt = args[i]
        assert opt.startswith("-") and opt in flags, f"{opt} is not a flag of the pinned engine"
        i += 1
        if flags[opt]["takes_value"]:
            assert i < len(args) and not args[i].startswith("--"), f"{opt} needs a value"
            choices = flags[opt]["choices"]
            assert choices is None or args[i] in choices, f"{opt} {args[i]} not in {choices}"
            i += 1
            while i < len(args) and not args[i].startswith("--"):  # nargs='+'
                i += 1


@pytest.mark.parametrize("item", jobs_for("megatron"))
def test_megatron_flags_exist(item):
    job = resolve_job(item, "megatron")
    args = export_train(job, "megatron").args
    check_flags(args, table("megatron"))
    vals = dict(zip(args, args[1:]))
    p = job.plan
    assert (int(vals["--tensor-model-parallel-size"]), int(vals["--pipeline-model-parallel-size"]),
            int(vals["--context-parallel-size"]), int(vals["--micro-batch-size"]),
            int(vals["--global-batch-size"])) == (p.tp, p.pp, p.cp, p.micro_batch, job.training.global_batch)
    if p.pp > 1:
        layout = vals["--pipeline-model-parallel-layout"]
        assert layout.count("t") == job.model.layers and layout.startswith("E") and layout.endswith("L")
        assert (layout.count("|") + 1) == p.pp * (p.vpp if p.schedule == "interleaved" else 1)
    assert ("--recompute-granularity" in args) == (p.recompute != "none")


SERVE_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("serve-*.yaml") if "trace" not in p.name)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("path", SERVE_EXAMPLES, ids=lambda p: p.stem)
def test_serve_flags_exist_in_the_pinned_release(engine, path):
    job = load_serve_job(path)
    exports = export_serve(job, engine)
    for exp in exports:
        check_flags(exp.args, table(exp.engine))  # the engine's server, or the P/D router's own parser
    assert "--num-scheduler-steps" not in table(engine)  # the V0 knob is gone from current vLLM
    if job.deployment.kind == "disaggregated":
        *pools, router = exports
        assert router.engine == f"{engine}-router"
        ports = [int(dict(zip(e.args, e.args[1:]))["--port"]) for e in pools]
        assert len(set(ports)) == 2 and int(dict(zip(router.args, router.args[1:]))["--port"]) not in ports
        for port in ports:  # the router sends to both pools
            assert any(a.endswith(f":{port}") for a in router.args)


def test_v0_knobs_are_refused_without_a_release_to_replay(tmp_path):
    from shardwise.cli.main import main

    job = tmp_path / "j.yaml"
    job.write_text("model: llama-3.1-8b\ndeployment: {gpu: h100, engine: {chunked_prefill: false}}\n"
                   "workload: {rate: 1, num_requests: 10}\n")
    assert main(["serve", "simulate", str(job)]) == 2
    job.write_text("model: llama-3.1-8b\ndeployment: {gpu: h100, engine: {version: vllm-0.6.0, chunked_prefill: false}}\n"
                   "workload: {rate: 1, num_requests: 10}\n")
    assert main(["serve", "simulate", str(job)]) == 0
    assert main(["serve", "export", str(job), "--to", "vllm"]) == 2


def test_megatron_export_carries_the_cp_scheme_and_the_expert_tp():
    from shardwise.specs.job import job_from_mapping

    def export(model, parallel):
        job = job_from_mapping({"model": model, "cluster": {"gpu": "H100-SXM", "gpus": 16},
                                "training": {"seq_len": 32768, "global_batch": 16}, "parallel": parallel})
        return job, export_train(job, "megatron")

    job, exp = export("llama-3.1-8b", {"tp": 2, "cp": 8, "cp_comm": "a2a+p2p", "ulysses": 2})
    check_flags(exp.args, table("megatron"))
    i = exp.args.index("--hierarchical-context-parallel-sizes")
    assert exp.args[exp.args.index("--cp-comm-type") + 1] == "a2a+p2p" and exp.args[i + 1:i + 3] == ["2", "4"]
    assert 'model.cp_comm_type="a2a+p2p"' in exp.config_file[1] and "model.hierarchical_context_parallel_sizes=[2,4]" in exp.config_file[1]
    _, exp = export("mixtral-8x7b", {"tp": 2, "ep": 8, "etp": 1})
    check_flags(exp.args, table("megatron"))
    assert exp.args[exp.args.index("--expert-tensor-parallel-size") + 1] == "1" and "--cp-comm-type" not in exp.args
