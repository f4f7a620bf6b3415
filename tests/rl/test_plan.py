"""`rl plan`: the choice within the modes the staleness limit allows, the off-policy gain growing with the tail; rejections
are explained; the chosen block runs."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from shardwise.cli.main import main
from shardwise.rl.planner import plan_rl
from shardwise.rl.spec import parse_rl_job
from shardwise.rl.step import estimate_rl

BIG = yaml.safe_load(open("examples/rl-grpo-llama3.1-70b-256xh100.yaml"))
SHORT = {"dist": "lognormal", "median": 300, "sigma": 0.4, "max": 1024}  # chat-style RLHF responses
LONG = {"dist": "lognormal", "median": 3000, "sigma": 0.8, "max": 16384}  # long-tail reasoning rollouts


def _plan(doc, **algorithm):
    doc = copy.deepcopy(doc)
    doc["algorithm"].update(algorithm)
    return plan_rl(parse_rl_job(doc))


def _gain(res) -> float:
    """Samples/s of the fastest off-policy candidate over the fastest on-policy one, less 1."""
    off = max(e.samples_per_s for e in res.ranked if e.placement["staleness"] > 0)
    on = max(e.samples_per_s for e in res.ranked if e.placement["staleness"] == 0)
    return off / on - 1


@pytest.fixture(scope="module")
def short_and_long():
    return [_plan({**BIG, "rollout": {**BIG["rollout"], "output_len": lengths}}) for lengths in (SHORT, LONG)]


def test_staleness_allowed_overlap_wins_and_its_gain_grows_with_the_tail(short_and_long):
    """70B GRPO on 256 H100, staleness up to 2 allowed: on samples/s the model picks split pools with streaming
    generation for short and long-tail responses alike (it does not produce the published 'short -> colocated'
    flip); what the tail changes is the size of the gain over the best on-policy placement, because a synchronous
    batch idles through its drain."""
    short, long = short_and_long
    for res in (short, long):
        assert res.best.placement["kind"] == "split" and res.best.placement["staleness"] > 0
    g_short, g_long = _gain(short), _gain(long)
    assert 0 < g_short < g_long and g_long > g_short + 0.2
    co_short = [e for e in short.ranked if e.placement["kind"] == "colocated"][0]
    co_long = [e for e in long.ranked if e.placement["kind"] == "colocated"][0]
    assert co_long.rollout.drain.batch_idle_fraction > co_short.rollout.drain.batch_idle_fraction > 0.3
    assert long.best.phases_s["rollout"] < long.best.rollout.time_s  # the window amortises the tail


@pytest.mark.parametrize("lengths", [SHORT, LONG], ids=["short", "long-tail"])
def test_on_policy_keeps_colocated(lengths):
    """max_staleness 0: only sync placements run, and colocated beats split for both lengths: split pools that wait
    for each other leave one pool idle for the other's phase, which costs more than the colocated switch."""
    res = _plan({**BIG, "rollout": {**BIG["rollout"], "output_len": lengths}}, max_staleness=0)
    assert all(e.placement["staleness"] == 0 for e in res.ranked)
    assert any("staleness limit" in r for _, r in res.rejected)
    assert res.best.placement["kind"] == "colocated"
    split = max((e for e in res.ranked if e.placement["kind"] == "split"), key=lambda e: e.samples_per_s)
    idle = split.idle()
    assert min(idle["rollout"], idle["train"]) > 0.2


def test_rejections_name_the_phase_memory(short_and_long):
    _, long = short_and_long
    reasons = [r for _, r in long.rejected]
    assert any(r.startswith("training phase memory") and "GiB per GPU" in r for r in reasons)


def test_chosen_block_estimates_the_same(tmp_path, short_and_long, capsys):
    """The chosen candidate written back into the job (placement, rollout tp, parallel) estimates the same."""
    _, long = short_and_long
    from shardwise.rl.planner import placement_block

    block = placement_block(long.best)
    doc = copy.deepcopy(BIG)
    doc["rollout"] = {**doc["rollout"], "output_len": LONG, **block["rollout"]}
    doc["placement"], doc["parallel"] = block["placement"], block["parallel"]
    again = estimate_rl(parse_rl_job(doc))
    assert again.samples_per_s == pytest.approx(long.best.samples_per_s, rel=1e-9)


def test_plan_cli_json(capsys):
    assert main(["rl", "plan", "examples/rl-grpo-llama3.1-8b-64xh100.yaml", "-f", "json", "--top", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ranked"]) == 3 and out["chosen"]["samples_per_s"] == out["ranked"][0]["samples_per_s"]
    assert out["placement_block"]["placement"]["kind"] in ("colocated", "split")
    rates = [r["samples_per_s"] for r in out["ranked"][1:]]
    assert rates == sorted(rates, reverse=True)
    assert main(["rl", "plan", "examples/rl-grpo-llama3.1-8b-64xh100.yaml", "--top", "0"]) == 2
