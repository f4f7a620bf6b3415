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
