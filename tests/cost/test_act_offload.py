"""Activation offload (parallel.offload_activations; cost/act_offload.py, PipeOffload, Wan et al. 2025): the
cost rule's properties, the estimate's time row, memory and host-memory use, and the plan field's checks."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.act_offload import activation_offload, offloaded_peak, selective_shares
from shardwise.errors import ShardwiseError
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate

GIB = 2**30


def _job(share, gpu="h100", gpus=8, model="llama-3.1-8b", pp=4, schedule="1f1b", link=None, seq=4096, batch=32,
         policy="uniform"):
    cluster = {"gpu": gpu, "gpus": gpus} | ({"host": {"link_gbyte_s": link}} if link else {})
    return job_from_mapping({"model": model, "cluster": cluster, "training": {"seq_len": seq, "global_batch": batch},
                             "parallel": {"tp": 1, "pp": pp, "dp": gpus // pp, "schedule": schedule, "recompute": "none",
                                          "offload_activations": share, "offload_activations_policy": policy}})


def test_nothing_changes_at_share_zero():
    o = activation_offload(0.0, 10 * GIB, [2 * GIB], [[0.0]], 1.0, 8, 1.0)
    assert (o.peak_bytes, o.host_bytes, o.exposed_s) == (10 * GIB, 0.0, 0.0)


def test_memory_rule_keeps_one_microbatch_in_flight():
    o = activation_offload(1.0, 10 * GIB, [2 * GIB], [[5.0]], 64.0, 8, 100.0)
    assert o.peak_bytes == pytest.approx(2 * GIB) and o.host_bytes == pytest.approx(8 * GIB)
    half = activation_offload(0.5, 10 * GIB, [2 * GIB], [[5.0]], 64.0, 8, 100.0)
    assert half.peak_bytes == pytest.approx(6 * GIB)


def test_fully_hidden_with_a_long_forward_to_backward_gap():
    long_gap = activation_offload(1.0, 8 * GIB, [GIB], [[10.0] * 4], 1.0, 4, 1e3)
    assert long_gap.exposed_s == 0.0
    no_gap = activation_offload(1.0, 8 * GIB, [GIB], [[0.0] * 4], 1.0, 4, 1e3)
    assert no_gap.exposed_s == pytest.approx(4 * 2 * GIB / 1e9)  # both crossings of every micro-batch exposed


def test_link_throughput_bounds_the_step():
    o = activation_offload(1.0, 8 * GIB, [GIB], [[1e9]], 1.0, 100, 10.0)
    assert o.exposed_s == pytest.approx(100 * GIB / 1e9 - 10.0)


def test_offloaded_states_share_the_link():
    """The link carries the offloaded states' copies too (ZeRO-2/3 gradient sums, offloaded parameters): the
    activation copies are charged what the sum exposes beyond what the states' copies alone would."""
    args = (1.0, 8 * GIB, [GIB], [[1e9]], 1.0, 50, 100.0)  # 50 copies of 1 GiB: 53.7 s on a 1 GB/s link
    assert activation_offload(*args).exposed_s == 0.0
    busy = activation_offload(*args, shared_bytes=80e9)  # with 80 GB of state copies: 133.7 s of traffic
    assert busy.exposed_s == pytest.approx(50 * GIB / 1e9 + 80.0 - 100.0)
    saturated = activation_offload(*args, shared_bytes=150e9)  # the states alone already overflow the window
    assert saturated.exposed_s == pytest.approx(50 * GIB / 1e9)


def test_estimate_charges_activation_copies_for_the_states_on_the_same_link():
    """ZeRO-2 with the optimizer offloaded moves every micro-batch's gradient sum over the host link: on a
    slow link the activation copies expose more than with no state offload (the optimizer's own time apart)."""
    def job(offload):
        return job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8, "host": {"link_gbyte_s": 16}},
                                 "training": {"seq_len": 4096, "global_batch": 64},
                                 "parallel": {"tp": 1, "pp": 8, "dp": 1, "zero": 2, "schedule": "interleaved", "vpp": 2,
                                              "recompute": "none", "offload": offload, "offload_activations": 0.3,
                                              "offload_activations_policy": "selective"}})
    alone, shared = estimate(job("none")), estimate(job("optimizer"))
    assert shared.time_s.act_offload > alone.time_s.act_offload


