"""Offload below HBM: what lives in host DRAM and on NVMe (ZeRO-Offload, ZeRO-Infinity), the host-memory
check of an estimate and of the planner, NVMe pricing, and the exports (docs/offload.md)."""

import json

import pytest

from shardwise.cost.constants import default_constants
from shardwise.cost.step import NVME_OPTIMIZER_SUB_GROUP, NVME_PARAM_BUFFER_ELEMENTS, host_state_bytes, optimizer_step_s
from shardwise.engines.support import job_verdict
from shardwise.errors import ShardwiseError
from shardwise.handoff import export_train
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate
from shardwise.train.planner import NothingFits, plan_search
from shardwise.train.search_space import REASONS


def _job(parallel, host=None, gpu="h100", gpus=8, model="llama-3.1-8b"):
    cluster = {"gpu": gpu, "gpus": gpus} | ({"host": host} if host else {})
    return job_from_mapping({"model": model, "cluster": cluster, "training": {"seq_len": 4096, "global_batch": 8},
                             "parallel": parallel})


def test_host_bytes_by_device():
    """CPU: fp32 master + Adam moments + the gradient partition (+ 16-bit weights) in DRAM (ZeRO-Offload Sec. 4);
    NVMe: the same bytes on the drives, DRAM keeps DeepSpeed's staging buffers."""
    cpu = host_state_bytes(1e9, 2e9, "optimizer+params", "cpu", 2.0, 4.0, 12.0)
    assert cpu.dram == 1e9 * 16 + 2e9 * 2 and cpu.nvme == 0
    nvme = host_state_bytes(3e9, 3e9, "optimizer+params", "nvme", 2.0, 4.0, 12.0)
    assert nvme.nvme == 3e9 * 16 + 3e9 * 2
    assert nvme.dram == NVME_OPTIMIZER_SUB_GROUP * 16 + NVME_PARAM_BUFFER_ELEMENTS * 2
    assert host_state_bytes(1e9, 1e9, "none", "cpu", 2.0, 4.0, 12.0).dram == 0


def test_nvme_optimizer_step_is_the_slower_of_cpu_adam_and_the_drives():
    c = default_constants()
    cpu = optimizer_step_s(c, 1e9, 1e12, "optimizer", 63.0, 2.0, 4.0, 8)
    slow_drives = optimizer_step_s(c, 1e9, 1e12, "optimizer", 63.0, 2.0, 4.0, 8, "nvme", (1.0, 1.0), 12.0)
    fast_drives = optimizer_step_s(c, 1e9, 1e12, "optimizer", 63.0, 2.0, 4.0, 8, "nvme", (1e6, 1e6), 12.0)
    grad_copy = 1e9 * 4.0 / (63e9 * c.step.pcie_efficiency)  # no backward given: the copy is not overlapped
    # the parameter copy back runs during the (drive-bound) step (ZeRO-Offload Sec. 5.1): not added
    assert slow_drives == pytest.approx(grad_copy + 8 * 1e9 * 12.0 * 2 / 1e9)
    assert fast_drives == pytest.approx(cpu)


def test_estimate_reports_host_memory_and_refuses_when_it_is_exceeded():
    ok = estimate(_job({"zero": 2, "offload": "optimizer"}))
    h = ok.host_memory
    assert ok.fits and h["device"] == "cpu" and h["gpus_per_node"] == 8
    assert h["dram_available_gib"] == pytest.approx(2048 * 0.9)  # DGX H100: 2 TB less the 10% reserve
    assert h["dram_used_gib"] == pytest.approx(8 * 8.03e9 / 8 * 16 / 2**30, rel=0.01)  # 16 B per parameter, node-wide
    small = estimate(_job({"zero": 2, "offload": "optimizer"}, host={"dram_gib": 64}))
    assert not small.fits and small.misfit.startswith("host memory")
    assert "GiB per node" in small.misfit and small.to_dict()["misfit"] == small.misfit
    assert estimate(_job({"zero": 2})).host_memory is None


def test_host_memory_unknown_is_noted_not_checked():
    e = estimate(_job({"zero": 2, "offload": "optimizer"}, gpu="h100-pcie"))
    assert e.fits and e.host_memory["dram_available_gib"] is None
    assert any("host memory not checked" in n for n in e.notes)


def test_planner_rejects_plans_beyond_host_memory_by_name():
    job = _job({"zero": 2}, host={"dram_gib": 16})
    with pytest.raises(NothingFits) as err:
        plan_search(job.model, job.cluster, job.training, fixed={"offload": "optimizer"})
    assert err.value.rejected.get(REASONS["host_memory"], 0) > 0
    found = plan_search(job.model, job.cluster.model_copy(update={"host_spec": None}), job.training, fixed={"offload": "optimizer"})
    assert found.top and all(e.fits for e in found.top)


