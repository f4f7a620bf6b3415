"""Shared fixtures and test settings.

Hypothesis: tests never depend on wall-clock time, so its deadline and its "too slow" health checks
(which trip on a loaded machine) are off; the example counts stay as each test sets them.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("shardwise", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("shardwise")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _check_trace(path: Path) -> dict:
    """Load a Chrome/Perfetto trace file and check its structure (Trace Event Format: ``ph``, ``ts``
    in microseconds, ``dur``, ``pid``, ``tid``, ``name``). Returns per process ``{"name", "threads":
    {tid: name}, "slices": {tid: [X events in time order]}, "counters": {series: [(ts, value)]},
    "flows": {id: [s event, f event]}}``."""
    import json

    doc = json.loads(Path(path).read_text())  # valid JSON
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    procs: dict = {}
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
        p = procs.setdefault(e["pid"], {"name": None, "threads": {}, "slices": {}, "counters": {}, "flows": {}})
        if e["ph"] == "M":
            if e["name"] == "process_name":
                p["name"] = e["args"]["name"]
            elif e["name"] == "thread_name":
                assert e["tid"] not in p["threads"], f"thread {e['tid']} named twice"
                p["threads"][e["tid"]] = e["args"]["name"]
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
            p["slices"].setdefault(e["tid"], []).append(e)
        elif e["ph"] == "C":
            (key, value), = e["args"].items()
            assert isinstance(value, int | float)
            p["counters"].setdefault(f"{e['name']} {key}", []).append((e["ts"], value))
        elif e["ph"] in "sf":
            p["flows"].setdefault(e["id"], []).append(e)
        else:
            raise AssertionError(f"unexpected phase {e['ph']!r}")
    for pid, p in procs.items():
        assert p["name"], f"process {pid} has no process_name"
        assert set(p["slices"]) <= set(p["threads"]), "a track without a thread_name"
        assert len(set(p["threads"].values())) == len(p["threads"]), "two tracks share a name"
        for tid, slices in p["slices"].items():
            slices.sort(key=lambda e: (e["ts"], e["dur"]))
            for a, b in zip(slices, slices[1:]):  # no two slices of one track overlap
                assert b["ts"] >= a["ts"] + a["dur"] - 1e-6, (pid, tid, a, b)
        for fid, pair in p["flows"].items():  # each arrow starts and ends inside a slice of its track
            assert sorted(e["ph"] for e in pair) == ["f", "s"], (fid, pair)
            for e in pair:
                assert any(x["ts"] <= e["ts"] <= x["ts"] + x["dur"] for x in p["slices"].get(e["tid"], [])), e
        for series in p["counters"].values():
            assert [t for t, _ in series] == sorted(t for t, _ in series)
    flow_ids = [fid for p in procs.values() for fid in p["flows"]]
    assert len(flow_ids) == len(set(flow_ids)), "flow ids are global: one arrow per id"
    return procs


@pytest.fixture(scope="session")
def load_trace():
    return _check_trace
