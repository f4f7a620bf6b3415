"""`train plan` and `train sweep` from the command line."""

import csv
import json

import pytest

from shardwise.cli.main import main
from shardwise.train.sweep import load_sweep, run_sweep

ARGS = ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--seq-len", "4096", "--global-batch", "32", "--no-progress"]


def test_plan_json_and_plot(tmp_path, capsys):
    png = tmp_path / "front.png"
    assert main(ARGS + ["--format", "json", "--top", "3", "--tokens", "1e11", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["top"]) == 3 and out["top"][0]["days_to_train"] > 0 and out["top"][0]["cost_usd"] > 0
    assert out["pareto_front"] and out["searches"][0]["considered"] > out["searches"][0]["feasible_after_screen"]
    assert png.stat().st_size > 10_000


def test_plan_table_multi_gpu_cost(capsys):
    assert main(ARGS[:5] + ["h100,a100-80gb"] + ARGS[6:] + ["--objective", "cost"]) == 0
    out = capsys.readouterr().out
    assert "throughput vs $/M tokens" in out and "A100-80GB x 8" in out


def test_plan_from_partial_job(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-8b\ncluster: {gpu: H100, gpus: 8}\ntraining: {seq_len: 4096, global_batch: 32}\nparallel: {tp: 2}\n")
    assert main(["train", "plan", str(job), "--format", "json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(p["plan"]["tp"] == 2 for p in out["top"])


@pytest.mark.parametrize(
    "extra,fragment",
    [(["--objective", "speed"], "--objective"), (["--top", "0"], "--top"), (["--schedules", "wavy"], "unknown schedule")],
)
def test_plan_bad_options(capsys, extra, fragment):
    assert main(ARGS + extra) == 2
    assert fragment in capsys.readouterr().err


def test_plan_fp8_moe_table_names_the_recipes_and_the_new_rejections(capsys):
    moe = ["train", "plan", "--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096", "--global-batch",
           "64", "--no-progress", "--exact-budget", "8", "--top", "2"]
    assert main(moe + ["--precision", "fp8", "--moe-dispatchers", "alltoall,deepep"]) == 0
    out = capsys.readouterr().out
    assert "fp8 recipe mxfp8 needs a Blackwell GPU" in out and "ep x etp does not divide" in out
    assert "delayed" in out and "no slower on every layer" in out  # the chosen recipe in the plan label; dominance
    assert main(moe[:5] + ["a100-80gb"] + moe[6:] + ["--precision", "fp8"]) == 2
    assert "needs fp8 tensor cores (A100-80GB has none)" in capsys.readouterr().err
    assert main(ARGS + ["--fp8-recipes", "rowwise"]) == 2
    assert "--fp8-recipes: recipes need precision fp8" in capsys.readouterr().err


def test_plan_missing_arguments(capsys):
    assert main(["train", "plan", "--model", "llama-3.1-8b"]) == 2
    assert "--gpu" in capsys.readouterr().err


SWEEP = """
models: [llama-3.1-8b, mistral-7b, qwen2.5-7b]
clusters: [{gpu: H100, gpus: 8}, {gpu: A100-80GB, gpus: 8}]
seq_lens: [2048, 4096]
global_batches: [16, 32]
"""


def test_sweep_local_csv(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.replace("[2048, 4096]", "[2048]").replace("[16, 32]", "[16]"))
    out = tmp_path / "best.csv"
    assert main(["train", "sweep", str(path), "-o", str(out), "--no-progress", "--workers", "2"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 6 and all(r["schedule"] and not r["error"] for r in rows)


def test_sweep_bad_file(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text("models: []\nclusters: [{gpu: H100, gpus: 8}]\nseq_lens: [1]\nglobal_batches: [1]\n")
    assert main(["train", "sweep", str(path)]) == 2
    assert "sweep.models" in capsys.readouterr().err


def test_sweep_on_local_ray_matches_local_backend(tmp_path):
    pytest.importorskip("ray")
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    jobs = load_sweep(path)
    assert len(jobs) >= 24
    local = run_sweep(jobs, backend="local", workers=2)
    ray_rows = run_sweep(jobs, backend="ray", workers=2)
    assert ray_rows == local


def test_top_table_labels_name_the_offload_the_search_set():
    """Plans found by the offload fallback or the activation-offload search carry their offload fields: the
    table names them (offload=..., @nvme, act-offload-selective=...), not only the enumerated fields."""
    from rich.console import Console

    from shardwise.specs.job import job_from_mapping
    from shardwise.train.estimate import estimate
    from shardwise.train.plan_report import top_table

    def est(parallel):
        return estimate(job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8},
                                          "training": {"seq_len": 4096, "global_batch": 32}, "parallel": parallel}))

    top = [est({"tp": 1, "pp": 1, "dp": 8, "zero": 3, "offload": "optimizer+params", "offload_device": "nvme"}),
           est({"tp": 1, "pp": 4, "dp": 2, "recompute": "none", "offload_activations": 0.5,
                "offload_activations_policy": "selective"})]
    console = Console(record=True, width=200)
    console.print(top_table([], top, "throughput"))
    text = console.export_text()
    assert "offload=optimizer+params@nvme" in text and "act-offload-selective=0.5" in text
