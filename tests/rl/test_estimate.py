"""`rl estimate`: each phase equals the component it comes from; the modes' overlap; memory per phase; errors."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from shardwise.cli.main import main
from shardwise.errors import ShardwiseError
from shardwise.rl.batch import draw_batch, pack_rows, train_batch
from shardwise.rl.phases import drain_profile, forward_s
from shardwise.rl.spec import parse_rl_job
from shardwise.rl.step import estimate_rl

#: A small GRPO job that simulates in well under a second: 8B on 16 H100, 64 prompts x 8 responses.
SMALL = {
    "policy": "llama-3.1-8b",
    "algorithm": {"name": "grpo", "prompts_per_step": 64, "responses_per_prompt": 8, "mini_batches": 2, "max_staleness": 2},
    "rollout": {"input_len": 256, "output_len": {"dist": "lognormal", "median": 600, "sigma": 0.9, "max": 4096}},
    "cluster": {"gpu": "h100", "gpus": 16},
    "parallel": {"tp": 1, "zero": 3, "recompute": "full"},
}


def job_with(**sections):
    doc = copy.deepcopy(SMALL)
    for key, value in sections.items():
        doc[key] = value
    return parse_rl_job(doc)


def _json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("placement", [{"kind": "colocated"}, {"kind": "split", "rollout_gpus": 8}])
def test_phases_equal_serve_simulate_and_train_estimate(tmp_path, capsys, placement):
    """The rollout phase is `serve simulate` of the same batch; the policy update is `train estimate` of the same
    packed rows, once per optimizer step (both run through the CLI on the exported job files)."""
    doc = copy.deepcopy(SMALL) | {"placement": placement}
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(doc))
    est = _json(capsys, ["rl", "estimate", str(tmp_path / "rl.yaml"), "-f", "json", "--export", str(tmp_path / "ph")])
    serve = _json(capsys, ["serve", "simulate", str(tmp_path / "ph" / "rollout.yaml"), "-f", "json"])
    train = _json(capsys, ["train", "estimate", str(tmp_path / "ph" / "train.yaml"), "-f", "json"])
    assert serve["completed"] == 64 * 8
    assert est["phases_s"]["rollout"] == pytest.approx(serve["duration_s"], rel=1e-12)
    steps = est["train_batch"]["optimizer_steps"]
    assert steps == 2
    assert est["phases_s"]["train: policy"] == pytest.approx(steps * train["step_time_s"], rel=1e-12)
    assert est["rollout"]["output_tokens"] == serve["total_output_tokens"]
    assert train["num_gpus"] == (16 if placement["kind"] == "colocated" else 8)


def test_forward_pass_is_a_pipeline_of_forwards():
    """Forward-only: (m - 1) max_r F_r + sum_r F_r; with one pipeline rank m F."""
    from shardwise.rl.phases import cached_estimate, train_job

    job = job_with()
    batch = train_batch(draw_batch(job.rollout.input_len, job.rollout.output_len, 64, 8, 0), True, None)
    est = cached_estimate(train_job(job.policy, job.cluster, "bf16", "fsdp", None, job.plan, batch, 1, "fwd"))
    (f,) = est.stage_times_s["F"]
    assert forward_s(est) == pytest.approx(est.microbatches * f)
    piped = parse_rl_job(copy.deepcopy(SMALL) | {"parallel": {"tp": 2, "pp": 2, "zero": 1}})
    est2 = cached_estimate(train_job(piped.policy, piped.cluster, "bf16", "megatron", None, piped.plan, batch, 1, "fwd"))
    f0, f1 = est2.stage_times_s["F"]
    assert forward_s(est2) == pytest.approx((est2.microbatches - 1) * max(f0, f1) + f0 + f1)


def test_drain_profile_by_hand():
    """Two engines; requests 0 and 2 on engine 0, 1 and 3 on engine 1 (round-robin)."""
    first = np.array([0.0, 0.0, 0.0, 0.0])
    finish = np.array([10.0, 2.0, 4.0, 2.0])
    d = drain_profile(first, finish, 2)
    assert d.makespan_s == 10.0 and d.peak_running == 4
    assert d.batch_idle_fraction == pytest.approx(1 - 18.0 / (4 * 10.0))  # running-time integral 18
    assert d.replica_idle_fraction == pytest.approx((0 + 8) / (2 * 10))  # engine 1 is done at 2 s
    assert d.curve[0] == (0.0, 4) and d.curve[-1] == (10.0, 0)


def test_best_fit_decreasing_by_hand():
    # 6 | 5 | 4 -> row of 6 (0 left) | 3 -> row of 5 (2 left) | 2 -> row of 5: two rows of 10
    assert pack_rows(np.array([6, 5, 4, 3, 2]), 10) == 2
    assert pack_rows(np.array([7, 7, 7]), 10) == 3


@given(st.lists(st.integers(1, 100), min_size=1, max_size=200), st.integers(100, 400))
def test_packing_bounds(lengths, row):
    rows = pack_rows(np.array(lengths), row)
    assert math.ceil(sum(lengths) / row) <= rows <= len(lengths)
    # best-fit decreasing never leaves two rows that could be merged: at most one row is half empty or less
    assert rows <= 2 * math.ceil(sum(lengths) / row) + 1


def test_mode_overlap_follows_the_phase_times():
    sync = estimate_rl(job_with(placement={"kind": "split", "rollout_gpus": 8, "mode": "sync"}))
    off = estimate_rl(job_with(placement={"kind": "split", "rollout_gpus": 8, "mode": "one_step_off"}))
    ph = off.phases_s
    train_side = sum(v for k, v in ph.items() if k not in ("rollout", "weight sync"))
    assert sum(sync.phases_s.values()) == pytest.approx(sync.period_s)
    assert off.period_s == pytest.approx(max(ph["rollout"], train_side) + ph["weight sync"])
    assert off.period_s < sync.period_s
    asy = estimate_rl(job_with(placement={"kind": "split", "rollout_gpus": 8, "mode": "async", "staleness": 2}))
    # the window of three batches drains its tail once: less rollout time per batch than one batch alone
    assert asy.rollout_window is not None and asy.rollout_window.time_s / 3 < asy.rollout.time_s
    assert asy.phases_s["rollout"] == pytest.approx(asy.rollout_window.time_s / 3)
    assert asy.period_s <= off.period_s


def test_colocated_memory_per_phase():
    """Without offload the training states stay and the engine's KV cache shrinks by them; with offload the
    iteration pays the host copies."""
    keep = estimate_rl(job_with(placement={"kind": "colocated", "offload": "none"}))
    off = estimate_rl(job_with(placement={"kind": "colocated", "offload": "all"}))
    assert keep.memory["offload"] is False and off.memory["offload"] is True
    assert keep.memory["rollout"]["kv_gib_per_gpu"] < off.memory["rollout"]["kv_gib_per_gpu"]
    assert keep.memory["train"]["need_gib"] > off.memory["train"]["need_gib"]
    assert "offload/onload" in off.phases_s and "offload/onload" not in keep.phases_s
    assert off.phases_s["offload/onload"] > 0


def test_heavier_tail_idles_more():
    light = estimate_rl(job_with(rollout={"input_len": 256, "output_len": {"dist": "lognormal", "median": 600, "sigma": 0.2, "max": 4096}}))
    heavy = estimate_rl(job_with(rollout={"input_len": 256, "output_len": {"dist": "lognormal", "median": 600, "sigma": 1.2, "max": 4096}}))
    assert heavy.rollout.drain.batch_idle_fraction > light.rollout.drain.batch_idle_fraction
    assert heavy.rollout.drain.finish_s["max"] / heavy.rollout.drain.finish_s["p50"] > \
        light.rollout.drain.finish_s["max"] / light.rollout.drain.finish_s["p50"]


def test_weight_sync_in_place_is_cheaper_than_across_pools():
    co = estimate_rl(job_with(placement={"kind": "colocated"}))
    split = estimate_rl(job_with(placement={"kind": "split", "rollout_gpus": 8}))
    assert 0 < co.sync["total_s"] < split.sync["total_s"]
    assert split.sync["send_s"] > 0 and co.sync["send_s"] == 0


def test_ppo_adds_critic_passes():
    ppo = estimate_rl(job_with(algorithm={"name": "ppo", "prompts_per_step": 256, "mini_batches": 2}))
    assert {"forward: critic values", "train: critic"} <= set(ppo.phases_s)
    assert ppo.samples == 256  # one response per prompt


@pytest.mark.parametrize("change, words", [
    ({"placement": {"kind": "colocated", "mode": "async"}}, "colocated GPUs cannot"),
    ({"placement": {"kind": "split"}}, "needs rollout_gpus"),
    ({"placement": {"kind": "split", "rollout_gpus": 3}}, "whole number"),
    ({"placement": {"kind": "split", "rollout_gpus": 16}}, "leaves no training GPUs"),
    ({"placement": {"kind": "split", "rollout_gpus": 8, "mode": "async", "staleness": 3}}, "exceeds algorithm.max_staleness"),
    ({"critic": True}, "GRPO has no value model"),
    ({"rollout": {"output_len": "sharegpt"}}, "serving workload"),
    ({"parallel": {"tp": 3}}, "does not divide"),
])
def test_bad_jobs_are_one_line_errors(tmp_path, capsys, change, words):
    doc = copy.deepcopy(SMALL) | change
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["rl", "estimate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1
    with pytest.raises(ShardwiseError):
        estimate_rl(parse_rl_job(doc))


def test_example_job_runs(capsys):
    assert main(["rl", "estimate", "examples/rl-grpo-llama3.1-8b-64xh100.yaml"]) == 0
    out = capsys.readouterr().out
    assert "serve simulate" in out and "train estimate" in out and "batch idle" in out


def _requests(lengths):
    seq = np.array(lengths)
    return type("R", (), {"input_len": seq * 0, "output_len": seq})()


@given(st.lists(st.integers(1, 4000), min_size=1, max_size=200), st.sampled_from([1, 2, 4, 8, 32]))
def test_balanced_parts_split_the_batch_evenly(lengths, parts):
    """Every sequence in exactly one part, each part in batch order; part sizes differ by at most one."""
    from shardwise.rl.batch import balanced_parts

    seq = np.array(lengths)
    got = balanced_parts(seq, parts)
    assert sorted(np.concatenate(got).tolist()) == list(range(len(seq)))
    sizes = [len(p) for p in got]
    assert max(sizes) - min(sizes) <= 1 and all(np.all(np.diff(p) > 0) for p in got)


@given(st.lists(st.integers(1, 4000), min_size=1, max_size=200), st.integers(1, 16), st.sampled_from([1, 2, 4, 8, 32]))
def test_a_steps_layout_holds_the_busiest_ranks_tokens(lengths, mini_batches, dp):
    """Packed by a token budget, a step runs on every rank the busiest rank's tokens (at least the mean), in
    micro-batches within the budget; unpacked, each row is padded to the longest sequence."""
    from shardwise.specs.model_ref import load_model

    model = load_model("llama-3.1-8b")
    packed = train_batch(_requests(lengths), True, 4096)
    lay = packed.layout(model, dp, mini_batches, 1)
    assert lay.imbalance >= 1 - 1e-9 and lay.rank_tokens >= lay.mean_tokens * (1 - 1e-9)
    slots = lay.rows * lay.micro_batches  # rows are whole tokens, at least one: within half a token of the share
    if lay.rank_tokens >= slots / 2:
        assert slots * lay.row_len == pytest.approx(lay.rank_tokens, abs=slots / 2 + 1e-6)
    else:  # less than half a token a row on average over the steps (a few short sequences, many mini-batches)
        assert lay.row_len == 1
    assert lay.micro_batches == max(1, math.ceil(lay.rank_tokens / 4096))
    if dp == 1:
        assert lay.imbalance == pytest.approx(1.0)  # one rank: nobody to wait for
    padded = train_batch(_requests(lengths), False, None)
    assert padded.layout(model, dp, mini_batches, 1).row_len == max(lengths)


def test_attention_span_and_busiest_rank_by_hand():
    """Span sum s^2 / sum s; with two ranks, [4000, 1000, 1000, 1000] splits {4000, 1000} | {1000, 1000}, so the
    step waits for a rank with w(4000) + w(1000), w(s) = s (a + b s) the causal forward FLOPs of the sequence."""
    from shardwise.cost.flops import model_flops_per_token
    from shardwise.specs.model_ref import load_model

    model = load_model("llama-3.1-8b")
    batch = train_batch(_requests([4000, 1000, 1000, 1000]), True, 8192)
    assert batch.attention_span == round((16e6 + 3e6) / 7000)
    a = model_flops_per_token(model, 0, causal=True)
    b = model_flops_per_token(model, 1, causal=True) - a
    assert model_flops_per_token(model, 4000, causal=True) == pytest.approx(a + 4000 * b)  # linear in the span
    w = {s: s * (a + b * s) for s in (4000, 1000)}
    lay = batch.layout(model, 2, 1, 1)
    assert lay.imbalance == pytest.approx((w[4000] + w[1000]) / ((w[4000] + 3 * w[1000]) / 2))
    # the busiest rank's work at the batch's mean work per token: rows of the span cost the same work
    per_token = (w[4000] + 3 * w[1000]) / 7000
    assert lay.rank_tokens == pytest.approx((w[4000] + w[1000]) / per_token)


def test_stream_schedule_by_hand():
    """Groups {0, 1} and {2, 3} finish at max(1, 5) = 5 and max(2, 3) = 3, so the second group is the first
    mini-batch (ready at 3); equal lengths share each phase equally. Streamed: f and u of each mini-batch in turn;
    otherwise the forwards stream and the updates follow the last forward."""
    from shardwise.rl.step import stream_schedule
    from shardwise.serve.workload import Requests
    from shardwise.specs.model_ref import load_model

    req = Requests(np.zeros(4), np.full(4, 100), np.full(4, 400), 0, np.array([0, 0, 1, 1]))
    finish = np.array([1.0, 5.0, 2.0, 3.0])
    model = load_model("llama-3.1-8b")
    segs, end = stream_schedule(finish, req, model, 2, True, [("f", 2.0)], [("u", 4.0)])
    assert segs == [("f", 3.0, 4.0), ("u", 4.0, 6.0), ("f", 6.0, 7.0), ("u", 7.0, 9.0)] and end == 9.0
    segs, end = stream_schedule(finish, req, model, 2, False, [("f", 2.0)], [("u", 4.0)])
    assert segs == [("f", 3.0, 4.0), ("f", 5.0, 6.0), ("u", 6.0, 10.0)] and end == 10.0


def test_stream_mode_overlaps_the_tail_on_policy():
    """Split stream: the training pool starts before the rollout's last response, the iteration is on-policy
    (staleness 0, allowed at max_staleness 0), and it is never slower than split sync of the same pools."""
    place = {"kind": "split", "rollout_gpus": 8}
    algo = {**SMALL["algorithm"], "max_staleness": 0, "recompute_logprobs": False}
    stream = estimate_rl(job_with(placement={**place, "mode": "stream"}, algorithm=algo))
    sync = estimate_rl(job_with(placement={**place, "mode": "sync"}, algorithm=algo))
    assert stream.placement["staleness"] == 0 and stream.period_s <= sync.period_s
    first = min(s.start_s for s in stream.timeline if s.pool == "train")
    assert first < stream.phases_s["rollout"]
    ends = max(s.end_s for s in stream.timeline if s.pool == "train" and s.phase != "weight sync")
    assert stream.period_s == pytest.approx(max(ends, stream.phases_s["rollout"]) + stream.phases_s["weight sync"])
    # work is conserved: the train pool's segments add up to the phases' totals
    busy = sum(s.end_s - s.start_s for s in stream.timeline if s.pool == "train" and s.phase != "weight sync")
    assert busy == pytest.approx(sum(v for k, v in stream.phases_s.items() if k not in ("rollout", "weight sync")))
    # recomputed old log-probs need the generating weights: the updates wait for the last forward pass
    held = estimate_rl(job_with(placement={**place, "mode": "stream"}, algorithm={**algo, "recompute_logprobs": True}))
    train = [s for s in held.timeline if s.pool == "train" and s.phase.startswith("train")]
    fwd = [s for s in held.timeline if s.pool == "train" and s.phase.startswith("forward")]
    assert len(train) == 1 and train[0].start_s >= max(s.end_s for s in fwd) - 1e-9