def test_nvme_offload_is_priced_and_checked_against_the_drives():
    cpu = estimate(_job({"zero": 3, "offload": "optimizer+params"}))
    nvme = estimate(_job({"zero": 3, "offload": "optimizer+params", "offload_device": "nvme"}))
    # 8B over 8 H100s: CPU Adam (shared by the node's GPUs) is slower than the drives, so the step's optimizer
    # time holds; the parameters streamed from NVMe (the GPU's share of the drives' read bandwidth) cost more
    assert nvme.time_s.optimizer >= cpu.time_s.optimizer and nvme.time_s.dp_comm > cpu.time_s.dp_comm
    assert nvme.host_memory["nvme_used_tb"] > 0 and nvme.host_memory["nvme_available_tb"] == pytest.approx(30.72)
    assert nvme.host_memory["dram_used_gib"] < cpu.host_memory["dram_used_gib"]
    full = estimate(_job({"zero": 3, "offload": "optimizer+params", "offload_device": "nvme"}, host={"nvme_tb": 0.1}))
    assert not full.fits and full.misfit.startswith("NVMe")


@pytest.mark.parametrize("parallel,host,gpu,message", [
    ({"zero": 2, "offload": "optimizer", "offload_device": "nvme"}, None, "h100", "needs zero: 3"),
    ({"zero": 3, "offload_device": "nvme"}, None, "h100", "set offload: optimizer"),
    ({"zero": 3, "offload": "optimizer", "offload_device": "nvme"}, None, "h100-pcie", "cluster.host.nvme_tb"),
    ({"zero": 3, "offload": "optimizer", "offload_device": "ssd"}, None, "h100", "parallel.offload_device"),
])
def test_bad_nvme_plans_say_how_to_fix_them(parallel, host, gpu, message):
    with pytest.raises(ShardwiseError, match=message):
        _job(parallel, host, gpu)


