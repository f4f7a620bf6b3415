"""MoE serving: expert parallelism with data-parallel attention, the all-to-alls, routing imbalance, MLA."""

import math

import pytest

from shardwise.cost.comm import collective_s
from shardwise.cost.flops import matmul_weights
from shardwise.errors import ShardwiseError
from shardwise.serve.config import parse_serve_job
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import weight_bytes_per_gpu
from shardwise.serve.precision import Precision
from shardwise.serve.simulate import build_pools
from shardwise.serve.timing import StepTimer, busiest_share, deepep_network, kv_bytes_per_token_per_gpu
from shardwise.specs.hardware import get_gpu, make_cluster
from shardwise.specs.model_ref import load_model

FP8 = Precision("fp8", "bf16")


def test_busiest_gpu_share_is_the_mean_plus_the_gumbel_spread():
    # 1,024 routed copies over 16 GPUs: mean 64, sd sqrt(1024 * 1/16 * 15/16) = 7.75, max ~ 64 + 7.75 sqrt(2 ln 16)
    assert busiest_share(1024, 16) == pytest.approx(64 + math.sqrt(1024 / 16 * 15 / 16) * math.sqrt(2 * math.log(16)))
    assert busiest_share(1024, 1) == 1024
    assert busiest_share(10**8, 16) / (10**8 / 16) < 1.01  # large batches balance


def test_expert_parallel_weights_spread_the_experts_over_every_gpu():
    """DeepSeek-V3 over 16 GPUs with tp 1: each GPU holds all non-expert weights and 1/16 of the experts."""
    m = load_model("deepseek-v3")
    _, _, _, expert = matmul_weights(m)
    routed = m.moe_layers * m.experts * expert
    per_gpu = weight_bytes_per_gpu(m, 1, 1, FP8, ep=16)
    tp8 = weight_bytes_per_gpu(m, 8, 1, FP8)  # experts sharded by TP 8 instead
    assert per_gpu - routed * 1.0 / 16 == pytest.approx(tp8 * 8 - routed * 1.0, rel=1e-12)


def test_data_parallel_attention_multiplies_the_mla_cache_and_splits_the_batch():
    job = {"model": "deepseek-v3", "precision": {"weights": "fp8"}, "workload": {"rate": 1, "num_requests": 1}}
    tp8 = build_pools(parse_serve_job({**job, "deployment": {"gpu": "h200", "tp": 8, "expert_parallel": True}}), ServingConstants())[0]
    dp8 = build_pools(parse_serve_job({**job, "deployment": {"gpu": "h200", "tp": 1, "dp_attention": 8, "expert_parallel": True}}),
                      ServingConstants())[0]
    m = load_model("deepseek-v3")
    # MLA's latent is replicated over TP: TP 8 holds one copy per 8 GPUs, DP 8 one per GPU
    assert kv_bytes_per_token_per_gpu(m, 8, 1, 2.0) == kv_bytes_per_token_per_gpu(m, 1, 1, 2.0)
    assert dp8.capacity.tokens > 4 * tp8.capacity.tokens
    assert dp8.sim_engine.max_num_seqs == 8 * dp8.engine.max_num_seqs
    assert dp8.gpus == tp8.gpus == 8


def test_each_moe_layer_pays_a_dispatch_and_a_combine_all_to_all():
    """Per token of a rank, 2 x 58 all-to-alls of top_k x hidden bytes (FP8 dispatch with FP8 experts, BF16
    combine) over the 16 EP GPUs of two nodes, as the network model times them."""
    m = load_model("deepseek-v3")
    t = StepTimer(m, get_gpu("h200"), 1, 1, FP8, ServingConstants(), dp=16, ep=16)
    tier = make_cluster(get_gpu("h200"), 16).tier_for(16, 1)
    net = deepep_network()
    per_token = sum(collective_s("all_to_all", m.top_k * m.hidden * b, 16, tier, net, latency=False) for b in (1.0, 2.0))
    fixed, per = t.comm_coeffs
    assert per == pytest.approx(m.moe_layers * per_token)
    latency = sum(collective_s("all_to_all", m.top_k * m.hidden * b, 16, tier, net) for b in (1.0, 2.0)) - per_token
    assert fixed == pytest.approx(m.moe_layers * latency)


