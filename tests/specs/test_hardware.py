"""GPU catalog (true GiB, power, NICs) and the cluster network spec."""

import pytest

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import get_gpu, gpu_names, make_cluster

REQUIRED = ["A100-40GB", "A100-80GB", "A800-80GB", "H100-SXM", "H100-SXM-96GB", "H100-NVL", "H100-PCIe", "H200", "H800",
            "H20", "B200", "GB200", "L40S", "L4", "A10G", "MI300X", "MI325X", "RTX-4090"]


def test_catalog_has_required_gpus_each_with_sources():
    names = gpu_names()
    for name in REQUIRED:
        assert name in names
        gpu = get_gpu(name)
        assert {"compute_memory", "memory_units", "network", "price"} <= set(gpu.sources)
        assert gpu.tflops["bf16"] > 0 and gpu.memory_gib > 0 and gpu.hbm_tbyte_s > 0 and gpu.power_w > 0
        assert gpu.nics_per_node > 0 and gpu.nic_gbps > 0
        if gpu.nvls:
            assert "nvls" in gpu.sources


# memory.total as the driver reports it (MiB), from the sources the catalog cites: Modal's NVML table
# (thundergolfer.com/blog/nvidia-gpu-memory-capacity) and public nvidia-smi / rocm-smi output.
DRIVER_MIB = {"A100-40GB": 40960, "A100-80GB": 81920, "A800-80GB": 81920, "H100-SXM": 81559, "H100-PCIe": 81559,
              "H100-NVL": 95830, "H800": 81559, "H200": 143771, "H20": 97871, "B200": 183359, "GB200": 189471,
              "L40S": 46068, "L4": 23034, "A10G": 23028, "RTX-4090": 24564, "MI300X": 205822885888 / 2**20}


@pytest.mark.parametrize("name,mib", sorted(DRIVER_MIB.items()))
def test_memory_is_what_the_driver_reports_in_gib(name, mib):
    """Catalog memory is true GiB: "80GB" HBM3 shows 81,559 MiB = 79.65 GiB, "48GB" GDDR6 (ECC) 44.99 GiB."""
    assert get_gpu(name).memory_gib == pytest.approx(mib / 1024, abs=0.005)


@pytest.mark.parametrize("alias,name", [("h100", "H100-SXM"), ("A100-80GB", "A100-80GB"), ("a100", "A100-80GB"), ("mi300x", "MI300X"), ("4090", "RTX-4090"), ("H100_SXM5", "H100-SXM")])
def test_aliases_case_insensitive(alias, name):
    assert get_gpu(alias).name == name


def test_datasheet_figures():
    """Spot checks against the datasheets cited in the catalog."""
    h100 = get_gpu("H100-SXM")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops("fp8") == pytest.approx(2 * 989.4e12, rel=1e-3)
    assert get_gpu("A100-80GB").hbm_tbyte_s == pytest.approx(2.039)
    assert get_gpu("A800").intra_node_gbyte_s == get_gpu("H800").intra_node_gbyte_s == 400  # export NVLink
    assert get_gpu("H100-NVL").peak_flops("bf16") == pytest.approx(1671e12 / 2)  # datasheet: 1,671 TF sparse
    assert get_gpu("GB200").peak_flops("bf16") == pytest.approx(360e15 / 72 / 2)  # NVL72: 360 PF sparse / 72 GPUs
    assert get_gpu("MI325X").hbm_tbyte_s == 6.0 and get_gpu("MI325X").peak_flops("bf16") == get_gpu("MI300X").peak_flops("bf16")


def test_unknown_gpu_and_missing_dtype():
    with pytest.raises(ShardwiseError, match="unknown GPU 'V99'"):
        get_gpu("V99")
    with pytest.raises(ShardwiseError, match="no fp8"):
        get_gpu("A100-80GB").peak_flops("fp8")


def test_groups_follow_rank_layout():
    cluster = make_cluster("H100", 64)
    shape = lambda n, s: (cluster.tier_for(n, s).per_domain, cluster.tier_for(n, s).domains)  # noqa: E731
    assert shape(8, 1) == (8, 1) and cluster.tier_for(8, 1).name == "nvlink4"  # TP inside a node
    assert shape(2, 8) == (1, 2) and cluster.tier_for(2, 8).name == "scale-out"  # DP across nodes
    assert shape(4, 2) == (4, 1)  # 4 ranks at stride 2 span 8 GPUs
    assert shape(16, 4) == (2, 8)  # 2 per node over 8 nodes
    assert shape(64, 1) == (8, 8) and shape(1, 64) == (1, 1)


