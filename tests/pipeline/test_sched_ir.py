"""IR, text and CSV forms, registry names and user errors."""

import numpy as np
import pytest

from shardwise.errors import ShardwiseError
from shardwise.pipeline import (
    Action,
    Kind,
    dump_csv,
    from_text,
    generate_schedule,
    list_schedules,
    load_csv,
    parse_action,
    read_csv_text,
    resolve,
    write_csv_text,
)
from shardwise.pipeline.ir import loop_placement, v_placement

NAMED = [n for n in list_schedules() if n != "auto"]


def test_action_notation_round_trips():
    for text in ("0F3", "1I3", "1W3", "0B3", "12F105", "2SEND_F1", "3RECV_B0", "1REDUCE_GRAD", "0UNSHARD"):
        assert str(parse_action(text)) == text
    assert parse_action("2F0") == Action(2, 0, Kind.F)
    assert parse_action("1REDUCE_GRAD").microbatch == -1


@pytest.mark.parametrize("bad", ["", "F0", "0X1", "0F", "a0F1", "0F1x", "-1F0"])
def test_bad_action_text_is_a_clear_error(bad):
    with pytest.raises(ShardwiseError, match="action"):
        parse_action(bad)


def test_placements():
    assert loop_placement(4, 2) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert v_placement(4) == [0, 1, 2, 3, 3, 2, 1, 0]
    s = generate_schedule("interleaved", 4, 8, vpp=2)
    assert list(s.stage_to_rank) == loop_placement(4, 2) and s.placement == "loop"
    v = generate_schedule("zbv", 4, 8)
    assert list(v.stage_to_rank) == v_placement(4) and v.placement == "v"
    assert v.rank_stages(0) == [0, 7] and v.vpp == 2 and v.num_stages == 8


@pytest.mark.parametrize("name", NAMED)
def test_csv_round_trip_is_identical(name, tmp_path):
    sched = generate_schedule(name, 4, 8)
    path = tmp_path / f"{name}.csv"
    dump_csv(sched, path)
    back = load_csv(path)
    assert back.same_ir(sched) and back == sched
    assert read_csv_text(write_csv_text(sched)) == sched


@pytest.mark.parametrize("name", NAMED)
def test_text_round_trip_is_identical(name):
    sched = generate_schedule(name, 3, 6)
    assert from_text(sched.to_text()) == sched


def test_csv_layout_is_one_row_per_rank_one_cell_per_action():
    text = write_csv_text(generate_schedule("1f1b", 2, 2))
    assert text.splitlines() == ["0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"]


def test_csv_import_accepts_idle_cells_comms_and_overlap():
    text = "0F0,,0SEND_F0,(0F1;3B0)OVERLAP_F_B\n1RECV_F0,1F0,2F0\n"
    sched = read_csv_text(text, microbatches=2)
    assert [str(a) for a in sched.ranks[0]] == ["0F0", "0SEND_F0", "0F1", "3B0"]
    assert [str(a) for a in sched.ranks[1]] == ["1RECV_F0", "1F0", "2F0"]
    assert list(sched.stage_to_rank) == [0, 1, 1, 0]


def test_malformed_csv_names_the_cell():
    with pytest.raises(ShardwiseError, match=r"row 1 .*column 2"):
        read_csv_text("0F0,0B0\n1F0,1Q0\n")
    with pytest.raises(ShardwiseError, match="empty"):
        read_csv_text("\n\n")


def test_stage_on_two_ranks_is_rejected():
    with pytest.raises(ShardwiseError, match="stage 0 appears on rank 0 and on rank 1"):
        from_text("0F0 0B0\n0F1 1B0\n")


def test_missing_csv_file_is_a_clear_error(tmp_path):
    with pytest.raises(ShardwiseError, match="schedule CSV not found"):
        load_csv(tmp_path / "nope.csv")


def test_registry_names_case_insensitive_with_aliases():
    assert resolve("1F1B-I") == "interleaved" and resolve("interleaved-1f1b") == "interleaved"
    assert resolve("ZB1P") == "zb-h1" and resolve("zb2p") == "zb-h2" and resolve("ZB-V") == "zbv"
    assert resolve("DualPipeV") == "dualpipev" and resolve("LoopedBFS") == "bfs"
    assert set(NAMED) == {"gpipe", "1f1b", "interleaved", "bfs", "zb-h1", "zb-h2", "zbv", "v-half", "v-min",
                          "dualpipev"}
    assert "auto" in list_schedules()


def test_unknown_schedule_lists_the_names():
    with pytest.raises(ShardwiseError, match="unknown schedule 'pipedream-2bw'.*1f1b"):
        generate_schedule("pipedream-2bw", 4, 8)


@pytest.mark.parametrize(
    "name, pp, m, vpp, match",
    [
        ("interleaved", 4, 8, 1, "at least two stages"),
        ("1f1b", 4, 8, 2, "one stage per rank"),
        ("zbv", 4, 8, 3, "exactly two stages"),
        ("interleaved", 4, 9, 2, "rounds"),
        ("dualpipev", 4, 7, None, "at least 2\\*pp = 8"),
        ("1f1b", 0, 8, None, "pp must be a positive integer"),
        ("1f1b", 4, 0, None, "microbatches must be a positive integer"),
        ("gpipe", 4, 8, 0, "vpp must be a positive integer"),
    ],
)
def test_inadmissible_configurations_are_clear_errors(name, pp, m, vpp, match):
    with pytest.raises(ShardwiseError, match=match):
        generate_schedule(name, pp, m, vpp)


def test_generator_parameters_only_for_auto():
    with pytest.raises(ShardwiseError, match="takes no parameters"):
        generate_schedule("1f1b", 4, 8, mem_cap=3)


def test_v_schedules_accept_vpp_one_as_unset():
    assert generate_schedule("zbv", 4, 8, 1) == generate_schedule("zbv", 4, 8, 2)


def test_codes_are_compact_int_arrays():
    s = generate_schedule("zb-h1", 4, 8)
    assert all(a.dtype == np.int32 and a.shape[1] == 3 for a in s.codes)
    assert s.num_actions == 3 * 4 * 8
