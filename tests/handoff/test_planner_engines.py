"""Issue 10 item 5: every plan says where it runs; --runnable-on restricts the search and counts drops."""

import json

from shardwise.cli.main import main
from shardwise.engines.support import runnable_on
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model import load_model
from shardwise.specs.training import TrainingSpec, TrainPlan
from shardwise.train.planner import plan_search

CASE = (load_model("llama-3.1-70b"), make_cluster("h100", 64), TrainingSpec(seq_len=8192, global_batch=128))


def test_runnable_on_keeps_only_what_the_engine_runs_and_counts_the_rest():
    res = plan_search(*CASE, runnable_on=("megatron",), max_exact=32)
    assert all("megatron" in runnable_on(TrainPlan(**e.plan), CASE[0]) for e in res.top)
    dropped = {k: v for k, v in res.rejected.items() if k.startswith("not runnable on megatron")}
    assert dropped and all(v > 0 for v in dropped.values())
    free = plan_search(*CASE, max_exact=32)
    assert free.considered == res.considered  # same space, filtered
    assert res.top[0].step_time_s >= free.top[0].step_time_s


def test_json_rows_say_where_each_plan_runs_and_reproduce_it(capsys):
    rc = main(["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096",
               "--global-batch", "64", "--top", "3", "--format", "json", "--exact-budget", "16"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for row in out["top"]:
        assert set(row["runnable_on"]) | set(row["not_runnable"]) == {"torch", "torchtitan", "megatron", "deepspeed"}
        assert row["job"]["parallel"] == row["plan"]


def test_table_says_plainly_when_the_top_plan_runs_nowhere(tmp_path, capsys):
    # ZeRO-1 + CP + ZB-V: torch and DeepSpeed (CP), torchtitan (ZeRO-1), Megatron-LM (ZB-V) all refuse it
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-70b\ncluster: {gpu: h100, gpus: 64}\ntraining: {seq_len: 8192, global_batch: 128}\n"
                   "parallel: {zero: 1, cp: 2, schedule: zbv}\n")
    rc = main(["train", "plan", str(job), "--top", "2", "--no-progress", "--exact-budget", "8"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "the top plan runs on none of torch, torchtitan, megatron, deepspeed" in " ".join(text.split())


def test_train_estimate_says_where_the_job_runs_as_the_exporters_do(capsys):
    """`train estimate` reads the same table: each engine it names runs the export, each other one refuses
    it with the line the estimate printed."""
    import pytest

    from shardwise.errors import ShardwiseError
    from shardwise.handoff import export_train
    from shardwise.specs.job import load_jobs

    path = "examples/llama3.1-70b-64xh100.yaml"
    assert main(["train", "estimate", path, "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["runnable_on"] and d["not_runnable"]
    assert main(["train", "estimate", path]) == 0
    table = capsys.readouterr().out
    assert any(line.split("│")[2].strip() == ", ".join(d["runnable_on"]) for line in table.splitlines()
               if "runs on" in line and line.count("│") >= 3)
    job = load_jobs(path)[0]
    for engine in d["runnable_on"]:
        if engine != "torch":
            export_train(job, engine)
    for engine, line in d["not_runnable"].items():
        if engine != "torch":
            with pytest.raises(ShardwiseError) as exc:
                export_train(job, engine)
            assert line.split("; would run")[0] in str(exc.value)
