"""Heterogeneous clusters: the `cluster.groups` spec, layouts over groups, the splits of work, and the
estimate (one GPU type in two groups gives exactly the homogeneous numbers)."""

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cli.main import main
from shardwise.cost.comm import spanning_network
from shardwise.errors import ShardwiseError
from shardwise.pipeline.simulate import simulate
from shardwise.specs.hardware import Cluster, HeteroCluster, make_cluster
from shardwise.specs.hetero import HeteroJob
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate
from shardwise.train.hetero.estimate import hetero_estimate
from shardwise.train.hetero.split import (
    balanced_layer_split,
    batch_splits,
    continuous_batch_split,
    state_shares,
)
from shardwise.train.pipeline_timing import cached_schedule

TRAINING = {"seq_len": 4096, "global_batch": 64, "precision": "bf16"}
KNOBS = {"tp": 8, "micro_batch": 1, "schedule": "1f1b", "zero": 1, "recompute": "selective"}


def mixed(parallel, groups=None, inter=None, model="llama-3.1-8b", training=TRAINING):
    groups = groups or [{"name": "h100", "gpu": "h100-sxm", "nodes": 2}, {"name": "a100", "gpu": "a100-80gb", "nodes": 2}]
    cluster = {"groups": groups} | ({"inter_group_gbps": inter} if inter else {})
    return job_from_mapping({"model": model, "cluster": cluster, "training": training, "parallel": parallel})


# --- spec -----------------------------------------------------------------------------------------------

def test_one_group_is_the_flat_cluster():
    one = job_from_mapping({"model": "llama-3.1-8b", "training": TRAINING, "parallel": {"tp": 8, "pp": 2},
                            "cluster": {"groups": [{"gpu": "h100-sxm", "nodes": 4}]}})
    flat = job_from_mapping({"model": "llama-3.1-8b", "training": TRAINING, "parallel": {"tp": 8, "pp": 2},
                             "cluster": {"gpu": "h100-sxm", "gpus": 32}})
    assert isinstance(one.cluster, Cluster)
    assert one.cluster == flat.cluster
    assert estimate(one).to_dict() == estimate(flat).to_dict()


def test_group_nics_set_the_network():
    j = mixed(KNOBS | {"replicas": {"h100": 1, "a100": 1}, "pp": 2},
              groups=[{"name": "h100", "gpu": "h100-sxm", "nodes": 2, "nic": {"count": 8, "gbps": 400, "kind": "ib"}},
                      {"name": "a100", "gpu": "a100-80gb", "nodes": 2, "nic": {"count": 4, "gbps": 100, "kind": "roce"}}],
              inter=200)
    assert isinstance(j, HeteroJob) and isinstance(j.cluster, HeteroCluster)
    a100 = j.cluster.group("a100").cluster.network
    assert (a100.nics_per_node, a100.nic_gbps, a100.fabric) == (4, 100, "roce")
    assert j.cluster.num_gpus == 32 and j.cluster.inter_group_gbps == 200


@pytest.mark.parametrize(("groups", "parallel", "inter", "says"), [
    ([{"gpu": "h100-sxm", "nodes": 1}, {"gpu": "nope", "nodes": 1}], {}, None, "cluster.groups[1].gpu"),
    ([{"gpu": "h100-sxm", "nodes": 1}, {"gpu": "h100-sxm", "nodes": 1}], {}, None, "cluster.groups[1].name"),
    ([{"gpu": "h100-sxm", "nodes": 1}], {}, 100, "cluster.inter_group_gbps"),
    ([{"gpu": "h100-sxm", "nodes": 0}, {"gpu": "a100-80gb", "nodes": 1}], {}, None, "cluster.groups[0].nodes: Input should be greater than 0"),
    ([{"gpu": "h100-sxm", "nodes": 1, "nic": {"count": 2, "gbps": 100}, "network": {"nic_gbps": 50}},
      {"gpu": "a100-80gb", "nodes": 1}], {}, None, "cluster.groups[0].network.nic_gbps"),
])
def test_cluster_errors_name_the_group_and_field(groups, parallel, inter, says):
    with pytest.raises(ShardwiseError, match=says.replace("[", r"\[").replace("]", r"\]")):
        mixed(KNOBS | {"replicas": {"h100-sxm": 1}} | parallel, groups=groups, inter=inter)


