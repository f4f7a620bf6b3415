"""`shardwise serve ...` end to end: JSON keys, user errors exit 2 with one line, plots are written."""

import json

import pytest

from shardwise.cli.main import main

REQUIRED = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "request_throughput", "output_tokens_per_s", "total_tokens_per_s",
            "kv_capacity_tokens", "preemptions", "duration_s", "goodput", "slo_attainment",
            "cost_usd_per_mtok_input", "cost_usd_per_mtok_output")


def write_job(tmp_path, text):
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


JOB = """model: llama-3.1-8b
precision: bf16
deployment: {gpu: a100-80gb, tp: 1, pp: 1, replicas: 1,
             engine: {max_num_seqs: 256, max_num_batched_tokens: 8192, chunked_prefill: true, gpu_memory_utilization: 0.9, block_size: 16, prefix_caching: false}}
workload: {arrival: poisson, rate: 4.0, num_requests: 200, input_len: {dist: sharegpt}, output_len: {dist: sharegpt}, seed: 0}
slo: {ttft_ms: 300, tpot_ms: 50}
"""


def test_simulate_json_has_the_contract_keys(tmp_path, capsys):
    assert main(["serve", "simulate", str(write_job(tmp_path, JOB)), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in REQUIRED:
        assert key in out, key
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(out[key]) == {"mean", "median", "p90", "p99"}


def test_simulate_table_and_cdf_plot(tmp_path, capsys):
    png = tmp_path / "cdf.png"
    assert main(["serve", "simulate", str(write_job(tmp_path, JOB)), "--plot-cdf", str(png)]) == 0
    assert "TTFT" in capsys.readouterr().out
    assert png.exists() and png.stat().st_size > 10_000


def test_disaggregated_and_trace_jobs(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{i * 0.5},{100 + i},{20 + i}\n" for i in range(40)))
    job = write_job(tmp_path, f"""model: llama-3.1-8b
deployment: {{prefill: {{gpu: h100, replicas: 1}}, decode: {{gpu: a100-80gb, tp: 2, replicas: 1}}, kv_link_gbps: 100}}
workload: {{arrival: trace, path: {trace.name}}}
""")
    assert main(["serve", "simulate", str(job), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["completed"] == 40 and out["gpus"] == 3 and out["kv_transfer_ms_mean"] > 0


@pytest.mark.parametrize("text, message", [
    (JOB.replace("rate: 4.0", "rate: -2"), "rate must be positive"),
    (JOB.replace("gpu: a100-80gb", "gpu: b9000"), "unknown GPU 'b9000'"),
    (JOB.replace("tp: 1", "tp: 5"), "tp: 5 does not divide the 32 attention heads"),
    (JOB.replace("slo: {ttft_ms: 300, tpot_ms: 50}", "slo: {ttft_ms: 300, tpot_ms: 50"), "malformed YAML"),
    ("model: llama-3.1-8b\ndeployment: {gpu: h100}\nworkload: {arrival: trace, path: missing.csv}\n", "trace file not found"),
    # a path longer than any file system's name limit: Path.exists() itself raises OSError (found by fuzzing)
    ("model: llama-3.1-8b\ndeployment: {gpu: h100}\nworkload: {arrival: trace, path: " + "a" * 5000 + ".csv}\n",
     "cannot read trace file"),
    (JOB.replace("model: llama-3.1-8b", "model: llama-3.1-405b").replace("tp: 1,", "tp: 2,"), "does not fit on A100-80GB"),
])
def test_user_errors_exit_2_with_one_line(tmp_path, capsys, text, message):
    assert main(["serve", "simulate", str(write_job(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_plan_json_and_plot(tmp_path, capsys):
    png = tmp_path / "cost.png"
    rc = main(["serve", "plan", "--model", "llama-3.1-8b", "--rate", "3", "--slo-ttft-ms", "500", "--slo-tpot-ms", "80",
               "--gpu-mix", "a100-80gb:2", "--num-requests", "120", "--no-disagg", "--no-mix", "--format", "json", "--plot", str(png)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] and out["chosen"]["deployment"]["gpu"] == "A100-80GB"
    assert png.exists()


def test_plan_from_a_job_file(tmp_path, capsys):
    rc = main(["serve", "plan", str(write_job(tmp_path, JOB)), "--gpu", "a100-80gb", "--gpus", "1", "--num-requests", "100",
               "--no-disagg", "--no-mix"])
    assert rc == 0
    assert "Cheapest deployment" in capsys.readouterr().out


def test_plan_with_impossible_slo_says_so(capsys):
    # --gpus TYPE:N is the old spelling of --gpu-mix: it still works, with a note
    rc = main(["serve", "plan", "--model", "llama-3.1-8b", "--rate", "3", "--slo-tpot-ms", "0.5", "--gpus", "a100-80gb:2",
               "--num-requests", "100", "--no-disagg", "--no-mix"])
    assert rc == 0
    out = capsys.readouterr()
    assert "No feasible deployment" in out.out
    assert out.err == "note: --gpus a100-80gb:2 is the old spelling of --gpu-mix a100-80gb:2; it will be removed\n"


def test_validation_compares_every_simulable_record_of_every_source(capsys):
    """The hand-transcribed records and the shared calibration layout both run, each row named by its source;
    the MI355X point, whose GPU is not in the catalog, is listed as not simulated."""
    from shardwise.serve.measurements import load_measurements

    assert main(["serve", "validate", "--split", "fit", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    data = load_measurements()
    fit = {r["id"] for r in data["records"] if r["split"] == "fit" and not r.get("skip")}
    assert {r["id"] for r in rows} == fit
    assert {"amd_mi300x_vllm", "sglang_vllm060", "lambda_vllm"} <= {r["source"] for r in rows}
    assert any(r.get("skip") and "MI355X" in r["skip"] for r in data["records"])


def test_held_out_sources_meet_the_serving_bar(capsys):
    """Leave-one-source-out (stored by scripts/fit_serving.py): each source's headline figures predicted by
    constants fitted without it; mean |error| within 15% for at least 80% of the sources, none above 25%."""
    assert main(["serve", "validate", "--cv", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per_source = out["per_source"]
    assert len(per_source) >= 4
    assert max(s["mape"] for s in per_source.values()) <= 0.25, per_source
    assert sum(s["mape"] <= 0.15 for s in per_source.values()) >= 0.8 * len(per_source), per_source
