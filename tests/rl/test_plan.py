"""`rl plan`: the colocated/split choice flips with the rollout's tail; rejections are explained; the chosen block runs."""

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


def test_choice_flips_with_the_tail(short_and_long):
    """70B GRPO on 256 H100: short responses -> colocated (sync); long-tail reasoning rollouts -> split pools with
    streaming generation. The figure behind it: what overlapping generation with training buys over the best
    on-policy placement grows with the tail (the drain a synchronous batch idles through)."""
    short, long = short_and_long
    assert short.best.placement["kind"] == "colocated" and short.best.placement["mode"] == "sync"
    assert long.best.placement["kind"] == "split" and long.best.placement["mode"] in ("async", "one_step_off")
    g_short, g_long = _gain(short), _gain(long)
    assert g_short < 0.25 < g_long
    assert g_long > g_short + 0.2
    co = [e for e in long.ranked if e.placement["kind"] == "colocated"][0]
    assert co.rollout.drain.batch_idle_fraction > 0.5  # the synchronous batch idles through its tail
    assert long.best.phases_s["rollout"] < long.best.rollout.time_s  # the window amortises the tail


def test_on_policy_only_keeps_sync(short_and_long):
    res = _plan({**BIG, "rollout": {**BIG["rollout"], "output_len": LONG}}, max_staleness=0)
    assert all(e.placement["staleness"] == 0 for e in res.ranked)
    assert any("staleness limit" in r for _, r in res.rejected)
    # on-policy, time-sharing every GPU beats two pools that wait for each other
    assert res.best.placement["kind"] == "colocated"


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
