"""When nothing fits: the rejections grouped so divisibility is not the headline, the closest plans and by how
much each misses, and the levers that make the job fit, ranked; the search retries with offload."""

import json

import pytest

from shardwise.cli.main import main
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.advice import HARDWARE, SAME_JOB, what_to_change
from shardwise.train.planner import NothingFits, plan_search
from shardwise.train.search_space import REASONS, group_rejections
from shardwise.train.smallest import smallest_fit

GIB = 2**30


def test_groups_put_memory_first_and_divisibility_last():
    rejected = {REASONS["gpus"]: 3_243_520, REASONS["memory"]: 57_224, REASONS["fold"]: 51_584, REASONS["dominated"]: 20_664,
                "not runnable on megatron: something": 7}
    groups = group_rejections(rejected)
    assert [g for g, _, _ in groups][0] == "out of memory"
    assert groups[-1][0].startswith("cannot be laid out") and groups[-1][1] == 3_243_520 + 51_584
    assert sum(n for _, n, _ in groups) == sum(rejected.values())


@pytest.fixture(scope="module")
def llama_on_two_a100_40():
    """Llama-3.1-8B full training on 2 x A100-40GB: mixed-precision Adam states are 18 B x 8.03e9 = 144.5 GB,
    72.3 GB (67.3 GiB) per GPU even fully sharded, over the 38 GiB usable; offloading the optimizer leaves
    weights and gradients, 6 B x 8.03e9 / 2 = 24.1 GB (22.4 GiB) per GPU under ZeRO-3."""
    model, training = load_model("llama-3.1-8b"), TrainingSpec(seq_len=2048, global_batch=16)
    cluster = make_cluster("a100-40gb", 2)
    with pytest.raises(NothingFits) as info:
        plan_search(model, cluster, training)
    return model, training, cluster, info.value


def test_nothing_fits_message_leads_with_memory(llama_on_two_a100_40):
    *_, nf = llama_on_two_a100_40
    text = str(nf)
    assert text.startswith("no plan fits on 2 x A100-40GB: all ") and "need more than 38.0 GiB per GPU" in text
    assert text.index("GiB per GPU") < text.index("divisibility")


def test_advice_closest_plans_and_ranked_levers(llama_on_two_a100_40):
    model, training, cluster, nf = llama_on_two_a100_40
    advice = what_to_change(model, training, nf)
    usable = cluster.usable_memory_bytes / GIB
    closest = advice.closest
    assert closest and [c["peak_memory_gib"] for c in closest] == sorted(c["peak_memory_gib"] for c in closest)
    states_floor = 18 * model.params_total / 2 / GIB  # every state sharded over both GPUs
    for c in closest:
        assert c["misses_by_gib"] == pytest.approx(c["peak_memory_gib"] - usable)
        assert c["peak_memory_gib"] >= states_floor
    levers = {lv.name: lv for lv in advice.levers}
    off = levers["offload optimizer"]
    assert off.fits and off.best.fits and off.best.peak_memory_gib <= usable and off.gpus == 2
    assert off.slowdown > 0 and "slower than the same plan without offload" in off.note
    n, _ = smallest_fit(model, "a100-40gb", training)
    assert levers["more GPUs"].gpus == n > 2 and levers["more GPUs"].best.num_gpus == n
    fitting = [lv for lv in advice.levers if lv.fits]
    assert advice.levers[: len(fitting)] == fitting  # levers that fit come first
    assert [lv.kind for lv in fitting] == sorted(lv.kind for lv in fitting)
    assert fitting[0].kind == SAME_JOB and any(lv.kind == HARDWARE for lv in fitting)
    assert advice.best_offload() is off or advice.best_offload().best.step_time_s <= off.best.step_time_s


def test_cli_retries_with_offload_and_reports_what_it_bought(capsys):
    args = ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--gpus", "2", "--seq-len", "2048",
            "--global-batch", "16", "--top", "1", "--format", "json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    advice = doc["what_to_change"]
    assert advice["searched_with_offload"] in ("optimizer", "optimizer+params")
    assert doc["top"][0]["plan"]["offload"] == advice["searched_with_offload"]
    assert advice["closest"][0]["misses_by_gib"] > 0
    more = next(lv for lv in advice["levers"] if lv["lever"] == "more GPUs")
    assert more["fits"] and more["gpus"] > 2


def test_cli_nothing_fits_even_with_offload_prints_the_levers_and_exits_2(capsys):
    args = ["train", "plan", "--model", "llama-3.1-70b", "--gpu", "l4", "--gpus", "1", "--seq-len", "4096",
            "--global-batch", "8", "--format", "json"]
    assert main(args) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["fits"] is False
    names = [lv["lever"] for lv in doc["what_to_change"]["levers"]]
    assert "more GPUs" in names and not any(lv["fits"] for lv in doc["what_to_change"]["levers"] if lv["lever"].startswith("offload"))
    assert captured.err.startswith("error: no plan fits on 1 x L4") and captured.err.count("\n") == 1