@pytest.mark.parametrize(("parallel", "says"), [
    ({"stage_groups": ["h100", "a100"], "replicas": {"h100": 1}}, "exactly one of them"),
    ({"stage_groups": ["h100", "v100"]}, r"parallel.stage_groups\[1\]: unknown group 'v100'"),
    ({"stage_groups": ["h100", "a100"], "layer_split": [20, 20]}, "parallel.layer_split: sums to 40"),
    ({"stage_groups": ["h100", "a100"], "pp": 3}, "parallel.pp: 3"),
    ({"replicas": {"h100": 1, "a100": 1}, "pp": 2, "batch_split": {"h100": 20, "a100": 20}}, "not the global batch 64"),
    ({"replicas": {"h100": 1, "a100": 1}, "pp": 2, "batch_split": {"h100": 32}}, "missing group a100"),
    ({"replicas": {"h100": 3}, "pp": 2}, "parallel.replicas.h100: the layout puts 48 GPUs"),
    ({"replicas": {"h100": 1, "a100": 1}, "pp": 2, "ep": 2}, "parallel.ep"),
])
def test_layout_errors_name_the_field(parallel, says):
    with pytest.raises(ShardwiseError, match=says):
        mixed(KNOBS | parallel)


def test_tensor_parallel_stays_inside_a_node_of_each_group():
    groups = [{"name": "big", "gpu": "h100-sxm", "nodes": 1}, {"name": "small", "gpu": "a100-80gb", "nodes": 2, "gpus_per_node": 4}]
    with pytest.raises(ShardwiseError, match="parallel.tp: .* group 'small'.*inside one node"):
        mixed(KNOBS | {"replicas": {"big": 1, "small": 1}}, groups=groups)


# --- splits -----------------------------------------------------------------------------------------------

def test_two_stage_split_by_hand():
    # Fast rank 1 s/layer, slow rank 3 s/layer, 8 layers: 6 and 2 layers both take 6 s (any other split is slower).
    assert balanced_layer_split(8, [1.0, 3.0], [0.0, 0.0]) == (6, 2)
    # The slow rank also holds the 2 s LM head: 6.5 would be even, so 7/1 (7 s vs 5 s) beats 6/2 (6 s vs 8 s).
    assert balanced_layer_split(8, [1.0, 3.0], [0.0, 2.0]) == (7, 1)
    # A memory cap of 5 layers on the fast rank: 5/3, 9 s.
    assert balanced_layer_split(8, [1.0, 3.0], [0.0, 0.0], cap=[5, 8]) == (5, 3)


@settings(max_examples=150, deadline=None)
@given(layers=st.integers(1, 12), per=st.lists(st.integers(1, 9), min_size=2, max_size=4), data=st.data())
def test_layer_split_is_the_brute_force_optimum(layers, per, data):
    n = len(per)
    fixed = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    cap = data.draw(st.lists(st.integers(0, layers), min_size=n, max_size=n))
    if sum(cap) < layers:
        with pytest.raises(ShardwiseError, match="do not fit"):
            balanced_layer_split(layers, per, fixed, cap)
        return
    best = min(max(k * c + e for k, c, e in zip(split, per, fixed, strict=True))
               for split in itertools.product(*(range(c + 1) for c in cap)) if sum(split) == layers)
    got = balanced_layer_split(layers, per, fixed, cap)
    assert sum(got) == layers and all(0 <= k <= c for k, c in zip(got, cap, strict=True))
    assert max(k * c + e for k, c, e in zip(got, per, fixed, strict=True)) == best


def test_uneven_batch_split_closed_form():
    # Speeds 1 and 1/2 micro-batch per second, one replica each, 30 micro-batches: T* = 30 / 1.5 = 20 s, 20 and 10.
    t, m = continuous_batch_split(30, [1, 1], [1.0, 2.0])
    assert t == pytest.approx(20.0) and m == pytest.approx([20.0, 10.0])
    # Fill/drain a_g: T* = (M + sum d a / t) / sum d / t = (30 + 4/1 + 0) / 1.5 = 22.667; m = 18.667, 11.333.
    t, m = continuous_batch_split(30, [1, 1], [1.0, 2.0], [4.0, 0.0])
    assert t == pytest.approx(68 / 3) and m == pytest.approx([56 / 3, 34 / 3])
    assert batch_splits(30, [1, 1], [1.0, 2.0]) == [(20, 10)]


