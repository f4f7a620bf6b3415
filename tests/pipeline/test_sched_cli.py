"""`shardwise schedule ...` end to end through the CLI entry point."""

import json

import pytest

from shardwise.cli.main import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_simulate_table(capsys):
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", "zbv", "--pp", "4", "--microbatches", "8")
    assert rc == 0
    for text in ("bubble_fraction", "bubble_ratio", "stage_bubble_ratio", "per rank"):
        assert text in out


def test_simulate_json(capsys):
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", "1F1B-I", "--pp", "4", "--microbatches", "8",
                     "--vpp", "2", "--f", "0.5", "--i", "0.5", "--w", "0.5", "--comm", "0.01", "--format", "json")
    assert rc == 0
    d = json.loads(out)
    assert d["schedule"] == "interleaved" and d["vpp"] == 2
    for key in ("makespan", "bubble_fraction", "bubble_ratio", "stage_bubble_ratio", "peak_activation_microbatches"):
        assert key in d
    assert "ranks" not in d  # the summary only: a pp 32 timeline is megabytes
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", "1F1B-I", "--pp", "4", "--microbatches", "8",
                     "--vpp", "2", "--f", "0.5", "--i", "0.5", "--w", "0.5", "--comm", "0.01", "--format", "json",
                     "--timeline")
    full = json.loads(out)
    assert {k: v for k, v in full.items() if k != "ranks"} == d
    assert len(full["ranks"]) == 4 and {"start", "end", "action"} <= set(full["ranks"][0][0])
    assert sum(len(r) for r in full["ranks"]) == 2 * 8 * (4 * 2)  # F and a whole B per micro-batch and stage


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_simulate_plot(capsys, tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", "zb-h1", "--pp", "4", "-m", "8", "--plot", str(path))
    assert rc == 0 and path.stat().st_size > 1000 and "timeline written" in out


def test_per_stage_times(capsys):
    rc, out, _ = run(capsys, "schedule", "simulate", "--pp", "4", "-m", "8", "--f", "1.5,1,1,2", "--format", "json")
    assert rc == 0 and json.loads(out)["rank_busy"] == [8 * 3.5, 8 * 3.0, 8 * 3.0, 8 * 4.0]


def test_export_then_import_round_trip(capsys, tmp_path):
    path = tmp_path / "zbv.csv"
    rc, _, err = run(capsys, "schedule", "export", "--schedule", "zbv", "--pp", "4", "-m", "8", "--format", "csv",
                     "--output", str(path))
    assert rc == 0 and "zbv" in err
    assert path.read_text().splitlines()[0].startswith("0F0,0F1,")
    rc, direct, _ = run(capsys, "schedule", "simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--format", "json")
    rc2, imported, _ = run(capsys, "schedule", "import", str(path), "--format", "json")
    rc3, from_csv, _ = run(capsys, "schedule", "simulate", "--from-csv", str(path), "--format", "json")
    assert rc == rc2 == rc3 == 0
    assert json.loads(direct)["makespan"] == json.loads(imported)["makespan"] == json.loads(from_csv)["makespan"]


def test_export_text_to_stdout(capsys):
    rc, out, _ = run(capsys, "schedule", "export", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--format", "text")
    assert rc == 0 and out.splitlines() == ["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]


def test_compare(capsys):
    rc, out, _ = run(capsys, "schedule", "compare", "--pp", "4", "--microbatches", "8")
    assert rc == 0
    for name in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zbv", "v-half", "v-min", "dualpipev", "auto"):
        assert name in out
    rc, out, _ = run(capsys, "schedule", "compare", "--pp", "4", "-m", "8", "--format", "json", "--schedules", "1f1b,zbv")
    assert rc == 0 and [r["schedule"] for r in json.loads(out)] == ["1f1b", "zbv"]


def test_auto_with_memory_cap(capsys):
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", "auto", "--pp", "4", "-m", "8", "--mem-cap", "6",
                     "--format", "json")
    assert rc == 0 and max(json.loads(out)["peak_activation_microbatches"]) <= 6


def test_list(capsys):
    rc, out, _ = run(capsys, "schedule", "list")
    assert rc == 0 and "dualpipev" in out and "v-half" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["simulate", "--schedule", "nope"], "unknown schedule"),
        (["simulate", "--schedule", "interleaved", "--vpp", "1"], "at least two stages"),
        (["simulate", "--f", "fast"], "--f takes a number"),
        (["simulate", "--f", "1,2,3"], "per-rank numbers or 4 per-stage numbers"),
        (["simulate", "--schedule", "1f1b", "--mem-cap", "3"], "only applies to --schedule auto"),
        (["simulate", "--schedule", "dualpipev", "--pp", "4", "-m", "4"], "at least 2\\*pp"),
        (["export", "--schedule", "zbv", "--vpp", "3"], "exactly two stages"),
    ],
)
def test_user_errors_exit_2_without_traceback(capsys, argv, match):
    rc, _, err = run(capsys, "schedule", *argv)
    assert rc == 2 and err.startswith("error: ") and "Traceback" not in err
    import re

    assert re.search(match, err)


def test_malformed_csv_import_is_a_user_error(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B0\n1F0,1X0\n")
    rc, _, err = run(capsys, "schedule", "import", str(bad))
    assert rc == 2 and "column 2" in err
    deadlock = tmp_path / "dead.csv"
    deadlock.write_text("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")
    rc, _, err = run(capsys, "schedule", "import", str(deadlock))
    assert rc == 2 and "deadlock" in err


@pytest.mark.parametrize("schedule, vpp", [("zbv", 2), ("interleaved", 2), ("1f1b", 1)])
def test_simulate_and_compare_take_times_in_the_same_unit(capsys, schedule, vpp):
    """--f/--i/--w are a rank slice's times in both commands: the same flags give the same makespan."""
    times = ["--f", "1,1.2,1,1", "--i", "1", "--w", "0.5", "--comm", "0.05"]
    rc, out, _ = run(capsys, "schedule", "simulate", "--schedule", schedule, "--pp", "4", "--microbatches", "8",
                     "--vpp", str(vpp), *times, "--format", "json")
    assert rc == 0
    simulated = json.loads(out)["makespan"]
    rc, out, _ = run(capsys, "schedule", "compare", "--pp", "4", "--microbatches", "8", "--vpp", str(vpp), *times,
                     "--schedules", schedule, "--format", "json")
    assert rc == 0
    assert json.loads(out)[0]["makespan"] == pytest.approx(simulated, rel=1e-12)
