"""The deployments of issue 32 end to end: an FP8 70B on 4 H100s, DeepSeek-V3 expert-parallel with
data-parallel attention on H200s, and EAGLE-3 speculative decoding each simulate, plan (from their job
file), and export from the plan's JSON to vLLM and SGLang with flags their pinned parsers accept."""

import json

import pytest

from shardwise.cli.export import load_serve_export_job
from shardwise.cli.main import main
from shardwise.handoff import export_serve
from shardwise.serve.config import load_serve_job
from shardwise.serve.metrics import compute_metrics
from shardwise.serve.simulate import simulate
from tests.handoff.test_flag_tables import check_flags, table
from tests.serve.conftest import ROOT

CASES = {  # example, plan options, what the chosen deployment carries
    "fp8-70b": ("serve-llama3.1-70b-fp8-4xh100.yaml", ["--gpu", "h100", "--gpus", "4"], "fp8"),
    "deepseek-ep": ("serve-deepseek-v3-ep-16xh200.yaml", ["--gpu", "h200", "--gpus", "16"], "ep"),
    "eagle3": ("serve-llama3.1-8b-eagle3.yaml", ["--gpu", "h100", "--gpus", "2"], "spec"),
}


def _flags(args):
    return {a: (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True)
            for i, a in enumerate(args) if a.startswith("--")}


@pytest.mark.parametrize("case", CASES)
def test_simulate_plan_and_export_from_the_plan(case, tmp_path, capsys):
    example, options, feature = CASES[case]
    path = ROOT / "examples" / example
    job = load_serve_job(path)
    m = compute_metrics(simulate(job))
    assert m["completed"] == job.workload.num_requests and m["tpot_ms"]["median"] > 0

    assert main(["serve", "plan", str(path), *options, "--no-mix", "--no-disagg", "--num-requests", "200", "-f", "json"]) == 0
    plan_json = tmp_path / "plan.json"
    plan_json.write_text(capsys.readouterr().out)
    chosen = json.loads(plan_json.read_text())["chosen"]
    assert chosen is not None and chosen["feasible"]
    dep = chosen["deployment"]
    if feature == "ep":  # the cheapest layout spreads the experts with data-parallel attention
        assert dep.get("expert_parallel") and dep.get("dp_attention", 1) > 1
    if feature == "spec":  # one H100 meets the 6 ms TPOT only with the EAGLE-3 head
        assert dep["engine"]["speculative"]["method"] == "eagle3" and chosen["gpus"] == {"H100-SXM": 1}

    planned = load_serve_export_job(plan_json)
    for engine in ("vllm", "sglang"):
        (exp,) = export_serve(planned, engine)
        check_flags(exp.args, table(engine))
        f = _flags(exp.args)
        if feature == "fp8":
            assert f["--quantization"] == "fp8" and f["--kv-cache-dtype"] in ("fp8", "fp8_e4m3")
        if feature == "ep":
            assert "--enable-expert-parallel" in f if engine == "vllm" else f["--enable-dp-attention"] is True
        if feature == "spec":
            assert ("--speculative-config" in f) if engine == "vllm" else f["--speculative-algorithm"] == "EAGLE3"
