"""The README's commands work as shown."""

import json
from pathlib import Path

import pytest

from shardwise.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_default_job_table_and_json(capsys):
    job = str(ROOT / "examples" / "llama3.1-70b-64xh100.yaml")
    assert main(["train", "estimate", job]) == 0
    table = capsys.readouterr().out
    assert "step time breakdown" in table and "MFU" in table
    assert main(["train", "estimate", job, "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is True and 0 < d["mfu"] < 1


def test_help_and_unknown_option(capsys):
    assert main(["--help"]) == 0
    assert main(["train", "estimate", "--bogus"]) == 2


def test_serve_plan_takes_no_progress_like_train_plan(monkeypatch):
    """`serve plan --no-progress` turns the bar off (train plan's flag, same name)."""
    import shardwise.cli.serve as serve_cli

    seen = {}

    class Stop(Exception):
        pass

    def watch(label, read, total=None, enabled=None):
        seen["enabled"] = enabled
        raise Stop

    monkeypatch.setattr(serve_cli, "watch", watch)
    args = ["serve", "plan", "--model", "llama-3.1-8b", "--rate", "2", "--slo-ttft-ms", "500", "--slo-tpot-ms", "60",
            "--gpu", "h100", "--gpus", "1", "--no-progress"]
    with pytest.raises(Stop):
        main(args)
    assert seen["enabled"] is False


def test_train_plan_export_prints_the_launch_script_raw_and_writes_it_with_o(capsys, tmp_path):
    """The script is text for bash: stdout carries it untouched (no table wrapping; the tables go to
    stderr), -o writes it; bash parses it and its layout line is whole."""
    import subprocess

    args = ["train", "plan", "--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "64", "--seq-len", "8192",
            "--global-batch", "128", "--no-progress", "--top", "1", "--exact-budget", "8", "--export", "megatron"]
    assert main(args) == 0
    out = capsys.readouterr()
    script = out.out
    assert script.startswith("#!/usr/bin/env bash") and "Best plans" in out.err
    layout = next(line for line in script.splitlines() if "--pipeline-model-parallel-layout" in line)
    assert layout.rstrip(" \\").split()[-1].count("|") >= 1  # the whole layout on one line
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert main(args + ["-o", str(tmp_path / "launch.sh")]) == 0
    assert (tmp_path / "launch.sh").read_text() == script


def test_the_sweep_example_loads_and_the_readme_documents_every_field():
    from shardwise.train.sweep import SweepSpec, load_sweep

    jobs = load_sweep(ROOT / "examples" / "sweep.yaml")
    assert len(jobs) == 8 and {j["cluster"]["gpu"] for j in jobs} == {"h100", "a100-80gb"}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Sweep files"):]
    assert all(f"| `{name}` |" in section for name in SweepSpec.model_fields)


def test_the_api_example_prints_plans_as_the_cli_does(capsys):
    """examples/api.py prints the best plan in the table's compact form (the same words as `train plan`)."""
    import re
    import runpy

    runpy.run_path(str(ROOT / "examples" / "api.py"))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("best plan: "))
    label = line.removeprefix("best plan: ").split(" -> ")[0]
    assert re.fullmatch(r"tp\d+ pp\d+( v\d+)? dp\d+ .*z\d mb\d+ \S+.*", label), label
    assert main(["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096",
                 "--global-batch", "64", "--runnable-on", "megatron", "--top", "1", "--no-progress"]) == 0
    assert label in capsys.readouterr().out


BATCH = """- {name: good, model: llama-3.1-8b, cluster: {gpu: h100, gpus: 8}, training: {seq_len: 4096, global_batch: 64},
   parallel: {tp: 1, pp: 1, dp: 8, zero: 3, micro_batch: 1}}
- {name: unknown-gpu, model: llama-3.1-8b, cluster: {gpu: b9000, gpus: 8}, training: {seq_len: 4096, global_batch: 64},
   parallel: {tp: 1, pp: 1, dp: 8, zero: 3, micro_batch: 1}}
- {name: bad-tp, model: llama-3.1-8b, cluster: {gpu: h100, gpus: 8}, training: {seq_len: 4096, global_batch: 64},
   parallel: {tp: 3, pp: 1, dp: 8, micro_batch: 1}}
"""


def test_a_batch_reports_each_bad_job_in_place(tmp_path, capsys):
    """One bad job of a list does not hide the others: JSON holds an `error` object in its place, the table
    prints the error where the estimate would be, and the exit status says the batch was not clean."""
    path = tmp_path / "batch.yaml"
    path.write_text(BATCH)
    assert main(["train", "estimate", str(path), "--format", "json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [d["name"] for d in out] == ["good", "unknown-gpu", "bad-tp"]
    assert out[0]["fits"] is True and "error" not in out[0]
    assert out[1] == {"job": 1, "name": "unknown-gpu", "error": out[1]["error"]} and "unknown GPU 'b9000'" in out[1]["error"]
    assert "does not divide the 32 attention heads" in out[2]["error"]
    assert "2 of 3 jobs failed" in captured.err and captured.err.count("\n") == 1
    assert main(["train", "estimate", str(path)]) == 2
    table = capsys.readouterr().out
    assert "step time breakdown" in table and "job[1] (unknown-gpu): cluster.gpu: unknown GPU" in table


def test_a_single_bad_job_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "one.yaml"
    path.write_text("name: x\nmodel: llama-3.1-8b\ncluster: {gpu: b9000, gpus: 8}\ntraining: {seq_len: 4096, global_batch: 64}\n"
                    "parallel: {tp: 1, pp: 1, dp: 8, micro_batch: 1}\n")
    assert main(["train", "estimate", str(path), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "unknown GPU 'b9000'" in captured.err


def test_a_commands_explicit_exit_status_is_the_process_status(monkeypatch):
    """A command that ends with typer.Exit(n) or click's Exit(n) exits n (non-standalone click returns
    click's code instead of raising it)."""
    import click
    import typer

    import shardwise.cli.main as cli_main

    for exit_type in (typer.Exit, click.exceptions.Exit):
        @click.command()
        @click.argument("code", type=int)
        def ends_with(code, exit_type=exit_type):
            raise exit_type(code)

        monkeypatch.setattr(cli_main, "_command", lambda command=ends_with: command)
        assert [main([str(code)]) for code in (0, 1, 3)] == [0, 1, 3], exit_type
