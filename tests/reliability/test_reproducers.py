"""The reliability reproducers (issue 10), each pinned: the CLI path runs in-process on a copy of the
reproducer's input (its file in tests/reliability/repro) and ends in the correct answer or in one line
`error: ...` naming the field, exit status 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardwise.cli.main import main

REPRO = Path(__file__).parent / "repro"


class Repro:
    """Copies of the reproducers' folders; `run` calls `shardwise ARGS` inside one, in-process."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
        self.tmp, self.capsys, self.monkeypatch = tmp_path, capsys, monkeypatch

    def folder(self, name: str) -> Path:
        work = self.tmp / name
        if not work.exists():
            if (REPRO / name).exists():
                shutil.copytree(REPRO / name, work)
            work.mkdir(exist_ok=True)
        return work

    def __call__(self, name: str, *args: str) -> tuple[int, str, str]:
        self.monkeypatch.chdir(self.folder(name))
        status = main(list(args))
        out = self.capsys.readouterr()
        return status, out.out, out.err


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Repro:
    return Repro(tmp_path, capsys, monkeypatch)


def one_line_error(status: int, err: str, *fragments: str) -> str:
    """Exit status 2 with one short `error:` line containing every fragment."""
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and len(lines[0]) < 500, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


# --- 01: a trace's token counts are the workload's lengths ---------------------------------------------

def test_01_trace_lengths_used(cli):
    status, out, _ = cli("01-trace-lengths-ignored", "serve", "simulate", "job.yaml", "-f", "json")
    assert status == 0
    m = json.loads(out)
    assert m["total_input_tokens"] == 3 * 30000 and m["total_output_tokens"] == 3 * 2000  # long.csv: 3 rows
    assert m["lengths"] == {"input": "trace", "output": "trace"}


def test_01_explicit_length_overrides_trace(cli):
    job = cli.folder("01-trace-lengths-ignored") / "job.yaml"
    job.write_text(job.read_text().replace("path: long.csv}", "path: long.csv, input_len: 1000}"))
    status, out, _ = cli("01-trace-lengths-ignored", "serve", "simulate", "job.yaml", "-f", "json")
    m = json.loads(out)
    assert m["total_input_tokens"] == 3000 and m["total_output_tokens"] == 6000
    assert m["lengths"] == {"input": "fixed 1000", "output": "trace"}


def test_01_serve_plan_workload_csv_uses_trace_lengths(monkeypatch):
    from shardwise.serve.plan_cli import plan_request
    from shardwise.serve.planner import _unit_requests

    monkeypatch.chdir(REPRO / "01-trace-lengths-ignored")
    req = plan_request(None, "llama-3.1-8b", 1.0, 60000.0, 100.0, None, "a100-80gb:8", Path("long.csv"), None, None)
    unit = _unit_requests(req)
    assert unit.input_len.tolist() == [30000] * 3 and unit.output_len.tolist() == [2000] * 3


