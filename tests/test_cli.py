"""The README's commands work as shown."""

import json
from pathlib import Path

from shardwise.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


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
