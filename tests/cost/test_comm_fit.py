"""The network model against the public nccl-tests / DeepEP records, and its fit."""

import json
from pathlib import Path

import numpy as np
import pytest

from shardwise.cli.main import main
from shardwise.cost.comm_fit import PARAMS, all_cases, default_data_path, fit, load_records, record_cases, scored
from shardwise.cost.constants import fitted_network_constants
from shardwise.errors import ShardwiseError

ROOT = Path(__file__).resolve().parents[2]
# ../shared next to the main checkout; worktrees sit one level deeper (wt/<name>).
SHARED = next((p / "shared/calibration/comm-measurements.json" for p in (ROOT.parent, ROOT.parent.parent)
               if (p / "shared/calibration/comm-measurements.json").exists()), ROOT.parent / "shared/calibration/comm-measurements.json")


@pytest.fixture(scope="module")
def cases():
    return all_cases(load_records())


def test_every_record_is_a_case_or_a_skip_with_a_reason(cases):
    found, skips = cases
    ids = {c.record_id for c in found} | {s.record_id for s in skips}
    assert ids == {r["id"] for r in load_records()}
    assert all(s.reason for s in skips)
    assert {s.reason.split(":")[0] for s in skips} == {"DeepEP low-latency kernels"}


@pytest.mark.skipif(not SHARED.exists(), reason="no shared/calibration checkout (CI)")
def test_packaged_copy_is_the_shared_file():
    assert json.loads(default_data_path().read_text()) == json.loads(SHARED.read_text())


def test_shipped_constants_are_the_fit_of_the_packaged_data(cases):
    """Anyone can re-run scripts/fit_network.py: the fit gives the constants the package ships."""
    res = fit(cases[0])  # bandwidth rows and the 8-byte latency rows, as scripts/fit_network.py fits them
    shipped = fitted_network_constants()
    for name, *_ in PARAMS:
        assert getattr(res.constants, name) == pytest.approx(getattr(shipped, name), rel=1e-3, abs=1e-9), name


def test_bus_bandwidth_of_large_messages_is_within_the_target(cases):
    """Issue 9's bar: within 15% of measured bus bandwidth for messages >= 1 MiB; met by the median row
    and by at least 90% of the rows of 1 GiB or more. The misses are AWS EFA runs (p5, and one p6-b200 row at -15.0%): the NCCL 2.18 outlier
    (the same p5 pair measures 343 GB/s at 256 MiB with newer software) and NCCL 2.27 curves at 8-32
    nodes that dip at 1-2 GiB below their own 512 MiB figures (all_gather 8 nodes: 261 GB/s at 512 MiB,
    224 at 1 GiB, 294 at 2 GiB)."""
    shipped = fitted_network_constants()
    rows = [(c, c.predict(shipped) / c.measured - 1) for c in scored(cases[0])]
    assert np.median([abs(e) for _, e in rows]) <= 0.15
    large = [(c, abs(e)) for c, e in rows if c.size_bytes >= 2**30 and c.metric == "busbw"]
    misses = [c for c, e in large if e > 0.15]
    assert len(misses) <= 0.1 * len(large), [c.record_id for c in misses]
    assert all(c.group.network.fabric == "efa" for c in misses), [c.record_id for c in misses]  # all on AWS EFA


def test_rails_reproduce_two_node_h100_all_reduce(cases):
    """nccl-tests on 2 x 8 H100 (AWS p5, 32 EFA NICs per node) reach ~487 GB/s all-reduce bus bandwidth,
    not the ~50 GB/s one NIC per GPU would give."""
    case = next(c for c in cases[0] if c.record_id == "awsnccl_p5_2n_allreduce_16g")
    assert case.predict() == pytest.approx(487.09, rel=0.15)


def test_unknown_platform_and_bad_file():
    rec = {"id": "mystery_1", "cluster": {"gpu": "H100", "n_gpus": 16}, "measured": {"op": "all_reduce", "message_bytes": 2**30, "bus_bw_gbyte_s": 100}}
    with pytest.raises(ShardwiseError, match="no platform known"):
        record_cases(rec)
    assert record_cases({"id": "x", "measured": {"op": "broadcast"}}).reason == "collective 'broadcast' not modelled"


def test_validate_comm_cli(tmp_path, capsys):
    assert main(["validate", "--comm", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["per_source"]) >= {"awsnccl", "stas", "azbench", "deepep"}
    assert all(r["assumptions"] is not None for r in out["rows"])
    assert main(["validate", "--comm", "--details"]) == 0  # the table, every figure and the skipped records
    assert "skipped deepep_v1_lowlat" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    assert main(["validate", "--comm", str(bad)]) == 2
    assert "expected a JSON list" in capsys.readouterr().err
