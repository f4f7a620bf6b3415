"""`rl validate`: the published RL runs are estimated and compared, per record and per source."""

from __future__ import annotations

import json

import pytest

from shardwise.cli.main import main
from shardwise.rl.spec import parse_rl_job
from shardwise.rl.step import estimate_rl
from shardwise.rl.validate import FIGURES, load_measurements


@pytest.fixture(scope="module")
def result():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["rl", "validate", "-f", "json"]) == 0
    return json.loads(buf.getvalue())


def test_two_sources_with_their_records():
    data = load_measurements()
    sources = {r["source"] for r in data["records"]}
    assert len(sources) >= 2 and sources <= set(data["sources"])
    for r in data["records"]:
        assert "https://github.com/" in data["sources"][r["source"]] and r["row"]
        assert set(r["measured"]) <= set(FIGURES)


def test_errors_are_the_estimates_over_the_measurements(result):
    """Each error is recomputed here from an independent estimate of the record's job and the transcribed figure."""
    records = {r["id"]: r for r in load_measurements()["records"]}
    assert [row["id"] for row in result["rows"]] == list(records)
    row = result["rows"][0]
    est = estimate_rl(parse_rl_job(records[row["id"]]["job"]))
    assert row["figures"]["step_s"]["estimated"] == pytest.approx(est.period_s, rel=1e-9)
    assert row["figures"]["rollout_s"]["estimated"] == pytest.approx(est.phases_s["rollout"], rel=1e-9)
    for key, measured in records[row["id"]]["measured"].items():
        f = row["figures"][key]
        assert f["measured"] == measured
        assert f["error"] == pytest.approx(f["estimated"] / measured - 1, rel=1e-12)


def test_per_source_error_and_sensitivity(result):
    for src, errs in result["per_source"].items():
        mine = [r for r in result["rows"] if r["source"] == src]
        want = sum(abs(r["figures"]["step_s"]["error"]) for r in mine) / len(mine)
        assert errs["step_s"] == pytest.approx(want, rel=1e-12)
    # longer responses take longer: the step error rises with the assumed median (500 < stated < 2000)
    for row in result["rows"]:
        lo, hi = row["sensitivity"]["500"]["step_s"], row["sensitivity"]["2000"]["step_s"]
        assert lo < row["figures"]["step_s"]["error"] < hi


def test_table_output(capsys):
    assert main(["rl", "validate"]) == 0
    out = capsys.readouterr().out
    assert "mean absolute error per source" in out and "verl_one_step_off" in out


def test_the_fitted_median_recovers_the_length_that_made_the_update_time():
    """A record whose 'measured' update time is the estimate's own at median 400 gets back 400 (to the search's
    2% tolerance in log median and rounding), and the other figures are then exactly the estimate's."""
    import copy

    from shardwise.rl.validate import _at_median, fit_median, implied_lengths

    record = copy.deepcopy(load_measurements()["records"][0])
    made = _at_median(record, 400)
    record["measured"] = {"update_actor_s": made.phases_s["train: policy"], "step_s": made.period_s}
    assert abs(fit_median([record]) / 400 - 1) < 0.03
    fit = implied_lengths([record])["per_source"][record["source"]]
    assert abs(fit["errors"][record["id"]]["step_s"]) < 0.02 and not fit["at_range_end"]


def test_the_lengths_table_through_the_cli(capsys):
    assert main(["rl", "validate", "--lengths"]) == 0
    out = capsys.readouterr().out
    assert "median: assumed -> fitted" in out and all(src in out for src in load_measurements()["sources"])
