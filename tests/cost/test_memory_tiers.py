"""Memory tiers below HBM: the catalog's host link, host DRAM and NVMe per node, with their sources, and the
job's `cluster.host` overrides (docs/offload.md)."""

import pytest

from shardwise.cost.step import host_link_gbyte_s
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import GPU, get_gpu, gpu_names, make_cluster
from shardwise.specs.job import job_from_mapping


def test_every_catalog_gpu_has_a_cited_host_link():
    for name in gpu_names():
        gpu = get_gpu(name)
        assert gpu.host_link_gbyte_s and "host" in gpu.sources, name


@pytest.mark.parametrize("name,link,gbyte_s", [
    ("A100-80GB", "pcie4-x16", 31.5), ("L4", "pcie4-x16", 31.5), ("RTX-4090", "pcie4-x16", 31.5),
    ("H100-SXM", "pcie5-x16", 63.0), ("B200", "pcie5-x16", 63.0), ("MI300X", "pcie5-x16", 63.0),
    ("GB200", "nvlink-c2c", 450.0), ("V100-SXM-32GB", "pcie3-x16", 15.75),
])
def test_host_links_are_the_pci_sig_and_c2c_figures(name, link, gbyte_s):
    """PCIe 3.0/4.0/5.0 x16 = 8/16/32 GT/s x 16 lanes x 128/130 per direction; NVLink-C2C 900 GB/s both ways."""
    gpu = get_gpu(name)
    assert gpu.host_link == link and host_link_gbyte_s(gpu) == gbyte_s


def test_dgx_systems_from_their_datasheets():
    h100, a100, v100 = get_gpu("h100"), get_gpu("a100-80gb"), get_gpu("v100")
    assert h100.host_dram_gib == 2048 and h100.nvme_tb == pytest.approx(8 * 3.84)  # DGX H100: 2 TB, 8 x 3.84 TB
    assert a100.host_dram_gib == 2048 and a100.nvme_tb == pytest.approx(8 * 3.84)  # DGX A100 640GB
    assert get_gpu("a100-40gb").host_dram_gib == 1024  # DGX A100 320GB: 1 TB
    assert v100.host_dram_gib == 1536 and v100.gpus_per_node == 16  # DGX-2: 1.5 TB, 16 V100


def test_v100_catalog_entry():
    """V100 datasheet: 125 TFLOPS FP16 tensor, no BF16, 32 GB HBM2 at 900 GB/s, PCIe 3.0 x16; family: a measured part."""
    v100 = get_gpu("v100")
    assert v100.peak_flops("fp16") == 125e12 and v100.hbm_tbyte_s == 0.9 and v100.arch == "volta"
    assert v100.memory_gib == pytest.approx(32510 / 1024, abs=0.005)
    with pytest.raises(ShardwiseError, match="no bf16"):
        v100.peak_flops("bf16")


def test_cluster_host_overrides_the_catalog():
    c = make_cluster("h100", 16, host={"dram_gib": 1024, "link_gbyte_s": 31.5})
    assert c.host.dram_gib == 1024 and c.host.nvme_tb == pytest.approx(30.72)
    assert host_link_gbyte_s(c) == 31.5 and host_link_gbyte_s(make_cluster("h100", 16)) == 63.0
    job = job_from_mapping({"model": "llama-3-8b", "cluster": {"gpu": "h100", "gpus": 8, "host": {"nvme_tb": 0}},
                            "training": {"seq_len": 4096, "global_batch": 8}, "parallel": {}})
    assert job.cluster.host.nvme_tb == 0


@pytest.mark.parametrize("host,message", [
    ({"dram_gib": -1}, "cluster.host.dram_gib"),
    ({"nvme_gb": 3}, "cluster.host.nvme_gb"),
    ({"link_gbyte_s": "fast"}, "cluster.host.link_gbyte_s"),
])
def test_bad_host_fields_name_the_field(host, message):
    with pytest.raises(ShardwiseError, match=message):
        job_from_mapping({"model": "llama-3-8b", "cluster": {"gpu": "h100", "gpus": 8, "host": host},
                          "training": {"seq_len": 4096, "global_batch": 8}, "parallel": {}})


def test_a_gpu_outside_the_catalog_uses_the_pcie4_default():
    gpu = get_gpu("h100").model_copy(update={"host_link_gbyte_s": None})
    assert isinstance(gpu, GPU) and host_link_gbyte_s(gpu) == 31.5


def test_a_catalog_entry_without_a_host_block_is_refused(monkeypatch):
    import shardwise.specs.hardware as hw

    raw = {k: dict(v) for k, v in hw.load_yaml(hw.data_path("gpus.yaml")).items()}
    del raw["H200"]["host"]
    monkeypatch.setattr(hw, "load_yaml", lambda path: raw)
    hw._catalog.cache_clear()
    try:
        with pytest.raises(ShardwiseError, match="H200 needs a host block"):
            hw._catalog()
    finally:
        monkeypatch.undo()
        hw._catalog.cache_clear()