def test_estimate_peak_falls_and_overhead_does_not_fall_with_the_share():
    shares = (0.0, 0.25, 0.5, 0.75, 1.0)
    est = [estimate(_job(x, link=4.0)) for x in shares]  # a slow link: some of the copy shows
    peaks = [e.memory.activations for e in est]
    exposed = [e.time_s.act_offload for e in est]
    assert all(a > b for a, b in zip(peaks, peaks[1:], strict=False))
    assert all(b >= a for a, b in zip(exposed, exposed[1:], strict=False)) and exposed[-1] > 0
    for e in est:
        assert e.time_s.total == pytest.approx(e.step_time_s)
    assert est[0].host_memory is None and est[-1].host_memory["activations_gib"] > 0


def test_fast_link_hides_the_offload_and_host_memory_counts_it():
    e = estimate(_job(0.5, link=200))
    base = estimate(_job(0.0, link=200))
    assert e.time_s.act_offload == 0.0 and e.step_time_s == pytest.approx(base.step_time_s)
    h = e.to_dict()["host_memory"]
    assert h["activations_gib"] > 0 and h["dram_used_gib"] == pytest.approx(h["activations_gib"])
    assert e.to_dict()["time_s"]["act_offload"] == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_share_is_validated(bad):
    with pytest.raises(ShardwiseError, match="offload_activations"):
        _job(bad)


def test_planner_carries_the_share_and_screens_its_memory():
    from shardwise.api import plan

    common = {"model": "llama-3.1-8b", "gpu": "h100", "gpus": 8, "seq_len": 8192, "global_batch": 64, "top": 1, "max_exact": 4}
    base = plan(**common, max_memory_gib=30.0)
    off = plan(**common, max_memory_gib=30.0, fixed={"offload_activations": 1.0})
    assert off.top[0].plan["offload_activations"] == 1.0
    assert off.top[0].peak_memory_gib <= 30.0
    assert off.top[0].step_time_s <= base.top[0].step_time_s * 1.0001  # more room: a plan at least as fast


def _engine_job(share, pp=1, recompute="none", policy="uniform", tp=None):
    return job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8},
                             "training": {"seq_len": 4096, "global_batch": 16},
                             "parallel": {"tp": tp or 8 // pp, "pp": pp, "dp": 8 // pp // (tp or 8 // pp),
                                          "recompute": recompute, "offload_activations": share,
                                          "offload_activations_policy": policy}})


def test_megatron_exports_the_nearest_layer_count_and_refuses_pp_and_recompute():
    from shardwise.engines.support import job_verdict
    from shardwise.handoff import export_train

    args = export_train(_engine_job(0.4), "megatron").args
    assert args[args.index("--cpu-offloading-num-layers") + 1] == "13"  # 0.4 x 32 layers
    assert not job_verdict(_engine_job(0.4, pp=2), "megatron").runnable
    assert not job_verdict(_engine_job(0.4, recompute="selective"), "megatron").runnable
    assert not job_verdict(_engine_job(1.0), "megatron").runnable  # all 32 layers: Megatron offloads fewer


def test_torchtitan_refuses_and_deepspeed_takes_cpu_checkpointing():
    from shardwise.engines.support import job_verdict
    from shardwise.handoff import export_train

    assert not job_verdict(_engine_job(0.5), "torchtitan").runnable
    assert not job_verdict(_engine_job(0.5, recompute="full"), "deepspeed").runnable
    ok = _engine_job(1.0, pp=1, recompute="full")
    assert job_verdict(ok, "deepspeed").runnable
    out = export_train(ok, "deepspeed")
    assert json.loads(out.config_file[1])["activation_checkpointing"]["cpu_checkpointing"] is True


def test_screen_memory_rule_is_the_estimates():
    """The planner's screen applies the estimate's memory rule (cost/act_offload.py offloaded_peak)."""
    import numpy as np

    from shardwise.cost.constants import default_constants
    from shardwise.specs.hardware import make_cluster
    from shardwise.specs.model_ref import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.planner import job_from_plan
    from shardwise.train.screen import ScreenOptions, screen
    from shardwise.train.search_space import enumerate_plans

    model, cluster, tr = load_model("llama-3.1-8b"), make_cluster("h100", 16), TrainingSpec(seq_len=4096, global_batch=64)
    c = enumerate_plans(model, cluster, tr, ("1f1b", "gpipe", "zb-h1"), {"recompute": "none", "zero": 1, "tp": 2})
    mem = screen(c, model, cluster, tr, default_constants(), options=ScreenOptions(offload_activations=0.6))["memory_bytes"]
    for i in np.linspace(0, len(c) - 1, 4).astype(int):
        e = estimate(job_from_plan(model, cluster, tr, {**c.plan_dict(int(i)), "offload_activations": 0.6}))
        assert mem[i] / GIB == pytest.approx(e.peak_memory_gib, rel=0.01)  # the screen is as close at share 0


