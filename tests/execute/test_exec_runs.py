"""Plans executed for real on CPU (gloo, 2-4 processes): numerics against a single-process reference.

Tolerances (fp32, max-norm relative difference per tensor) are the executor's own:
``reference.LOSS_RTOL``, ``GRAD_RTOL_FIRST`` (first step, identical weights) and ``GRAD_RTOL`` (later
steps, after AdamW updates). No test asserts a wall-clock time.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from shardwise.errors import ShardwiseError  # noqa: E402
from shardwise.execute import config_from_job, run_plan  # noqa: E402
from shardwise.execute.model import build_model, split_layers, stage_module  # noqa: E402
from shardwise.execute.reference import GRAD_RTOL_FIRST  # noqa: E402
from shardwise.specs.job import job_from_mapping  # noqa: E402
from shardwise.specs.model_ref import load_model  # noqa: E402

MODEL = {"layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256}


def job(gpus, **parallel):
    return job_from_mapping({
        "model": MODEL, "cluster": {"gpu": "H100-SXM", "gpus": gpus},
        "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32"},
        "parallel": {"recompute": "none", **parallel},
    })


def run(gpus, steps=2, **parallel):
    cfg = config_from_job(job(gpus, **parallel), steps=steps, check=True, timeout_s=180)
    return run_plan(cfg)


def assert_passes(report):
    chk = report["check"]
    assert chk["passed"], chk
    assert not chk["missing_grads"]
    assert chk["grad_first_step_max_rel_diff"] <= GRAD_RTOL_FIRST
    assert [s["loss"] for s in report["steps"]] == pytest.approx(chk["reference_losses"], rel=1e-5)


@pytest.mark.parametrize("spec", [
    {"layers": 3, "hidden": 48, "heads": 6, "kv_heads": 2, "ffn": 96, "vocab": 100, "mlp": "swiglu"},
    {"layers": 2, "hidden": 32, "heads": 4, "ffn": 128, "vocab": 50, "mlp": "gelu", "norm": "layernorm",
     "linear_bias": True, "position_embeddings": 16, "tied_embeddings": True},
])
def test_model_matches_the_spec_parameter_count_and_is_deterministic(spec):
    ms = load_model(spec)
    a, b = build_model(ms, seed=3), build_model(ms, seed=3)
    assert sum(p.numel() for p in a.parameters()) == ms.params_total
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(iter(build_model(ms, seed=4).parameters())), next(iter(a.parameters())))


def test_stages_partition_the_model_with_unchanged_names():
    full = build_model(load_model(MODEL))
    assert split_layers(5, 2) == [[0, 1, 2], [3, 4]]
    names = [n for s in range(4) for n, _ in stage_module(full, s, 4).named_parameters()]
    assert sorted(names) == sorted(n for n, _ in full.named_parameters())


@pytest.mark.parametrize("parallel", [
    {"dp": 2, "zero": 1},
    {"dp": 2, "zero": 3},
    {"tp": 2},
    {"pp": 2, "schedule": "gpipe"},
    {"pp": 2, "schedule": "1f1b"},
    {"pp": 2, "schedule": "interleaved", "vpp": 2},
    {"pp": 2, "schedule": "zb-h1"},
], ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_two_process_layouts_match_the_reference(parallel):
    report = run(2, **parallel)
    assert_passes(report)
    if parallel.get("pp"):
        assert f"IR '{parallel['schedule']}' (CSV) executed by torch _PipelineScheduleRuntime" in report["schedule_source"]
        kinds = {e["kind"] for row in report["timeline"]["measured"]["ranks"] for e in row}
        assert kinds == ({"F", "I", "W"} if parallel["schedule"] == "zb-h1" else {"F", "B"})
    full_bytes = 4 * load_model(MODEL).params_total
    m = report["memory"][0]
    if parallel.get("zero") == 3:  # FSDP shards parameters, gradients and momentum over DP
        assert m["params_bytes"] == m["grads_bytes"] == m["optimizer_bytes"]
        assert m["params_bytes"] == pytest.approx(full_bytes / 2, rel=0.01)
    if parallel.get("zero") == 1:  # ZeRO-1 shards the momentum only
        assert m["params_bytes"] == full_bytes and m["optimizer_bytes"] < 0.75 * full_bytes


def test_dp2_x_pp2_on_four_processes_matches_the_reference():
    report = run(4, dp=2, pp=2, zero=1, schedule="1f1b")
    assert_passes(report)
    assert {(m["pp"], m["dp"]) for m in report["memory"]} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # ZeRO-1: each DP rank keeps about half of its stage's momentum
    m0 = report["memory"][0]
    assert m0["optimizer_bytes"] < 0.75 * m0["params_bytes"]


def test_gradients_not_reduced_across_dp_fail_the_check(tmp_path, capsys):
    from shardwise.cli.main import main

    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": MODEL, "cluster": {"gpu": "H100-SXM", "gpus": 2},
                                "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32"},
                                "parallel": {"dp": 2, "zero": 0}}))
    code = main(["train", "run", str(path), "--steps", "2", "--check", "--format", "json",
                 "--inject-fault", "skip-dp-grad-reduce"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 1 and "--check failed" in captured.err  # a failed check: status 1 (user errors: 2)
    chk = out["check"]
    assert not chk["passed"]
    assert chk["grad_first_step_max_rel_diff"] > 1e-2
    assert "not reduced" in out["fault"]


def test_torch_fallback_classes_exist():
    from torch.distributed.pipelining import schedules

    from shardwise.execute.runners import TORCH_CLASSES
    from shardwise.pipeline import list_schedules

    assert set(TORCH_CLASSES) <= set(list_schedules())
    assert all(hasattr(schedules, cls) for cls in TORCH_CLASSES.values())


def test_cli_zbv_with_calibration_timeline_plot_and_trace(tmp_path, capsys, load_trace):
    from shardwise.cli.main import main

    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": MODEL, "cluster": {"gpu": "H100-SXM", "gpus": 2},
                                "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32"},
                                "parallel": {"pp": 2, "schedule": "zbv", "recompute": "none"}}))
    tl, png, trace = tmp_path / "tl.json", tmp_path / "tl.png", tmp_path / "trace.json"
    code = main(["train", "run", str(path), "--nproc", "2", "--steps", "2", "--check", "--calibrate",
                 "--timeline", str(tl), "--plot", str(png), "--trace", str(trace), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["check"]["passed"] and "zbv" in out["schedule_source"]
    mk = out["makespan"]
    assert mk["calibrated"] and mk["measured_s"] > 0 and mk["predicted_s"] > 0 and mk["p2p_s"] > 0
    assert set(mk["stage_costs_s"]) == {"F", "I", "W"} and len(mk["stage_costs_s"]["F"]) == 4
    data = json.loads(tl.read_text())
    assert len(data["measured"]["ranks"]) == 2 and len(data["predicted"]["ranks"]) == 2
    # every F/I/W of 4 stages x 8 micro-batches was recorded, V placement: rank 0 holds stages 0 and 3
    assert sum(len(r) for r in data["measured"]["ranks"]) == 3 * 4 * 8
    assert {e["stage"] for e in data["measured"]["ranks"][0]} == {0, 3}
    assert png.stat().st_size > 0
    measured, predicted = load_trace(trace).values()  # process 1 measured, 2 predicted; a track per rank
    for proc, timeline in ((measured, data["measured"]), (predicted, data["predicted"])):
        assert sorted(proc["threads"].values()) == ["rank 0", "rank 1"] and len(proc["counters"]) == 2
        for r in (0, 1):
            compute = [e for e in proc["slices"][r] if e["cat"] == "compute"]
            assert [e["args"]["action"] for e in compute] == [a["action"] for a in timeline["ranks"][r]]
            assert sum(e["dur"] for e in compute) / 1e6 == pytest.approx(timeline["rank_busy"][r], rel=1e-5)
    assert {e["name"] for s in measured["slices"].values() for e in s if e["cat"] == "communication"} \
        <= {"P2P_POST", "P2P_WAIT", "REDUCE_GRAD"}


def test_cli_without_calibration_says_the_prediction_is_not_calibrated(tmp_path, capsys):
    from shardwise.cli.main import main

    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": MODEL, "cluster": {"gpu": "H100-SXM", "gpus": 2},
                                "training": {"seq_len": 16, "global_batch": 4, "precision": "fp32"},
                                "parallel": {"pp": 2, "schedule": "1f1b", "recompute": "none"}}))
    code = main(["train", "run", str(path), "--nproc", "2", "--steps", "1", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and not out["makespan"]["calibrated"]
    assert any("not calibrated" in n for n in out["notes"])


def test_a_failing_worker_raises_its_error_and_stops_the_others():
    cfg = config_from_job(job(2, dp=2), steps=1, fault="crash-last-rank", timeout_s=120)
    with pytest.raises(ShardwiseError, match=r"rank 1 of 2 failed: RuntimeError: injected fault: rank 1 crashed"):
        run_plan(cfg)


def test_nccl_without_gpus_is_a_clear_error():
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs for NCCL")
    cfg = config_from_job(job(2, dp=2), steps=1, backend="nccl")
    with pytest.raises(ShardwiseError, match="use --backend gloo"):
        run_plan(cfg)


def hetero_job(layers, parallel):
    groups = [{"name": "fast", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
              {"name": "slow", "gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 1}]
    return job_from_mapping({"model": {**MODEL, "layers": layers}, "cluster": {"groups": groups},
                             "training": {"seq_len": 16, "global_batch": 8, "precision": "fp32"},
                             "parallel": {"recompute": "none", "zero": 0, **parallel}})


@pytest.mark.parametrize(("layers", "parallel", "described"), [
    (6, {"stage_groups": ["fast", "slow"], "layer_split": [4, 2], "schedule": "1f1b"}, "layers=4/2"),
    (4, {"replicas": {"fast": 1, "slow": 1}, "batch_split": {"fast": 6, "slow": 2}}, "micro_batch=1x[6/2] per DP rank"),
], ids=["uneven-pp", "uneven-dp"])
def test_uneven_heterogeneous_layouts_match_the_reference(layers, parallel, described):
    cfg = config_from_job(hetero_job(layers, parallel), steps=2, check=True, timeout_s=180)
    assert described in cfg.describe() and cfg.global_batch == 8
    report = run_plan(cfg)
    assert_passes(report)
    if "layer_split" in parallel:  # the rank with twice the layers holds more and works longer
        m = {r["pp"]: r["params_bytes"] for r in report["memory"]}
        assert m[0] > m[1]


def test_uneven_layouts_the_executor_cannot_run_are_refused():
    with pytest.raises(ShardwiseError, match="parallel.layer_split: train run splits layers unevenly with one stage per rank"):
        config_from_job(hetero_job(8, {"stage_groups": ["fast", "slow"], "layer_split": [6, 2], "schedule": "interleaved",
                                       "vpp": 2}))
    with pytest.raises(ShardwiseError, match="parallel.batch_split: train run runs an uneven batch split with pp = 1"):
        config_from_job(job(4, dp=2, pp=2, schedule="1f1b"), dp_microbatches=(3, 1))
