"""`rl plan`: the choice within the modes the staleness limit allows: on-policy, colocated for short responses and split
with streaming for long-tail ones (the published flip, on verl's own setup); the off-policy gain growing with the tail;
rejections are explained; the chosen block runs."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from shardwise.cli.main import main
from shardwise.rl.planner import RLPlanResult, placement_block, plan_rl
from shardwise.rl.spec import parse_rl_job
from shardwise.rl.step import estimate_rl
from shardwise.rl.validate import load_measurements

BIG = yaml.safe_load(open("examples/rl-grpo-llama3.1-70b-256xh100.yaml"))
SHORT = {"dist": "lognormal", "median": 300, "sigma": 0.4, "max": 1024}  # chat-style RLHF responses
LONG = {"dist": "lognormal", "median": 3000, "sigma": 0.8, "max": 16384}  # long-tail reasoning rollouts


def _plan(doc, **algorithm):
    doc = copy.deepcopy(doc)
    doc["algorithm"].update(algorithm)
    return plan_rl(parse_rl_job(doc), prune=False)  # every candidate simulated: the tests read ranked beyond the top


def _gain(res: RLPlanResult) -> float:
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
    """The 70B example (4 mini-batches, recomputed old log-probs), max_staleness 0: only on-policy placements run, and
    colocated beats split for both lengths: recomputed old log-probs hold every update until the last response is
    done (stream overlaps only the forward passes with the tail), and split pools that wait for each other leave one
    pool idle for the other's phase, which costs more than the colocated switch."""
    res = _plan({**BIG, "rollout": {**BIG["rollout"], "output_len": lengths}}, max_staleness=0)
    assert all(e.placement["staleness"] == 0 for e in res.ranked)
    assert any("staleness limit" in r for _, r in res.rejected)
    assert res.best.placement["kind"] == "colocated"
    split = max((e for e in res.ranked if e.placement["kind"] == "split" and e.placement["mode"] == "sync"),
                key=lambda e: e.samples_per_s)
    idle = split.idle()
    assert min(idle["rollout"], idle["train"]) > 0.2


def _verl_128h20(lengths):
    """verl's DAPO recipe on 128 H20 as the fully-async README ran it (data/rl_measurements.yaml: Qwen2.5-Math-7B,
    512 prompts x 16, 16 mini-batches, vLLM tp4, FSDP2 with Ulysses sp4), on-policy only, old log-probs from the
    generator (the README's stream pipeline, use_rollout_log_probs; the same for every candidate)."""
    record = next(r for r in load_measurements()["records"] if r["id"] == "verl-async-colocate-128xh20")
    doc = copy.deepcopy(record["job"])
    doc["algorithm"].update(max_staleness=0, recompute_logprobs=False)
    doc["rollout"]["output_len"] = lengths
    return plan_rl(parse_rl_job(doc), prune=False)  # every candidate simulated: the tests read ranked beyond the top


@pytest.fixture(scope="module")
def verl_flip():
    long_tail = next(r for r in load_measurements()["records"] if r["id"] == "verl-async-colocate-128xh20")
    return _verl_128h20(SHORT), _verl_128h20(long_tail["job"]["rollout"]["output_len"])


def test_on_policy_choice_flips_from_colocated_to_split_stream_with_the_tail(verl_flip):
    """The published flip (verl's one-step-off and fully-async READMEs, StreamRL Sec. 2-4), from the model's own
    figures, on-policy (max_staleness 0): short responses -> colocated sync; the recipe's long-tail reasoning
    responses (to 28K tokens) -> split pools with stream generation. Why: the tail of a long-tail batch is set by a
    few long sequences decoding one token at a time, which more GPUs do not speed up ("increasing resources does not
    reduce the rollout duration", verl one-step-off README), so the rollout on half the GPUs takes far less than
    twice as long, and the training pool works through the finished groups meanwhile; a short batch's rollout is
    throughput-bound and ends together, so the split pools each idle for the other's phase."""
    short, long = verl_flip
    assert short.best.placement["kind"] == "colocated"
    assert long.best.placement["kind"] == "split" and long.best.placement["mode"] == "stream"
    assert long.best.placement["staleness"] == 0 and short.best.placement["staleness"] == 0
    co = next(e for e in long.ranked if e.placement["kind"] == "colocated")
    best = long.best
    # the long-tail rollout is latency-bound: fewer GPUs, not proportionally slower
    gpu_ratio = co.pools["all"] / best.pools["rollout"]
    assert best.phases_s["rollout"] / co.phases_s["rollout"] < 0.6 * gpu_ratio
    # the training pool starts long before the last response
    start = min(s.start_s for s in best.timeline if s.pool == "train")
    assert start < 0.5 * best.phases_s["rollout"]
    # the chosen block written back into the job estimates the same (the micro-batch budget in packed rows)
    record = next(r for r in load_measurements()["records"] if r["id"] == "verl-async-colocate-128xh20")
    doc = copy.deepcopy(record["job"])
    doc["algorithm"].update(max_staleness=0, recompute_logprobs=False)
    block = placement_block(best)
    doc["rollout"].update(block["rollout"])
    doc["placement"], doc["parallel"] = block["placement"], block["parallel"]
    assert estimate_rl(parse_rl_job(doc)).samples_per_s == pytest.approx(best.samples_per_s, rel=1e-9)
    # short: the best split candidate streams too, but its rollout pool idles most of the iteration
    split = max((e for e in short.ranked if e.placement["kind"] == "split"), key=lambda e: e.samples_per_s)
    assert split.idle()["rollout"] > 0.4 and split.samples_per_s < short.best.samples_per_s


def test_rejections_name_the_phase_memory(short_and_long):
    _, long = short_and_long
    reasons = [r for _, r in long.rejected]
    assert any(r.startswith("training phase memory") and "GiB per GPU" in r for r in reasons)


def test_chosen_block_estimates_the_same(tmp_path, short_and_long, capsys):
    """The chosen candidate written back into the job (placement, rollout tp, parallel) estimates the same."""
    _, long = short_and_long
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
