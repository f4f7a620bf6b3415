"""ZeRO-1 as two stacks run it: reduce-scatter + all-gather (Megatron's distributed optimizer) and
InternEvo's all-reduce + one broadcast per owner rank (hybrid_zero_optim.py)."""

import pytest

from shardwise.cost.constants import NetworkConstants
from shardwise.cost.overlap import dp_exposed_s
from shardwise.cost.stack import stack_profile
from shardwise.specs.hardware import get_gpu, make_cluster
from shardwise.specs.job import job_from_mapping
from shardwise.train.estimate import estimate

IDEAL = NetworkConstants(ring_efficiency_nvlink=1.0, ring_efficiency_xgmi=1.0, nvls_efficiency=1.0, tree_efficiency=1.0,
                         nic_efficiency=1.0, link_latency_s=0.0, nic_latency_infiniband_s=0.0, nic_latency_efa_s=0.0,
                         nic_latency_tcpxo_s=0.0, nvls_latency_s=0.0, chunk_latency_s=0.0)


def test_internevo_zero1_all_reduces_then_broadcasts_each_shard(monkeypatch):
    """1e9 parameters (2 GB bf16) on 8 nodes x 8 H100, sharded over all 64 ranks, no overlap: the
    gradient all-reduce is a ring at the nodes' 8 x 50 GB/s (2 x 63/64 x 2 GB / 400 GB/s = 9.84 ms)
    and the 64 owner broadcasts move the 2 GB once at the same rate (5.00 ms): 14.84 ms."""
    monkeypatch.setattr("shardwise.cost.comm.fitted_network_constants", lambda: IDEAL)
    h100 = make_cluster("H100", 64, network={"nvls": False})
    args = dict(cluster=h100, zero=1, overlap_grad_reduce=False, microbatches=1, tp=1, expert_stride=1, p_dense=1e9, p_exp=0.0,
                n_dense=64, n_exp=64, shard=64, weight_bytes=2.0, grad_bytes=2.0, fwd_s=0.0, bwd_s=0.0, dp_overlap=0.0,
                fsdp_overlap=0.0, bucket_bytes=4e9)
    assert dp_exposed_s(**args, zero1_broadcast=True, param_sync_overlap=False) == pytest.approx(9.84375e-3 + 5e-3)
    # Megatron's way: reduce-scatter + all-gather, each (63/64) x 2 GB / 400 GB/s.
    assert dp_exposed_s(**args) == pytest.approx(2 * 63 / 64 * 2e9 / 400e9)


def test_internevo_parameter_sync_latency_grows_with_the_shard_group():
    """InternEvo's train_performance table: a 7B model on 1024 A100s runs 2271 tokens/s/GPU with ZeRO-1 over
    all ranks and 3625 with ZeRO-1 inside each node: 1024 broadcasts of 1024 ring steps each, against 8 of 8."""
    def tokens(dp_shard):
        doc = {"model": "llama-2-7b", "cluster": {"gpu": "A100-80GB", "gpus": 1024},
               "training": {"seq_len": 2048, "global_batch": 8192, "framework": "internevo"},
               "parallel": {"zero": 1, "micro_batch": 2, "recompute": "none", "dp_shard": dp_shard}}
        return estimate(job_from_mapping(doc)).tokens_per_s_per_gpu
    everywhere, in_node = tokens(1024), tokens(8)
    assert everywhere < 0.8 * in_node
    assert stack_profile("internevo", "ampere").zero1_comm == "all_reduce_broadcast"
    assert stack_profile("megatron", "ampere").zero1_comm == "reduce_scatter"


def test_offloaded_optimizer_step_shares_the_host_cpus():
    """ZeRO-Offload: the 8 GPUs of a node step their shards on the same host CPUs at once, so 8 x 1/8 of
    the parameters take the host as long as one GPU's whole set; only the PCIe transfers are per GPU (the
    gradient copy, not overlapped when no backward is given; the parameter copy back hides in CPU Adam)."""
    from shardwise.cost.constants import default_constants
    from shardwise.cost.step import host_link_gbyte_s, optimizer_step_s

    c = default_constants()
    one = optimizer_step_s(c, 8e9, 1e12, "optimizer", 63.0, 2.0, 4.0, gpus_per_host=1)
    eight = optimizer_step_s(c, 1e9, 1e12, "optimizer", 63.0, 2.0, 4.0, gpus_per_host=8)
    link = host_link_gbyte_s(get_gpu("h100")) * 1e9 * c.step.pcie_efficiency
    assert one - eight == pytest.approx(7e9 * 4.0 / link)
    assert eight - 1e9 * 4.0 / link == pytest.approx(8e9 * c.step.optimizer_bytes_per_param / c.step.host_adam_bytes_s)
