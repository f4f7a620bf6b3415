"""Executor pieces that need no torch: plan checks, the install message, timeline summaries."""

from __future__ import annotations

import builtins

import pytest

from shardwise.errors import ShardwiseError
from shardwise.execute import config_from_job, require_torch
from shardwise.execute.timeline import action_overhead_s, measured_timeline, predict, stage_costs
from shardwise.pipeline import generate_schedule, simulate
from shardwise.specs.job import job_from_mapping

MODEL = {"layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256}


def job(gpus=2, model=None, **parallel):
    return job_from_mapping({
        "model": model or MODEL, "cluster": {"gpu": "H100-SXM", "gpus": gpus},
        "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32"},
        "parallel": {"recompute": "none", **parallel},
    })


def test_config_layout_and_notes():
    cfg = config_from_job(job(gpus=4, dp=2, pp=2, schedule="zb-h1"), steps=2, check=True)
    assert (cfg.dp, cfg.pp, cfg.tp, cfg.world_size, cfg.microbatches) == (2, 2, 1, 4, 4)
    assert cfg.schedule == "zb-h1" and cfg.global_batch == 8
    # TP innermost, then DP, PP outermost
    assert [cfg.coords(r) for r in range(4)] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    bf16 = job_from_mapping({"model": MODEL, "cluster": {"gpu": "H100-SXM", "gpus": 2},
                             "training": {"seq_len": 16, "global_batch": 8}, "parallel": {"tp": 2}})
    notes = " ".join(config_from_job(bf16).notes)
    assert "fp32" in notes and "recompute" in notes


@pytest.mark.parametrize("parallel, gpus, nproc, words", [
    ({"dp": 2}, 2, 4, "--nproc 4 does not match cluster.gpus 2"),
    ({"cp": 2}, 2, None, "context parallelism"),
    ({"tp": 4}, 4, None, "KV heads"),
    ({"pp": 2, "schedule": "interleaved", "vpp": 3}, 2, None, "at least one layer per stage"),
    ({"dp": 4, "tp": 2, "zero": 1}, 8, None, "ZeroRedundancyOptimizer"),
    ({"pp": 2, "schedule": "no-such"}, 2, None, "unknown schedule"),
    ({"dp": 2, "pp": 2, "zero": 3, "schedule": "zbv"}, 4, None, "loses weight gradients"),
])
def test_config_errors_say_what_to_fix(parallel, gpus, nproc, words):
    with pytest.raises(ShardwiseError, match=words):
        config_from_job(job(gpus=gpus, **parallel), nproc=nproc)


def test_without_torch_train_run_says_how_to_install(monkeypatch, tmp_path, capsys):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ShardwiseError, match=r"pip install -e '\.\[exec\]'.*torch==2\.13\.0"):
        require_torch()
    path = tmp_path / "job.yaml"
    path.write_text("model: {layers: 2, hidden: 32, heads: 2, ffn: 64, vocab: 64}\n"
                    "cluster: {gpu: H100-SXM, gpus: 2}\ntraining: {seq_len: 8, global_batch: 4}\n"
                    "parallel: {dp: 2}\n")
    from shardwise.cli.main import main

    assert main(["train", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "needs PyTorch" in err and "torch==2.13.0" in err and "Traceback" not in err


def _rows(spec):
    """Synthetic recorder rows: rank -> list of (kind, stage, mb, start, end)."""
    return [{"actions": acts, "comms": comms} for acts, comms in spec]


def test_measured_timeline_has_the_simulator_shape():
    rows = _rows([
        ([("F", 0, 0, 10.0, 11.0), ("B", 0, 0, 13.0, 15.0)], [("P2P_WAIT", 11.2, 12.9)]),
        ([("F", 1, 0, 11.0, 12.0), ("B", 1, 0, 12.0, 13.0)], []),
    ])
    tl = measured_timeline(rows, "1f1b", 2, 1, 2, 1)
    sim = simulate(generate_schedule("1f1b", 2, 1)).to_dict()
    assert set(sim) - {"p2p_s", "peak_activation", "peak_activation_microbatches",
                       "peak_activation_rank_microbatches"} <= set(tl)
    assert tl["makespan"] == pytest.approx(5.0)
    assert tl["ranks"][0][1] == {"action": "0B0", "stage": 0, "microbatch": 0, "kind": "B", "start": 3.0, "end": 5.0}
    assert tl["rank_busy"] == pytest.approx([3.0, 2.0])
    assert tl["bubble_fraction"] == pytest.approx((10 - 5) / 10)
    # the gap 11..13 on rank 0 is all waiting except 0.3 s
    assert action_overhead_s(rows[:1]) == pytest.approx(0.3)


def test_prediction_from_measured_costs_reproduces_the_simulator():
    sched = generate_schedule("zb-h1", 2, 4)
    sim = simulate(sched, f_s=[1.0, 2.0], i_s=[1.5, 1.0], w_s=0.5)
    rows = [{"actions": [(e["kind"], e["stage"], e["microbatch"], e["start"], e["end"]) for e in rank],
             "comms": []} for rank in sim.to_dict()["ranks"]]
    costs = stage_costs(rows, sched.num_stages)
    assert costs["F"] == pytest.approx([1.0, 2.0]) and costs["W"] == pytest.approx([0.5, 0.5])
    assert "B" not in costs
    assert predict(sched, costs, 0.0).makespan == pytest.approx(sim.makespan)
    assert measured_timeline(rows, "zb-h1", 2, 1, 2, 4)["makespan"] == pytest.approx(sim.makespan)


def test_send_posting_counts_towards_the_action_that_sends():
    row = {"actions": [("F", 0, 0, 0.0, 1.0), ("B", 0, 0, 2.0, 3.0)],
           "comms": [("P2P_POST", 1.0, 1.5), ("P2P_WAIT", 1.5, 1.8)]}
    costs = stage_costs([row], 1)
    assert costs["F"] == pytest.approx([1.5]) and costs["B"] == pytest.approx([1.0])
    assert action_overhead_s([row]) == pytest.approx(0.2)