def test_deepep_low_latency_kernels_within_a_third_of_the_network_model():
    """DeepEP's low-latency dispatch (FP8) and combine (BF16) of 128 tokens x top-8 x 7168 per rank on H800s
    with one 400 Gb/s NIC per GPU (deepseek-ai/DeepEP docs/legacy.md): EP16 118 / 195 us, EP32 155 / 273 us;
    the network model's all-to-all of the same bytes, without NCCL's per-peer latency and chunk pipeline,
    stays within a third of each (with them, EP32's dispatch would be ~2x: DeepEP writes tokens, not
    chunked messages per peer)."""
    h800 = get_gpu("h800")
    for ep, dispatch_us, combine_us in ((16, 118, 195), (32, 155, 273)):
        tier = make_cluster(h800, ep).tier_for(ep, 1)
        for b, us in ((1.0, dispatch_us), (2.0, combine_us)):
            model_us = collective_s("all_to_all", 128 * 8 * 7168 * b, ep, tier, deepep_network()) * 1e6
            assert model_us == pytest.approx(us, rel=1 / 3)


def test_mla_decode_reads_the_latent_and_computes_over_it():
    m = load_model("deepseek-v3")
    t = StepTimer(m, get_gpu("h200"), 1, 1, FP8, ServingConstants())
    assert t.decode_pair_flops == 2 * m.heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * m.layers
    assert t.pair_flops == 2 * m.heads * (m.d_head + m.d_v_head) * m.layers


@pytest.mark.parametrize(("deployment", "match"), [
    ({"gpu": "h200", "tp": 1, "dp_attention": 8}, "expert_parallel: true"),
    ({"gpu": "h200", "tp": 1, "dp_attention": 6, "expert_parallel": True}, "do not divide the 256"),
])
def test_impossible_layouts_say_what_to_change(deployment, match):
    job = {"model": "deepseek-v3", "precision": "fp8", "deployment": deployment, "workload": {"rate": 1, "num_requests": 1}}
    with pytest.raises(ShardwiseError, match=match):
        build_pools(parse_serve_job(job), ServingConstants())
    dense = {"model": "llama-3.1-8b", "deployment": {"gpu": "h100", "dp_attention": 2}, "workload": {"rate": 1, "num_requests": 1}}
    with pytest.raises(ShardwiseError, match="dense: use replicas"):
        build_pools(parse_serve_job(dense), ServingConstants())


def _flags(args):
    return {a: (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True)
            for i, a in enumerate(args) if a.startswith("--")}


def test_the_ep_example_exports_its_layout_to_both_engines():
    """16 attention ranks of tp 1 over two 8-GPU nodes, experts over all 16: vLLM's data-parallel engines
    (8 local, the head's address) with expert parallelism and DeepEP's low-latency kernels; SGLang's one
    16-GPU instance with dp attention and EP 16 over two nodes."""
    from shardwise.handoff import export_serve
    from shardwise.serve.config import load_serve_job
    from tests.serve.conftest import ROOT

    job = load_serve_job(ROOT / "examples" / "serve-deepseek-v3-ep-16xh200.yaml")
    (vllm,) = export_serve(job, "vllm")
    v = _flags(vllm.args)
    assert (v["--tensor-parallel-size"], v["--data-parallel-size"], v["--data-parallel-size-local"]) == ("1", "16", "8")
    assert v["--enable-expert-parallel"] is True and v["--all2all-backend"] == "deepep_low_latency"
    (sgl,) = export_serve(job, "sglang")
    s = _flags(sgl.args)
    assert (s["--tp-size"], s["--dp-size"], s["--ep-size"], s["--nnodes"]) == ("16", "16", "16", "2")
    assert s["--enable-dp-attention"] is True and (s["--moe-a2a-backend"], s["--deepep-mode"]) == ("deepep", "auto")


def test_a_disaggregated_ep_split_uses_each_pools_deepep_kernels():
    from shardwise.handoff import export_serve

    pool = {"gpu": "h200", "tp": 1, "dp_attention": 8, "expert_parallel": True}
    job = parse_serve_job({"model": "deepseek-v3", "precision": "fp8", "workload": {"rate": 1, "num_requests": 1},
                           "deployment": {"prefill": pool, "decode": pool}})
    prefill, decode, _router = export_serve(job, "vllm")
    assert _flags(prefill.args)["--all2all-backend"] == "deepep_high_throughput"
    assert _flags(decode.args)["--all2all-backend"] == "deepep_low_latency"
    prefill, decode, _router = export_serve(job, "sglang")
    assert (_flags(prefill.args)["--deepep-mode"], _flags(decode.args)["--deepep-mode"]) == ("normal", "low_latency")