def test_host_memory_check_counts_offloaded_activations():
    job = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8, "host": {"dram_gib": 16}},
                            "training": {"seq_len": 8192, "global_batch": 64},
                            "parallel": {"tp": 1, "pp": 8, "dp": 1, "recompute": "none", "offload_activations": 1.0}})
    e = estimate(job)
    assert not e.fits and e.misfit.startswith("host memory: offloaded activations need")


def test_no_fit_advice_offers_activation_offload():
    """Llama-3.1-8B at 32K on 8 H100 without recompute, tp 1: no plan fits (activations); offloading them does."""
    from shardwise.specs.hardware import make_cluster
    from shardwise.specs.model_ref import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.advice import SAME_JOB, what_to_change
    from shardwise.train.planner import NothingFits, plan_search

    model, training, cluster = load_model("llama-3.1-8b"), TrainingSpec(seq_len=32768, global_batch=16), make_cluster("h100", 8)
    fixed = {"recompute": "none", "tp": 1, "cp": 1}
    with pytest.raises(NothingFits) as info:
        plan_search(model, cluster, training, fixed=fixed)
    levers = {lv.name: lv for lv in what_to_change(model, training, info.value, fixed).levers}
    lever = levers["activation offload"]
    assert lever.fits and lever.kind == SAME_JOB and lever.best.plan["offload_activations"] == 1.0
    assert lever.slowdown is not None and lever.slowdown >= 0.0


_ranks = st.lists(st.tuples(st.floats(0.1, 100.0), st.floats(0.0, 1.0)), min_size=1, max_size=16)


@settings(max_examples=200, deadline=None)
@given(_ranks, st.floats(0.0, 1.0))
def test_selective_shares_offload_the_same_bytes_with_the_lowest_largest_peak(ranks, share):
    """Water filling: the selective shares offload exactly `share` of the pipeline's offloadable bytes, each
    within [0, 1], and leave the largest rank's peak no higher than the uniform share does (it is the
    allocation of those bytes that minimises the largest peak)."""
    peaks = np.array([p for p, _ in ranks])
    floors = np.array([p * f for p, f in ranks])
    x = np.array(selective_shares(share, peaks, floors))
    assert ((x >= 0.0) & (x <= 1.0 + 1e-12)).all()
    room = peaks - floors
    assert float((x * room).sum()) == pytest.approx(share * float(room.sum()), rel=1e-9, abs=1e-9)
    selective = offloaded_peak(x, peaks, floors).max()
    assert selective <= offloaded_peak(share, peaks, floors).max() + 1e-9
    more = np.array(selective_shares(min(1.0, share + 0.1), peaks, floors))
    assert (more >= x - 1e-9).all()  # a larger share takes more from every rank, never less


def test_selective_copies_only_what_saves_memory():
    """One rank without pipelining holds one micro-batch, which stays in flight: offloading saves nothing, so
    the selective policy copies nothing (same memory, no copy time) where the uniform one pays for copies.
    Pipelined (1F1B, pp 4): the same share brings the largest rank's peak lower than spread uniformly, and at
    share 1 the last stage (one micro-batch in flight, nothing to save) is not copied."""
    uniform, selective = (estimate(_job(0.5, pp=1, gpus=1, batch=8, seq=2048, policy=p)) for p in ("uniform", "selective"))
    assert selective.peak_memory_gib == uniform.peak_memory_gib
    assert selective.time_s.act_offload == 0.0 < uniform.time_s.act_offload
    peak = {p: max(m.activations for m in estimate(_job(0.5, policy=p)).memory_per_rank) for p in ("uniform", "selective")}
    assert peak["selective"] < peak["uniform"]
    full = {p: estimate(_job(1.0, policy=p)) for p in ("uniform", "selective")}
    assert full["selective"].time_s.act_offload <= full["uniform"].time_s.act_offload
    assert max(m.activations for m in full["selective"].memory_per_rank) == pytest.approx(
        max(m.activations for m in full["uniform"].memory_per_rank))


def test_deepspeed_refuses_the_selective_policy_with_pipeline_parallelism():
    """DeepSpeed's cpu_checkpointing offloads on every stage alike: selective is refused with pp > 1 and
    takes the uniform policy's place at pp 1 (one rank: the same plan)."""
    from shardwise.engines.support import job_verdict

    verdict = job_verdict(_engine_job(1.0, pp=4, recompute="full", policy="selective", tp=1), "deepspeed")
    assert not verdict.runnable and "per-stage" in verdict.line()
    assert job_verdict(_engine_job(1.0, pp=4, recompute="full", tp=1), "deepspeed").runnable
    assert job_verdict(_engine_job(1.0, pp=1, recompute="full", policy="selective"), "deepspeed").runnable
