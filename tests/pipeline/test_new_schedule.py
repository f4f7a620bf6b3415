"""Adding a schedule takes one generator and one registration (issue 13): this file is the whole of a toy
schedule, 1F1B with one warm-up forward fewer, and once registered it shows in `schedule list`, runs in
`schedule simulate`, is searched by the planner and passes the checks every registered record passes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise.cli.main import main
from shardwise.pipeline.ir import B_CODE, F_CODE, Schedule, loop_placement, make_schedule
from shardwise.pipeline.registry import planner_schedules, register, unregister
from shardwise.pipeline.schedule_info import LOOP, ONE_STAGE, ScheduleInfo, StepTime
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.planner import plan_search
from tests.pipeline import test_schedule_info as record_checks

NAME = "1f1b-lean"


def one_warmup_fewer(pp: int, m: int) -> list[list[int]]:
    """The generator: 1F1B (Narayanan et al. 2021, Sec. 2.2.1) with pp-2-r warm-up forwards on rank r
    instead of pp-1-r."""
    ranks = []
    for r in range(pp):
        warm = min(max(pp - 2 - r, 0), m)
        acts = [a for k in range(warm) for a in (r, k, F_CODE)]
        for j in range(m - warm):
            acts += (r, warm + j, F_CODE, r, j, B_CODE)
        for j in range(m - warm, m):
            acts += (r, j, B_CODE)
        ranks.append(acts)
    return ranks


def _build(pp: int, m: int, vpp: int) -> Schedule:
    return make_schedule(NAME, pp, m, loop_placement(pp, 1), one_warmup_fewer(pp, m))


#: The registration. With one forward fewer in flight the steady phase waits a round trip per micro-batch:
#: m + p - 2 idle stage units (measured on the simulator), at most max(p - 1 - r, 1) micro-batches in flight.
TOY = ScheduleInfo(
    NAME, "1F1B with one warm-up forward fewer (a test exercise on Narayanan et al. 2021)", _build,
    ONE_STAGE, LOOP, StepTime.MAKESPAN,
    inflight=lambda p, v, m, r: np.minimum(max(p - 1 - r, 1), m),
    bubble_units=lambda p, v, m: m + p - 2.0,
    planner_order=10)


@pytest.fixture
def toy():
    register(TOY, ("lean-1f1b",))
    yield NAME
    unregister(NAME)


def _run(capsys, *argv):
    rc = main(list(argv))
    return rc, capsys.readouterr().out


def test_it_passes_every_check_of_a_registered_record(toy):
    for check in (record_checks.test_every_field_is_defined,
                  record_checks.test_vpp_rule_and_admissible_counts_match_the_generator,
                  record_checks.test_placement_and_stages_per_rank_match_the_generated_schedule,
                  record_checks.test_inflight_closed_form_is_never_below_the_simulator):
        check(toy)


def test_bubble_closed_form_matches_the_simulator(toy, capsys):
    for pp, m in ((2, 3), (4, 8), (8, 4)):
        rc, out = _run(capsys, "schedule", "simulate", "--schedule", "lean-1f1b", "--pp", str(pp), "-m", str(m),
                       "--format", "json")
        assert rc == 0
        idle = (json.loads(out)["makespan"] - 3 * m) / 3
        assert idle == pytest.approx(float(TOY.bubble_units(pp, 1, np.array([m]))[0]))


def test_it_shows_in_schedule_list(toy, capsys):
    rc, out = _run(capsys, "schedule", "list")
    assert rc == 0 and NAME in out and "one warm-up forward fewer" in out


def test_the_planner_searches_it(toy):
    assert NAME in planner_schedules()

    def best(*schedules):
        return plan_search(load_model("llama-3.1-8b"), make_cluster("h100", 16),
                           TrainingSpec(seq_len=4096, global_batch=64), schedules=schedules, fixed={"pp": 4},
                           top_k=1, max_exact=4).top[0]

    lean, plain = best(NAME), best("1f1b")
    assert lean.plan["schedule"] == NAME and lean.plan["pp"] == 4
    assert lean.step_time_s > plain.step_time_s  # one forward fewer in flight only adds bubble