def test_deepspeed_export_writes_nvme_offload_and_others_refuse_it():
    job = _job({"zero": 3, "offload": "optimizer+params", "offload_device": "nvme"})
    exp = export_train(job, "deepspeed")
    zero = json.loads(exp.config_file[1])["zero_optimization"]
    for key in ("offload_optimizer", "offload_param"):
        assert zero[key]["device"] == "nvme" and zero[key]["nvme_path"]
    cpu = json.loads(export_train(_job({"zero": 3, "offload": "optimizer+params"}), "deepspeed").config_file[1])["zero_optimization"]
    assert cpu["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert job_verdict(job, "deepspeed").runnable
    assert not job_verdict(job, "torchtitan").runnable and not job_verdict(job, "megatron").runnable
    assert "NVMe" in job_verdict(job, "torchtitan").reason or "nvme" in job_verdict(job, "torchtitan").reason.lower()


def test_cli_names_host_memory_when_it_is_why_nothing_fits(tmp_path, capsys):
    from shardwise.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text("model: llama-3.1-8b\ncluster: {gpu: h100, gpus: 8, host: {dram_gib: 64}}\n"
                    "training: {seq_len: 4096, global_batch: 8}\nparallel: {zero: 2, offload: optimizer}\n")
    assert main(["train", "plan", str(path)]) != 0
    err = capsys.readouterr().err
    assert "offload more than a node's host DRAM (64 GiB)" in err
    assert main(["train", "estimate", str(path), "--format", "json"]) == 0  # an estimate that does not fit is still printed
    doc = json.loads(capsys.readouterr().out)
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["fits"] is False and doc["misfit"].startswith("host memory") and doc["host_memory"]["dram_available_gib"] < 64


def test_when_host_dram_is_the_limit_the_planner_falls_back_to_nvme(tmp_path, capsys):
    """Llama-3.1-70B on 8 H100 with 256 GiB of host DRAM: offloading to host memory cannot hold 70B x 16 B,
    the NVMe lever can; the search retries with it and says so."""
    from shardwise.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text("model: llama-3.1-70b\ncluster: {gpu: h100, gpus: 8, host: {dram_gib: 256}}\n"
                    "training: {seq_len: 4096, global_batch: 8}\n")
    assert main(["train", "plan", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    advice = doc["what_to_change"]
    assert (advice["searched_with_offload"], advice["searched_with_offload_device"]) == ("optimizer+params", "nvme")
    levers = {lv["lever"]: lv for lv in advice["levers"]}
    assert levers["offload optimizer+params to nvme"]["fits"] and not levers["offload optimizer"]["fits"]
    top = doc["top"][0]
    assert top["plan"]["offload_device"] == "nvme" and top["plan"]["zero"] == 3 and top["fits"]


def test_the_report_shows_what_is_offloaded_per_node(tmp_path, capsys):
    from shardwise.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text("model: llama-3.1-8b\ncluster: {gpu: h100, gpus: 8}\ntraining: {seq_len: 4096, global_batch: 8}\n"
                    "parallel: {zero: 3, offload: optimizer+params, offload_device: nvme}\n")
    assert main(["train", "estimate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "offloaded per node" in out and "offloading to nvme" in out and "of 30.72 TB" in out


def test_each_group_has_its_own_host_block():
    """`cluster.groups[i].host` overrides that group's memory tiers only: each group's nodes keep their own
    host link, DRAM and CPU-Adam rate, the others their catalog system's."""
    from shardwise.specs.hardware import GroupsSpec, get_gpu, make_hetero_cluster

    spec = GroupsSpec(groups=[{"gpu": "h100", "nodes": 1, "host": {"dram_gib": 256, "link_gbyte_s": 20.0, "cpu_adam_gparams_s": 6.0}},
                              {"gpu": "a100-80gb", "nodes": 1}])
    hetero = make_hetero_cluster(spec)
    first, second = (g.cluster.host for g in hetero.groups)
    assert (first.dram_gib, first.link_gbyte_s, first.cpu_adam_gparams_s) == (256, 20.0, 6.0)
    a100 = get_gpu("a100-80gb")
    assert (second.dram_gib, second.link_gbyte_s) == (a100.host_dram_gib, a100.host_link_gbyte_s)
    assert second.cpu_adam_gparams_s is None
    bad = {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 8}, "parallel": {},
           "cluster": {"groups": [{"gpu": "h100", "nodes": 1}, {"gpu": "a100-80gb", "nodes": 1, "host": {"dram_gib": -1}}]}}
    with pytest.raises(ShardwiseError, match=r"groups.*1.*host.*dram_gib"):
        job_from_mapping(bad)


def test_single_group_host_block_is_the_flat_forms():
    """One group is the flat cluster: its host block checks the offloaded states as `cluster.host` does."""
    parallel = {"zero": 2, "offload": "optimizer"}
    doc = {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 8}, "parallel": parallel,
           "cluster": {"groups": [{"gpu": "h100", "nodes": 1, "host": {"dram_gib": 64}}]}}
    grouped, flat = estimate(job_from_mapping(doc)), estimate(_job(parallel, host={"dram_gib": 64}))
    assert not grouped.fits and grouped.misfit == flat.misfit and grouped.misfit.startswith("host memory")
    roomy = dict(doc, cluster={"groups": [{"gpu": "h100", "nodes": 1}]})
    assert estimate(job_from_mapping(roomy)).fits


def test_cxl_memory_adds_capacity_and_bounds_cpu_adam_by_its_bandwidth():
    """CXL memory expanders (cluster.host.cxl_gib, cxl_gbyte_s): offloaded states fill DRAM (less the 10%
    reserve) first, then CXL; a node that cannot hold them in DRAM holds them with CXL, and CPU Adam over the
    spilled share reads and writes 2 x 12 B a parameter at the expanders' bandwidth."""
    parallel = {"zero": 2, "offload": "optimizer"}
    dram = estimate(_job(parallel, host={"dram_gib": 64}))
    assert not dram.fits and dram.misfit.startswith("host memory")
    fast = estimate(_job(parallel, host={"dram_gib": 64, "cxl_gib": 256, "cxl_gbyte_s": 1000}))
    assert fast.fits and fast.host_memory["cxl_gib"] == 256
    assert fast.host_memory["dram_available_gib"] == pytest.approx(64 * 0.9 + 256)
    assert fast.time_s.optimizer == pytest.approx(dram.time_s.optimizer)  # fast enough not to bind
    slow = estimate(_job(parallel, host={"dram_gib": 64, "cxl_gib": 256, "cxl_gbyte_s": 0.5}))
    used = slow.host_memory["dram_used_gib"]
    spilled = (used - 64 * 0.9) / used
    params_node = slow.host_memory["dram_used_gib"] * 2**30 / 16  # 16 B a parameter offloaded (fp32 master, moments, grads)
    grad_copy = slow.time_s.optimizer - spilled * params_node * 2 * 12 / 0.5e9
    assert 0 <= grad_copy < 0.05 * slow.time_s.optimizer and slow.time_s.optimizer > 10 * fast.time_s.optimizer
    roomy = estimate(_job(parallel, host={"dram_gib": 2048, "cxl_gib": 256, "cxl_gbyte_s": 0.5}))  # nothing spills
    assert roomy.time_s.optimizer == pytest.approx(estimate(_job(parallel, host={"dram_gib": 2048})).time_s.optimizer)


def test_cxl_capacity_without_its_bandwidth_is_refused():
    with pytest.raises(ShardwiseError, match="cxl_gbyte_s"):
        _job({"zero": 2, "offload": "optimizer"}, host={"dram_gib": 64, "cxl_gib": 256})


def test_planner_counts_cxl_in_the_host_memory_check():
    job = _job({"zero": 2}, host={"dram_gib": 16, "cxl_gib": 512, "cxl_gbyte_s": 100})
    found = plan_search(job.model, job.cluster, job.training, fixed={"offload": "optimizer"})
    assert found.top and all(e.fits and e.host_memory["cxl_gib"] == 512 for e in found.top)
