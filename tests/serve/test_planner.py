"""The planner: the MILP on a hand-checkable case, feasibility, 'no feasible deployment', bad input."""

import pytest

from shardwise.errors import ShardwiseError
from shardwise.serve.config import SLOSpec
from shardwise.serve.mix import allocate
from shardwise.serve.plan_cli import parse_gpu_mix, plan_request
from shardwise.serve.planner import cost_curves, plan


def test_milp_mixes_gpu_types_on_a_hand_checkable_case():
    """Short requests (10 req/s) and long ones (2 req/s). Type A ($1/h) sustains 5 short or 0.5 long;
    type B ($3/h) 8 short or 4 long. All on A: 10/5 + 2/0.5 = 6 instances = $6; all on B: 1.25 + 0.5
    -> 2 instances = $6; shorts on 2 A + longs on 1 B = $5, the optimum (Mélange's point: 17% cheaper)."""
    a = allocate([10.0, 2.0], {"A": [5.0, 0.5], "B": [8.0, 4.0]}, {"A": 1.0, "B": 3.0}, {"A": 10, "B": 10})
    assert a.feasible and a.cost == 5.0
    assert a.instances == {"A": 2, "B": 1}
    assert a.shares == {"A": [1.0, 0.0], "B": [0.0, 1.0]}


def test_milp_respects_availability_and_impossible_classes():
    # only one A: shorts cannot all go there, and A cannot serve longs at all -> two B ($6) beats 1 A + 2 B ($7)
    a = allocate([10.0, 2.0], {"A": [5.0, 0.0], "B": [8.0, 4.0]}, {"A": 1.0, "B": 3.0}, {"A": 1, "B": 10})
    assert a.instances == {"B": 2} and a.cost == 6.0
    assert not allocate([10.0], {"A": [1.0]}, {"A": 1.0}, {"A": 2}).feasible


def small_request(rate, ttft, tpot, gpus="a100-80gb:4", model="llama-3.1-8b"):
    return plan_request(None, model, rate, ttft, tpot, None, gpus, None, None, 150)


def test_plan_picks_the_cheapest_feasible_deployment():
    result = plan(small_request(2.0, 1000, 100), disaggregation=False, mix=False)
    assert result.chosen is not None
    assert result.chosen.kind == "colocated"
    assert result.chosen.usd_per_hour == pytest.approx(5.12)  # one A100-80GB is enough at 2 req/s
    assert result.chosen.metrics["slo_attainment"] >= 0.9
    dep = result.chosen.deployment()
    assert dep["gpu"] == "A100-80GB" and dep["replicas"] == 1
    assert all(c.usd_per_hour >= result.chosen.usd_per_hour for c in result.runners_up)
    data = cost_curves(result)
    assert data["curves"] and all(len(c["rates"]) == len(c["usd_per_hour"]) for c in data["curves"])
    assert data["chosen"]["usd_per_hour"] == pytest.approx(5.12)


def test_plan_scales_replicas_with_rate():
    one = plan(small_request(2.0, 1000, 100, "a100-80gb:8"), disaggregation=False, mix=False).chosen
    many = plan(small_request(40.0, 1000, 100, "a100-80gb:8"), disaggregation=False, mix=False).chosen
    assert many.usd_per_hour > one.usd_per_hour


def test_impossible_slo_gives_no_feasible_deployment_with_closest_candidates():
    result = plan(small_request(5.0, 1, 1), disaggregation=False, mix=False)
    assert result.chosen is None
    assert result.closest
    assert all(not c.feasible for c in result.closest)
    assert "misses the SLO even at low load" in result.closest[0].reason
    assert result.to_json()["feasible"] is False


def test_too_few_gpus_is_infeasible_and_says_how_many_are_needed():
    result = plan(small_request(200.0, 1000, 100, "a100-80gb:1"), disaggregation=False, mix=False)
    assert result.chosen is None
    assert any("A100-80GB GPUs, 1 available" in c.reason for c in result.closest)


@pytest.mark.parametrize("text, message", [("h100:x", "bad count"), ("h100:-1", "must be positive"), ("z9:4", "unknown GPU"), ("", "at least one GPU")])
def test_bad_gpu_lists(text, message):
    with pytest.raises(ShardwiseError, match=message):
        parse_gpu_mix(text)


def test_plan_input_errors():
    with pytest.raises(ShardwiseError, match="needs an SLO"):
        plan_request(None, "llama-3.1-8b", 1.0, None, None, None, "h100:1", None, None, None)
    with pytest.raises(ShardwiseError, match="needs --model"):
        plan_request(None, None, 1.0, 100, 10, None, "h100:1", None, None, None)
    with pytest.raises(ShardwiseError, match="positive, finite"):
        req = small_request(1.0, 100, 10)
        plan(type(req)(req.model, req.precision, -1.0, SLOSpec(ttft_ms=1), req.gpus, req.workload))
