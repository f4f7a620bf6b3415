"""Interop with PyTorch pipelining (``torch.distributed.pipelining``): its IRs import here, ours run there.

PyTorch's ``Schedule1F1B._get_pipeline_order`` emits ``F1..Fm`` instead of ``F0..F(m-1)`` on its last rank
(the runtime's hand-written step loop is unaffected; the IR and visualizer are). Importing that IR raises a
ShardwiseError naming the shifted micro-batches; the other ranks equal our ``1f1b``.
"""

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from torch.distributed.pipelining import schedules as tsched  # noqa: E402
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops  # noqa: E402

from shardwise.errors import ShardwiseError  # noqa: E402
from shardwise.pipeline import (  # noqa: E402
    Kind,
    generate_schedule,
    load_csv,
    simulate,
    validate_schedule,
    write_csv_text,
)

PAIRS = [
    ("GPipe", "gpipe", 1),
    ("Interleaved1F1B", "interleaved", 2),
    ("Interleaved1F1B", "interleaved", 3),
    ("LoopedBFS", "bfs", 2),
    ("InterleavedZeroBubble", "zb-h1", 2),
    ("ZBVZeroBubble", "zbv", 2),
    ("DualPipeV", "dualpipev", 2),
]
SIZES = [(2, 4), (4, 8), (4, 12), (3, 6)]


def torch_csv(tmp_path, tname, pp, m, v, with_comms=False):
    """Write PyTorch's IR with PyTorch's own ``_dump_csv`` (it only reads ``self.pipeline_order``)."""
    ops = get_schedule_ops(tname, pp, m, v, with_comms=with_comms)
    path = tmp_path / f"{tname}_{pp}_{m}_{v}.csv"
    holder = types.SimpleNamespace(pipeline_order={r: ops[r] for r in range(len(ops))})
    tsched.PipelineScheduleMulti._dump_csv(holder, str(path))
    return path


def compute_only(sched, rank):
    return [str(a) for a in sched.ranks[rank] if a.kind in (Kind.F, Kind.I, Kind.W, Kind.B)]


@pytest.mark.parametrize("tname, ours, v", PAIRS)
@pytest.mark.parametrize("pp, m", SIZES)
def test_pytorch_schedules_import_equal_ours_and_simulate(tmp_path, tname, ours, v, pp, m):
    imported = validate_schedule(load_csv(torch_csv(tmp_path, tname, pp, m, v)))
    mine = generate_schedule(ours, pp, m, v)
    assert imported.stage_to_rank == mine.stage_to_rank
    for r in range(pp):
        assert compute_only(imported, r) == compute_only(mine, r)
    a, b = simulate(imported, 0.5, 0.5, 0.5, p2p_s=0.1), simulate(mine, 0.5, 0.5, 0.5, p2p_s=0.1)
    assert a.makespan == b.makespan and a.peak_activation == b.peak_activation


@pytest.mark.parametrize("tname, ours, v", [("Interleaved1F1B", "interleaved", 2), ("ZBVZeroBubble", "zbv", 2)])
def test_pytorch_schedules_with_comms_import_and_time_the_same(tmp_path, tname, ours, v):
    imported = validate_schedule(load_csv(torch_csv(tmp_path, tname, 4, 8, v, with_comms=True)))
    assert any(a.kind in (Kind.SEND_F, Kind.RECV_B) for a in imported.ranks[1])
    mine = generate_schedule(ours, 4, 8, v)
    assert simulate(imported, 1, 1, 1, p2p_s=0.3).makespan == simulate(mine, 1, 1, 1, p2p_s=0.3).makespan


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8)])
def test_pytorch_1f1b_ir_bug_is_reported_clearly(tmp_path, pp, m):
    path = torch_csv(tmp_path, "1F1B", pp, m, 1)
    with pytest.raises(ShardwiseError, match="micro-batch indices shifted"):
        validate_schedule(load_csv(path))
    imported = load_csv(path)
    mine = generate_schedule("1f1b", pp, m)
    for r in range(pp - 1):
        assert compute_only(imported, r) == compute_only(mine, r)
    assert compute_only(imported, pp - 1)[0] == f"{pp - 1}F1"  # the bug: F0 missing on the last rank


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved", "bfs", "zb-h1", "zb-h2", "zbv", "v-half", "v-min",
                                  "dualpipev"])
def test_our_csv_is_accepted_by_pytorch(name):
    """PyTorch parses every cell, validates the order, lowers it with SEND/RECV and dry-runs it."""
    sched = generate_schedule(name, 4, 8)
    rows = [[tsched._Action.from_str(cell) for cell in line.split(",")] for line in write_csv_text(sched).splitlines()]
    actions = {r: row for r, row in enumerate(rows)}
    tsched._validate_schedule(actions, sched.pp, sched.num_stages, sched.microbatches)
    with_comms = tsched._add_send_recv(actions, lambda s: sched.stage_to_rank[s], sched.num_stages)
    tsched._simulate_comms_compute(with_comms, lambda s: sched.stage_to_rank[s], sched.num_stages)
