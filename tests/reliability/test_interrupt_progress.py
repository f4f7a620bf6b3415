"""Large-but-legal runs show progress and end cleanly on Ctrl-C (one line, exit status 130)."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import pytest

from shardwise.cli.main import main
from shardwise.console import watch

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_in_a_command_is_one_line(monkeypatch, capsys):
    report = importlib.import_module("shardwise.serve.report")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "simulate", interrupted)
    status = main(["serve", "simulate", str(ROOT / "examples" / "serve-llama3.1-8b-a100.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 130
    assert err == ["error: interrupted (Ctrl-C); stopped before finishing"]


def test_progress_bar_reads_the_work_and_stops_on_interrupt():
    done, reads = [0], []

    def read() -> int:
        reads.append(done[0])
        return done[0]

    with watch("working", read, total=10, enabled=True):
        for k in range(10):
            done[0] = k + 1
            time.sleep(0.15)
    assert reads and reads == sorted(reads) and reads[-1] > 0  # polled while the block ran
    with pytest.raises(KeyboardInterrupt), watch("working", lambda: 0, total=10, enabled=True):
        raise KeyboardInterrupt


def test_no_progress_bar_when_not_a_terminal(capsys):
    with watch("working", lambda: 1, total=1):
        time.sleep(0.6)
    assert capsys.readouterr().err == ""