@settings(max_examples=100, deadline=None)
@given(total=st.integers(2, 60), reps=st.lists(st.integers(1, 4), min_size=2, max_size=3), data=st.data())
def test_integer_batch_split_is_the_brute_force_optimum(total, reps, data):
    g = len(reps)
    per = data.draw(st.lists(st.integers(1, 9), min_size=g, max_size=g))
    fixed = data.draw(st.lists(st.integers(0, 5), min_size=g, max_size=g))

    def makespan(split):
        return max(a + m * t for a, m, t in zip(fixed, split, per, strict=True))

    every = [s for s in itertools.product(*(range(1, total // d + 1) for d in reps))
             if sum(d * m for d, m in zip(reps, s, strict=True)) == total]
    got = batch_splits(total, reps, per, fixed)
    if not every:
        assert got == []
        return
    assert got and sum(d * m for d, m in zip(reps, got[0], strict=True)) == total
    assert makespan(got[0]) == min(makespan(s) for s in every)


def test_state_shares_fill_memory_evenly():
    # 80 and 40 GiB GPUs, 10 GiB of their own each, 50 GiB sharded over one of each:
    # lambda = (50 + 20) / 120; shares (lambda 80 - 10) / 50 and (lambda 40 - 10) / 50.
    s = state_shares([80.0, 40.0], [10.0, 10.0], 50.0, [1, 1])
    lam = 70 / 120
    assert s == pytest.approx([(lam * 80 - 10) / 50, (lam * 40 - 10) / 50])
    assert 10 + s[0] * 50 == pytest.approx(lam * 80) and 10 + s[1] * 50 == pytest.approx(lam * 40)
    # A group already fuller than the level gets none (water-filling): everything on the other.
    assert state_shares([80.0, 40.0], [10.0, 39.0], 5.0, [1, 1]) == pytest.approx([1.0, 0.0])


# --- network and pipeline ------------------------------------------------------------------------------------

def test_spanning_network_takes_the_slowest_link():
    h, a = make_cluster("h100-sxm", 16).network, make_cluster("a100-80gb", 16, network={"nics_per_node": 4, "nic_gbps": 100}).network
    assert spanning_network([h, h]) == h
    both = spanning_network([h, a], cross_gbps_per_gpu=10.0)
    assert both.nvlink_gbyte_s == min(h.nvlink_gbyte_s, a.nvlink_gbyte_s)
    assert both.nics_per_node * both.nic_gbps / both.gpus_per_node == 10.0
    assert not both.sharp


def test_per_boundary_hops_equal_to_one_hop_give_the_same_timeline():
    sched = cached_schedule("1f1b", 4, 8, 1)
    one = simulate(sched, [1.0, 2.0, 1.5, 1.0], 1.0, 1.0, 0.25)
    per = simulate(sched, [1.0, 2.0, 1.5, 1.0], 1.0, 1.0, [0.25, 0.25, 0.25])
    assert per.makespan == one.makespan and per.rank_spans == one.rank_spans
    slow_link = simulate(sched, [1.0, 2.0, 1.5, 1.0], 1.0, 1.0, [0.25, 3.0, 0.25])
    assert slow_link.makespan > one.makespan


# --- estimate ---------------------------------------------------------------------------------------------------

SAME = [{"name": "a", "gpu": "h100-sxm", "nodes": 2}, {"name": "b", "gpu": "h100-sxm", "nodes": 2}]
SHARED = st.fixed_dictionaries({
    "tp": st.sampled_from([2, 4, 8]),
    "zero": st.sampled_from([0, 1, 3]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "micro_batch": st.sampled_from([1, 2]),
    "schedule": st.sampled_from(["1f1b", "gpipe", "interleaved"]),
})


def _flat(knobs, pp, dp, training=TRAINING):
    return job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100-sxm", "gpus": knobs["tp"] * pp * dp},
                             "training": training, "parallel": knobs | {"pp": pp, "dp": dp}})


@settings(max_examples=12, deadline=None)
@given(knobs=SHARED)
def test_one_gpu_type_in_two_groups_gives_the_homogeneous_estimate(knobs):
    vpp = 2 if knobs["schedule"] == "interleaved" else 1
    knobs = knobs | {"vpp": vpp}
    dp = 16 // knobs["tp"]  # one node of each group per pipeline rank
    pipe = hetero_estimate(mixed(knobs | {"stage_groups": ["a", "b"], "dp": dp, "layer_split": [16, 16]}, groups=SAME))
    data = hetero_estimate(mixed(knobs | {"pp": 2, "replicas": {"a": dp // 2, "b": dp // 2},
                                          "batch_split": {"a": 64 // (dp * knobs["micro_batch"])} | {"b": 64 // (dp * knobs["micro_batch"])}},
                                 groups=SAME))
    flat = estimate(_flat(knobs, 2, dp))
    for h in (pipe, data):
        assert h.step_time_s == flat.step_time_s
        assert h.time_s == flat.time_s
        assert h.peak_memory_gib == flat.peak_memory_gib
        assert h.tokens_per_s == flat.tokens_per_s_per_gpu * flat.num_gpus or h.tokens_per_s == pytest.approx(
            flat.tokens_per_s_per_gpu * flat.num_gpus, rel=1e-15)


@pytest.mark.parametrize("reshard", [False, True])
def test_zero3_keeping_its_gathered_layers_is_the_homogeneous_estimate(reshard):
    """ZeRO-3 with reshard_after_forward off keeps each stage's gathered weights, and under PP its gradients,
    unsharded for the step (cost/stack.keeps_unsharded): both heterogeneous paths count them as the flat
    estimate does."""
    knobs = {"tp": 2, "zero": 3, "recompute": "full", "micro_batch": 1, "schedule": "1f1b", "vpp": 1,
             "reshard_after_forward": reshard}
    dp = 8
    pipe = hetero_estimate(mixed(knobs | {"stage_groups": ["a", "b"], "dp": dp, "layer_split": [16, 16]}, groups=SAME))
    data = hetero_estimate(mixed(knobs | {"pp": 2, "replicas": {"a": dp // 2, "b": dp // 2},
                                          "batch_split": {"a": 64 // dp, "b": 64 // dp}}, groups=SAME))
    flat = estimate(_flat(knobs, 2, dp))
    for h in (pipe, data):
        assert h.peak_memory_gib == pytest.approx(flat.peak_memory_gib, rel=1e-12)
        assert h.step_time_s == pytest.approx(flat.step_time_s, rel=1e-12)


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_low_precision_recipe_is_costed_as_the_homogeneous_estimate(precision):
    """An FP8 job on groups is costed with its recipe (FP8 GEMMs, casts, kept weight copies), as the flat
    estimate costs it: one GPU type in two groups gives the homogeneous numbers."""
    training = TRAINING | {"precision": precision}
    knobs = KNOBS | {"tp": 2}
    pipe = hetero_estimate(mixed(knobs | {"stage_groups": ["a", "b"], "dp": 8, "layer_split": [16, 16]}, groups=SAME,
                                 training=training))
    flat = estimate(_flat(knobs, 2, 8, training))
    assert pipe.step_time_s == pytest.approx(flat.step_time_s, rel=1e-12)
    assert pipe.peak_memory_gib == pytest.approx(flat.peak_memory_gib, rel=1e-12)


def test_faster_gpus_take_more_layers_and_more_micro_batches():
    pipe = hetero_estimate(mixed(KNOBS | {"stage_groups": ["h100", "a100"], "dp": 2}))
    assert pipe.layout.layer_split[0] > pipe.layout.layer_split[1]
    data = hetero_estimate(mixed(KNOBS | {"pp": 2, "replicas": {"h100": 1, "a100": 1}}))
    h100, a100 = data.layout.batch_split
    assert h100 > a100 and h100 + a100 == 64
    even = hetero_estimate(mixed(KNOBS | {"pp": 2, "replicas": {"h100": 1, "a100": 1}, "batch_split": {"h100": 32, "a100": 32}}))
    assert data.step_time_s < even.step_time_s
    assert even.critical_group == "a100"


def test_a_slow_inter_group_link_slows_gradient_reduction():
    knobs = KNOBS | {"pp": 2, "replicas": {"h100": 1, "a100": 1}}
    fast, slow = hetero_estimate(mixed(knobs, inter=3200)), hetero_estimate(mixed(knobs, inter=10))
    assert slow.time_s.dp_comm > fast.time_s.dp_comm
    assert slow.step_time_s > fast.step_time_s


# --- planner ----------------------------------------------------------------------------------------------------

def _plan(groups, **kw):
    from shardwise.specs.job import cluster_from_mapping
    from shardwise.specs.model_ref import load_model
    from shardwise.specs.training import TrainingSpec
    from shardwise.train.hetero.plan import hetero_plan

    model, cluster = load_model("gpt-1.7b"), cluster_from_mapping({"groups": groups})
    training = TrainingSpec(seq_len=2048, global_batch=64, precision="bf16")
    res = hetero_plan(model, cluster, training, max_exact=6, per_group_exact=6, **kw)
    return res, HeteroJob(model, cluster, training, None)


def test_plan_mixes_groups_when_mixing_must_help():
    # Two nodes of the same GPU on one fabric: both together must beat either alone.
    res, job = _plan([{"name": "a", "gpu": "h100-sxm", "nodes": 1}, {"name": "b", "gpu": "h100-sxm", "nodes": 1}])
    alone = max(o.tokens_per_s for o in res.single.values() if o)
    assert res.best.mixed and res.best.tokens_per_s > 1.5 * alone
    assert "adds" in res.comparison()
    # The pick carries its split: `train estimate` of its layout gives the same step.
    e = res.best.estimate
    assert hetero_estimate(replace(job, layout=e.layout)).step_time_s == e.step_time_s


@pytest.mark.parametrize("objective", ["throughput", "cost"])
def test_plan_is_never_worse_than_one_group_alone(objective):
    res, _ = _plan([{"name": "h100", "gpu": "h100-sxm", "nodes": 1},
                 {"name": "a100", "gpu": "a100-80gb", "nodes": 2, "nic": {"count": 1, "gbps": 25, "kind": "roce"}}],
                objective=objective)
    singles = [o for o in res.single.values() if o]
    if objective == "throughput":
        assert res.best.tokens_per_s >= max(o.tokens_per_s for o in singles)
    else:
        assert res.best.usd_per_million_tokens <= min(o.usd_per_million_tokens for o in singles)
    assert res.fastest_group == "h100" and res.largest_group == "a100"
    assert all(o.estimate.fits for o in res.ranked)


def test_trace_shows_the_imbalance_between_gpu_types():
    from shardwise.train.hetero.trace import hetero_events

    even = hetero_estimate(mixed(KNOBS | {"pp": 2, "replicas": {"h100": 1, "a100": 1}, "batch_split": {"h100": 32, "a100": 32}}))
    events = hetero_events(even)
    titles = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert any("replicas on h100" in t for t in titles) and any("replicas on a100" in t for t in titles)
    waits = [e for e in events if e["name"] == "waiting for the slowest pipeline"]
    h100_pid = next(e["pid"] for e in events if e.get("name") == "process_name" and "replicas on h100" in e["args"]["name"])
    # On an even split every H100 rank waits for the A100s; the A100 rank that ends the step does not.
    assert {e["tid"] for e in waits if e["pid"] == h100_pid} == {0, 1}
    assert len([e for e in waits if e["pid"] != h100_pid]) < 2


# --- command line -------------------------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hetero-h100-a100.yaml"


def test_cli_estimate_of_the_example(capsys, tmp_path):
    assert main(["train", "estimate", str(EXAMPLE), "--trace", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "pipeline ranks per GPU type" in out and "A100-80GB" in out
    assert main(["train", "estimate", str(EXAMPLE), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "data" and d["gpus_per_group"] == {"h100": 64, "a100": 128} and d["fits"]
    h100, a100 = d["layout"]["batch_split"]["h100"], d["layout"]["batch_split"]["a100"]
    assert 2 * h100 + 4 * a100 == 512 and h100 > a100
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_cli_plan_on_groups(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "gpt-1.7b", "training": {"seq_len": 2048, "global_batch": 64},
                                   "cluster": {"groups": SAME}}))
    assert main(["train", "plan", str(job), "--format", "json", "--exact-budget", "4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["top"][0]["groups"] == {"a": 16, "b": 16} and "adds" in d["comparison"]
    assert main(["train", "plan", str(job), "--gpu", "h100"]) == 2
    assert "error: --gpu" in capsys.readouterr().err


def test_plan_ranks_the_jobs_own_layout_at_its_estimate(capsys):
    """`train plan` on a job file that gives a layout estimates that layout as `train estimate` does and ranks it
    with the search's options: the answer is never slower than the layout the job gave."""
    assert main(["train", "estimate", str(EXAMPLE), "--format", "json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert main(["train", "plan", str(EXAMPLE), "--format", "json", "--exact-budget", "4", "--no-progress"]) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    given = [o for o in top if o["label"].endswith("(the job's layout)")]
    assert len(given) == 1 and given[0]["tokens_per_s"] == pytest.approx(mine["tokens_per_s"], rel=1e-9)
    assert top[0]["tokens_per_s"] >= mine["tokens_per_s"]


@pytest.mark.parametrize("command", [["train", "export", "--to", "megatron"]])
def test_commands_for_one_gpu_type_refuse_groups(capsys, command):
    assert main([*command[:2], str(EXAMPLE), *command[2:]]) == 2
    err = capsys.readouterr().err
    assert "error: cluster.groups: train export takes a cluster of one GPU type" in err and "train run" in err


def test_estimated_layer_split_is_the_brute_force_best_of_the_simulation():
    from shardwise.train.hetero.estimate import pipeline_estimate

    job = mixed(KNOBS | {"stage_groups": ["h100", "a100"], "dp": 2})
    chosen = hetero_estimate(job)
    steps = {}
    for first in range(1, 32):
        e = pipeline_estimate(job, layer_split=(first, 32 - first))
        if e.fits:
            steps[first] = e.step_time_s
    assert chosen.step_time_s == min(steps.values())
    assert chosen.layout.layer_split[0] > 16  # the H100 takes more layers


@settings(max_examples=100, deadline=None)
@given(cap=st.lists(st.floats(10, 200), min_size=2, max_size=4), data=st.data())
def test_state_shares_sum_to_one_and_level_the_memory(cap, data):
    n = len(cap)
    own = data.draw(st.lists(st.floats(0, 50), min_size=n, max_size=n))
    ranks = data.draw(st.lists(st.integers(1, 16), min_size=n, max_size=n))
    sharded = data.draw(st.floats(1, 500))
    s = state_shares(cap, own, sharded, ranks)
    assert sum(k * x for k, x in zip(ranks, s, strict=True)) == pytest.approx(1.0)
    used = [(u + x * sharded) / c for u, x, c in zip(own, s, cap, strict=True)]
    level = max(used[i] for i in range(n) if s[i] > 0)
    for i in range(n):  # every group holding a share is at the level; one holding none is already at or above it
        assert used[i] == pytest.approx(level) if s[i] > 0 else used[i] >= level - 1e-9


@settings(max_examples=100, deadline=None)
@given(total=st.integers(1, 10_000), reps=st.lists(st.integers(1, 64), min_size=1, max_size=4), data=st.data())
def test_equal_finish_split_adds_up_and_finishes_together(total, reps, data):
    g = len(reps)
    per = data.draw(st.lists(st.floats(0.01, 10), min_size=g, max_size=g))
    fixed = data.draw(st.lists(st.floats(0, 5), min_size=g, max_size=g))
    t, m = continuous_batch_split(total, reps, per, fixed)
    assert sum(d * x for d, x in zip(reps, m, strict=True)) == pytest.approx(total)
    assert [a + x * c for a, x, c in zip(fixed, m, per, strict=True)] == pytest.approx([t] * g)


def test_the_docs_figures_are_the_codes():
    """docs/hetero.md and the README quote the example's plans, pick, bandwidth sweep and pipeline as
    scripts/hetero_docs.py renders them now (run it after a refit)."""
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "scripts"))
    try:
        import hetero_docs
    finally:
        sys.path.remove(str(root / "scripts"))
    for path in hetero_docs.FILES:
        text = path.read_text()
        assert hetero_docs.BLOCK.search(text), path
        assert hetero_docs.refresh(text) == text, f"{path.name} is out of date: run python scripts/hetero_docs.py"