def test_01_shipped_azure_example_replays_the_trace(capsys):
    from shardwise.serve.trace import read_trace
    from shardwise.specs._loading import data_path

    root = Path(__file__).resolve().parents[2]
    _, inp, out = read_trace(data_path("serving_azure_sample.csv"))
    assert main(["serve", "simulate", str(root / "examples" / "serve-azure-trace.yaml"), "-f", "json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["total_input_tokens"] == int(inp.sum()) and m["total_output_tokens"] == int(out.sum())


# --- 02, 09, 10, 11: schedule files and flags -------------------------------------------------------------

def test_02_binary_schedule_csv(cli):
    one_line_error(*cli("02-import-binary-csv", "schedule", "import", "sched.csv")[::2], "not a UTF-8", "sched.csv")


def test_09_5000_digit_index(cli):
    line = one_line_error(*cli("09-import-5000-digit", "schedule", "import", "sched.csv")[::2], "index too large")
    assert "9" * 200 not in line  # the value is echoed shortened


def test_10_huge_microbatch_index(cli):
    one_line_error(*cli("10-import-huge-microbatch", "schedule", "import", "sched.csv")[::2], "micro-batch", "1,000,000")


@pytest.mark.parametrize("pp", ["99999999999999999999", "100000", "257"])
def test_11_huge_pp(cli, pp):
    status, _, err = cli("11-schedule-huge-pp", "schedule", "simulate", "--schedule", "zbv", "--pp", pp, "--microbatches", "32")
    one_line_error(status, err, "pp=", "limit is 256")


def test_11_large_legal_schedule_is_refused_by_size_not_memory(cli):
    status, _, err = cli("11-schedule-huge-pp", "schedule", "simulate", "--schedule", "1f1b", "--pp", "256",
                         "--microbatches", "100000")
    one_line_error(status, err, "compute actions", "limit is 1,000,000")


# --- 03: deep nesting, in YAML and JSON, for every command that reads a job --------------------------------

@pytest.mark.parametrize("command", [["train", "estimate"], ["serve", "simulate"], ["train", "plan"], ["serve", "plan"]])
def test_03_deep_nesting_yaml(cli, command):
    one_line_error(*cli("03-deep-nesting", *command, "job.yaml")[::2], "nested")


def test_03_deep_nesting_json(cli, tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(*cli("03-deep-nesting", "train", "estimate", str(tmp_path / "deep.json"))[::2], "nested")


def test_03_moderately_deep_document_is_refused_before_use(cli, tmp_path):
    (tmp_path / "deep.yaml").write_text("model: " + "[" * 200 + "]" * 200 + "\n")
    one_line_error(*cli("03-deep-nesting", "serve", "simulate", str(tmp_path / "deep.yaml"))[::2], "deeper than 32")


# --- 04: V-shaped schedules with vpp 3 --------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["v-min", "zbv", "v-half", "dualpipev"])
def test_04_v_schedule_with_vpp3(cli, schedule):
    job = cli.folder("04-vmin-vpp3") / "job.yaml"
    job.write_text(job.read_text().replace("schedule: v-min", f"schedule: {schedule}"))
    one_line_error(*cli("04-vmin-vpp3", "train", "estimate", "job.yaml")[::2], "parallel.vpp", schedule, "two stages per rank")


# --- 05-08, 13-15: serve job fields -----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("folder", "fragments"),
    [
        ("05-serve-negative-seed", ("workload.seed", "greater than or equal to 0")),
        ("06-serve-huge-length", ("workload.input_len", "out of range")),
        ("07-trace-nan", ("t.csv line 2", "input tokens", "'nan'")),
        ("08-long-model-name", ("unknown model", "...")),
        ("13-serve-replicas-1e6", ("deployment.replicas", "limit of 4,096")),
        ("14-serve-gamma-cv-huge", ("workload.cv", "limit of 10", "rate: inf")),
        ("15-serve-num-requests-1e9", ("workload.num_requests", "limit of 1,000,000")),
    ],
)
def test_serve_job_fields(cli, folder, fragments):
    line = one_line_error(*cli(folder, "serve", "simulate", "job.yaml")[::2], *fragments)
    assert ".yaml." not in line  # no file path glued to the field


@pytest.mark.parametrize("cell", ["inf", "-inf", "1e400", "NaN", "3.5", "-2", "1" * 5000])
def test_07_trace_cells(cli, cell):
    (cli.folder("07-trace-nan") / "t.csv").write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n0,{cell},10\n")
    one_line_error(*cli("07-trace-nan", "serve", "simulate", "job.yaml")[::2], "line 2", "input tokens")


@pytest.mark.parametrize("stamp", ["nan", "inf", "x" * 3000])
def test_07_trace_timestamps(cli, stamp):
    (cli.folder("07-trace-nan") / "t.csv").write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{stamp},5,10\n")
    one_line_error(*cli("07-trace-nan", "serve", "simulate", "job.yaml")[::2], "line 2", "bad timestamp")


def test_08_long_model_name_in_training_job(cli, tmp_path):
    job = tmp_path / "train.yaml"
    job.write_text("model: " + "x" * 300 + "\ncluster: {gpu: h100, gpus: 8}\ntraining: {seq_len: 4096, global_batch: 8}\n"
                   "parallel: {tp: 8}\n")
    line = one_line_error(*cli("08-long-model-name", "train", "estimate", str(job))[::2], "unknown model")
    assert "x" * 100 not in line


def test_14_gamma_at_the_limit_has_finite_arrivals():
    from shardwise.limits import MAX_GAMMA_CV
    from shardwise.serve.workload import arrival_times

    for seed in range(20):
        t = arrival_times("gamma", 5.0, 300, np.random.default_rng(seed), MAX_GAMMA_CV)
        assert np.all(np.isfinite(t)) and np.all(np.diff(t) >= 0)
        assert math.isclose(t[-1], 300 / 5.0) or t[-1] == 0.0


# --- 12: a huge global batch is simulated in part and extrapolated exactly --------------------------------

def test_12_huge_global_batch(cli):
    status, out, err = cli("12-estimate-huge-global-batch", "train", "estimate", "job.yaml", "-f", "json")
    assert status == 0, err
    e = json.loads(out)
    assert e["microbatches"] == 5_000_000
    assert any("extrapolated exactly" in n for n in e["notes"])
    assert 0 < e["mfu"] < 1 and e["fits"]


def test_12_extrapolated_step_time_is_the_full_simulations():
    """Below the limit the estimate simulates every micro-batch; above it, it extrapolates. The step time
    with M micro-batches must equal the step time of a fully simulated count plus (M - count) times the
    per-micro-batch increment the full simulations show."""
    from shardwise.specs.job import load_jobs
    from shardwise.train.estimate import estimate

    def step(global_batch: int) -> float:
        job = load_jobs(REPRO / "12-estimate-huge-global-batch" / "job.yaml")[0]
        job = type(job)(job.model, job.cluster, job.training.model_copy(update={"global_batch": global_batch}), job.plan)
        return estimate(job).step_time_s

    dp = 2
    a, b = step(dp * 40), step(dp * 41)  # 40 and 41 micro-batches: fully simulated, in the steady state
    huge = step(10_000_000)
    assert huge == pytest.approx(a + (5_000_000 - 40) * (b - a), rel=1e-9)
