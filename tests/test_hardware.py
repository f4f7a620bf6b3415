"""GPU catalog and cluster network tiers."""

import pytest

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import get_gpu, gpu_names, make_cluster

REQUIRED = ["A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "H800", "H20", "B200", "L40S", "L4", "A10G", "MI300X", "RTX-4090"]


def test_catalog_has_required_gpus_each_with_sources():
    names = gpu_names()
    for name in REQUIRED:
        assert name in names
        gpu = get_gpu(name)
        assert {"compute_memory", "network", "price"} <= set(gpu.sources)
        assert gpu.tflops["bf16"] > 0 and gpu.memory_gib > 0 and gpu.hbm_tbyte_s > 0


@pytest.mark.parametrize("alias,name", [("h100", "H100-SXM"), ("A100-80GB", "A100-80GB"), ("a100", "A100-80GB"), ("mi300x", "MI300X"), ("4090", "RTX-4090"), ("H100_SXM5", "H100-SXM")])
def test_aliases_case_insensitive(alias, name):
    assert get_gpu(alias).name == name


def test_datasheet_figures():
    """Spot checks against the datasheets cited in the catalog."""
    h100 = get_gpu("H100-SXM")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops("fp8") == pytest.approx(2 * 989.4e12, rel=1e-3)
    assert get_gpu("A100-80GB").hbm_tbyte_s == pytest.approx(2.039)
    assert get_gpu("H200").memory_gib == 141


def test_unknown_gpu_and_missing_dtype():
    with pytest.raises(ShardwiseError, match="unknown GPU 'V99'"):
        get_gpu("V99")
    with pytest.raises(ShardwiseError, match="no fp8"):
        get_gpu("A100-80GB").peak_flops("fp8")


def test_tiers_follow_rank_layout():
    cluster = make_cluster("H100", 64)
    assert cluster.tier_for(8, 1).name.startswith("nvlink")  # TP inside a node
    assert cluster.tier_for(2, 8).name == "scale-out"  # DP across nodes
    assert cluster.tier_for(4, 2).name.startswith("nvlink")  # 4 ranks at stride 2 span 8 GPUs
    assert cluster.tier_for(1, 64).name.startswith("nvlink")
    assert cluster.tiers[1].gbyte_s == pytest.approx(400 / 8)


def test_cluster_validation():
    with pytest.raises(ShardwiseError, match="multiple of gpus_per_node"):
        make_cluster("H100", 12)
    small = make_cluster("H100", 4)  # part of one node is fine
    assert small.nodes == 1
