"""Issue 10 item 5: every plan says where it runs; --runnable-on restricts the search and counts drops."""

import json

import pytest

from shardwise.cli.main import main
from shardwise.engines.support import runnable_on
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
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


def test_a_plan_offered_for_an_engine_is_costed_with_its_stack():
    """Issue 30 item 2: --runnable-on torchtitan costs with torchtitan's stack (the default job's is megatron);
    the job a row reproduces names that stack and estimates to the row's step time."""
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.estimate import estimate
    from shardwise.train.plan_report import job_mapping

    model, cluster = load_model("llama-3.1-8b"), make_cluster("h100", 16)
    training = TrainingSpec(seq_len=4096, global_batch=64)
    assert training.framework == "megatron"
    top = plan_search(model, cluster, training, runnable_on=("torchtitan",), top_k=2, max_exact=16).top
    for e in top:
        assert e.stack["name"] == "torchtitan"
        job = job_from_mapping(job_mapping(e, model, training, [cluster]))
        assert job.training.framework == "torchtitan"
        assert estimate(job).step_time_s == pytest.approx(e.step_time_s, rel=1e-9)


def test_runnable_on_several_engines_shows_each_engines_estimate_with_a_stack_that_runs_it(capsys):
    """With --runnable-on torchtitan,megatron each row's stack is that of an engine its label names, and each
    engine's best plan is shown even where the other's fill --top (Megatron's stack is faster here)."""
    from shardwise.engines.table import STACK
    from shardwise.train.plan_report import engine_verdicts
    from shardwise.train.planner import plan_across_gpus

    model, cluster = load_model("llama-3.1-8b"), make_cluster("h100", 16)
    training = TrainingSpec(seq_len=4096, global_batch=64)
    results, top, _ = plan_across_gpus(model, [cluster], training, top_k=3, max_exact=16,
                                       runnable_on=("torchtitan", "megatron"))
    assert len(results) == 2 and len(top) == 3  # one search per engine
    owner = {s: e for e, s in STACK.items()}
    for e in top:
        engine = owner[e.stack["name"]]
        assert engine in ("torchtitan", "megatron") and engine_verdicts(e, model, training)[engine].runnable
    assert {e.stack["name"] for e in top} == {"torchtitan", "megatron"}
    for r in results:
        assert any(e is r.top[0] for e in top)
    assert [e.step_time_s for e in top] == sorted(e.step_time_s for e in top)
    assert main(["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096",
                 "--global-batch", "64", "--top", "3", "--exact-budget", "16", "--no-progress",
                 "--runnable-on", "torchtitan,megatron"]) == 0
    assert "costed as" in capsys.readouterr().out


def test_an_engine_that_runs_nothing_leaves_the_others_and_is_named(capsys):
    """fp8 with --runnable-on torchtitan,deepspeed: DeepSpeed runs no fp8 plan; torchtitan's plans are shown
    and the summary says why DeepSpeed has none (one engine's empty search used to fail the command)."""
    args = ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "64", "--precision", "fp8", "--top", "2", "--exact-budget", "16", "--no-progress",
            "--runnable-on", "torchtitan,deepspeed", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"] and all("torchtitan" in row["runnable_on"] for row in out["top"])
    notes = " ".join(n for s in out["searches"] for n in s["notes"])
    assert "nothing runs on deepspeed" in notes and "DeepSpeed has no fp8/fp4 training switch" in notes
    assert main(args[:-3] + ["deepspeed"]) == 2  # alone, it is the error it was
    assert "error: no plan can run" in capsys.readouterr().err


def test_more_engines_than_top_shows_each_engines_best_and_says_so():
    """--top 1 with two engines: both engines' bests are shown (2 rows), and a note says why there are more rows
    than --top asked for."""
    from shardwise.train.planner import plan_across_gpus

    model, cluster = load_model("llama-3.1-8b"), make_cluster("h100", 16)
    training = TrainingSpec(seq_len=4096, global_batch=64)
    results, top, _ = plan_across_gpus(model, [cluster], training, top_k=1, max_exact=16,
                                       runnable_on=("torchtitan", "megatron"))
    assert len(top) == 2 and {e.stack["name"] for e in top} == {r.top[0].stack["name"] for r in results}
    assert any("2 plans shown for --top 1" in n for r in results for n in r.notes)