def test_nvl72_is_one_nvlink_domain_of_72():
    nvl = make_cluster("GB200", 144)
    assert nvl.gpus_per_node == 4 and nvl.network.nvlink_domain == 72
    assert nvl.tier_for(72, 1).domains == 1 and nvl.tier_for(144, 1).domains == 2


def test_network_spec_overrides_and_the_older_field():
    assert make_cluster("H100", 16).network.nics_per_node == 8
    assert make_cluster("H100", 16, inter_node_gbps=200).network.nic_gbps == 200  # per GPU, 8 NICs
    net = make_cluster("H100", 16, network={"nics_per_node": 4, "nic_gbps": 800, "fabric": "roce", "nvls": False}).network
    assert (net.nics_per_node, net.nic_gbps, net.fabric, net.nvls) == (4, 800, "roce", False)
    assert make_cluster("H100", 16, gpus_per_node=4).network.nics_per_node == 4  # NICs scale with the node


@pytest.mark.parametrize("kw,message", [
    ({"network": {"nvls": True}, "gpu": "A100"}, "cluster.network.nvls: A100-80GB has no NVLink SHARP"),
    ({"network": {"sharp": True, "fabric": "efa"}}, "cluster.network.sharp: SHARP in-network reduction needs InfiniBand"),
    ({"network": {"nic_gbps": 400}, "inter_node_gbps": 400}, "give either inter_node_gbps"),
    ({"network": {"nvlink_domain": 12}}, "cluster.network.nvlink_domain: 12 must be a multiple of gpus_per_node"),
    ({"network": {"fabric": "token-ring"}}, "cluster.network.fabric"),
    ({"network": {"nics": 8}}, "cluster.network.nics: unknown field"),
    ({"power_limit_w": 800}, "cluster.power_limit_w: 800 W exceeds the 700 W board power of H100-SXM"),
])
def test_network_and_power_errors_name_the_field(kw, message):
    gpu = kw.pop("gpu", "H100")
    with pytest.raises(ShardwiseError, match=message):
        make_cluster(gpu, 16, **kw)


def test_power_limit_scales_peak_throughput_by_the_cube_root_rule():
    """Assumption (specs/hardware.py): clock ~ power^(1/3) below the board power; bandwidth unchanged."""
    capped = make_cluster("H100", 8, power_limit_w=350).gpu
    assert capped.peak_flops("bf16") == pytest.approx(989.4e12 * 0.5 ** (1 / 3))
    assert capped.hbm_tbyte_s == get_gpu("H100").hbm_tbyte_s and capped.name == "H100-SXM"
    assert get_gpu("H100-SXM-96GB").peak_flops("bf16") == pytest.approx(989.4e12 * (500 / 700) ** (1 / 3))
    assert make_cluster("H100", 8, power_limit_w=700).gpu.peak_flops("bf16") == pytest.approx(989.4e12)


def test_cluster_validation():
    with pytest.raises(ShardwiseError, match="multiple of gpus_per_node"):
        make_cluster("H100", 12)
    small = make_cluster("H100", 4)  # part of one node is fine
    assert small.nodes == 1


def test_every_gpu_names_a_measured_family_of_its_own_vendor():
    """A part without fitted constants borrows a measured part's (gpus.yaml `family`), never the untuned defaults."""
    from shardwise.cost.constants import default_constants

    consts = default_constants()
    measured = {name for name, over in consts.per_gpu.items() if "gemm_efficiency" in over}
    for name in gpu_names():
        gpu = get_gpu(name)
        family = get_gpu(gpu.family)
        assert gpu.family in measured, f"{name}: family {gpu.family} has no fitted GEMM efficiency"
        assert (gpu.intra_node_link == "xgmi") == (family.intra_node_link == "xgmi"), name  # AMD borrows from AMD
        assert consts.compute_for(name) == consts.compute_for(gpu.family)


def test_a_catalog_entry_without_a_family_is_refused(monkeypatch):
    import shardwise.specs.hardware as hw

    raw = {k: dict(v) for k, v in hw.load_yaml(hw.data_path("gpus.yaml")).items()}
    del raw["H200"]["family"]
    monkeypatch.setattr(hw, "load_yaml", lambda path: raw)
    hw._catalog.cache_clear()
    try:
        with pytest.raises(ShardwiseError, match="H200 needs a family"):
            hw._catalog()
    finally:
        monkeypatch.undo()
        hw._catalog.cache_clear()
