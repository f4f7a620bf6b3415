"""`--trace`: a simulated schedule as Chrome/Perfetto trace-event JSON (structure, and agreement with the
simulation it was drawn from)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from shardwise.cli.main import main
from shardwise.pipeline import generate_schedule, simulate
from shardwise.pipeline.trace import simulation_trace, write_trace

US = 1e6


def test_zbv_pp8_trace_from_the_cli(tmp_path, capsys, load_trace):
    """The issue's acceptance case: ZB-V, pp = 8, 32 micro-batches, with point-to-point time."""
    path = tmp_path / "zbv.json"
    assert main(["schedule", "simulate", "--schedule", "zbv", "--pp", "8", "--microbatches", "32",
                 "--f", "2", "--i", "2", "--w", "2", "--comm", "0.05", "--trace", str(path)]) == 0
    assert "trace written" in capsys.readouterr().out
    (proc,) = load_trace(path).values()
    assert "zbv" in proc["name"]
    assert sorted(proc["threads"].values()) == sorted(f"rank {r}" for r in range(8))  # one track per rank
    for tid in range(8):
        compute = [e for e in proc["slices"][tid] if e["cat"] == "compute"]
        # V placement: each rank holds two stages, each runs F, I and W of every micro-batch
        assert len(compute) == 2 * 3 * 32
        assert {e["name"] for e in compute} == {"F", "I", "W"}
        assert len({e["args"]["stage"] for e in compute}) == 2
        assert {e["args"]["microbatch"] for e in compute} == set(range(32))
        assert all(e["dur"] == 1e6 for e in compute)  # a rank slice of 2 s over 2 stages: 1 s per action, in us
        assert all(0 < e["dur"] <= 0.05 * US + 1e-6 for e in proc["slices"][tid] if e["cat"] == "communication")
    # one arrow per cross-rank hop: 2 pp - 2 of the 2 pp - 1 stage boundaries cross ranks (stages pp-1 and
    # pp share rank pp-1), once forward and once backward per micro-batch
    assert len(proc["flows"]) == 2 * (2 * 8 - 2) * 32
    assert len(proc["counters"]) == 8


def test_trace_agrees_with_the_simulation(tmp_path, load_trace):
    sched = generate_schedule("interleaved", 4, 8, 2)
    res = simulate(sched, f_s=0.5, i_s=0.7, w_s=0.3, p2p_s=0.02)
    (proc,) = load_trace(write_trace(simulation_trace(sched, res), tmp_path / "t.json")).values()
    for r in range(4):
        compute = [e for e in proc["slices"][r] if e["cat"] == "compute"]
        timeline = res.timeline(r)
        assert [e["args"]["action"] for e in compute] == [a["action"] for a in timeline]
        assert [e["ts"] for e in compute] == [round(a["start"] * US, 3) for a in timeline]
        assert sum(e["dur"] for e in compute) / US == approx(res.rank_busy[r])
        (series,) = [v for k, v in proc["counters"].items() if k.startswith(f"rank {r} ")]
        assert max(v for _, v in series) == res.peak_activation_microbatches[r]


def test_no_point_to_point_time_no_communication_slices(tmp_path, load_trace):
    sched = generate_schedule("1f1b", 4, 8)
    (proc,) = load_trace(write_trace(simulation_trace(sched, simulate(sched)), tmp_path / "t.json")).values()
    assert not [e for s in proc["slices"].values() for e in s if e["cat"] == "communication"]
    assert len(proc["flows"]) == 2 * 3 * 8


def test_the_waits_are_the_idle_time_the_transfers_cause(tmp_path, load_trace):
    """1F1B with equal stages: the last rank's first F waits for pp - 1 transfers in a row, and the time
    the transfers add to the makespan shows as waits on the critical path."""
    pp, m, comm = 4, 8, 0.1
    sched = generate_schedule("1f1b", pp, m)
    res = simulate(sched, p2p_s=comm)
    (proc,) = load_trace(write_trace(simulation_trace(sched, res), tmp_path / "t.json")).values()
    first = min(proc["slices"][pp - 1], key=lambda e: e["ts"])
    assert first["cat"] == "communication" and first["name"] == "recv activation"
    assert first["args"] == {"from_rank": pp - 2, "stage": pp - 1, "microbatch": 0, "transfer_s": comm}
    assert first["ts"] == round((pp - 1) * 1.0 * US + (pp - 2) * comm * US, 3)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zbv", "v-half", "dualpipev"]),
       pp=st.integers(2, 5), extra=st.integers(0, 6), comm=st.sampled_from([0.0, 0.03, 0.4]),
       rho=st.sampled_from([1.0, 0.9]))
def test_every_schedule_gives_a_well_formed_trace(tmp_path_factory, load_trace, name, pp, extra, comm, rho):
    vpp = 2 if name in ("interleaved", "zbv", "v-half", "dualpipev") else 1
    m = {"interleaved": pp * (1 + extra % 3), "dualpipev": 2 * pp + extra}.get(name, 1 + extra)
    sched = generate_schedule(name, pp, m, vpp)
    res = simulate(sched, f_s=1.0, i_s=1.2, w_s=0.7, p2p_s=comm, w_retained_fraction=rho)
    path = write_trace(simulation_trace(sched, res, w_retained_fraction=rho), tmp_path_factory.mktemp("t") / "t.json")
    (proc,) = load_trace(path).values()
    assert len(proc["threads"]) == pp
    for r in range(pp):
        series = next(v for k, v in proc["counters"].items() if k.startswith(f"rank {r} "))
        assert max(v for _, v in series) == approx(res.peak_activation_microbatches[r])
        busy = sum(e["dur"] for e in proc["slices"][r] if e["cat"] == "compute") / US
        assert busy == approx(res.rank_busy[r])


@pytest.mark.skipif(not os.environ.get("CATAPULT") or not shutil.which("chromium"),
                    reason="needs CATAPULT=/path/to/catapult-project/catapult and chromium")
def test_the_chrome_trace_viewer_imports_the_zbv_trace(tmp_path):
    """The trace viewer chrome://tracing was built from (catapult), in headless Chromium, offline."""
    sched = generate_schedule("zbv", 8, 32)
    res = simulate(sched, p2p_s=0.05)
    doc = simulation_trace(sched, res)
    trace = write_trace(doc, tmp_path / "zbv.json")
    script = Path(__file__).parents[2] / "scripts" / "trace_screenshot.py"
    out = subprocess.run([sys.executable, str(script), str(trace), str(tmp_path / "zbv.png"),
                          "--catapult", os.environ["CATAPULT"]], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    model = json.loads(out.stdout.split("trace viewer model: ", 1)[1].splitlines()[0])
    assert model["threads"] == 8 and model["counters"] == 8
    assert model["slices"] == sum(e["ph"] == "X" for e in doc["traceEvents"])
    assert model["flows"] == 2 * (2 * 8 - 2) * 32
    assert (tmp_path / "zbv.png").stat().st_size > 10_000
