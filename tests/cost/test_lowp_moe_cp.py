"""FP8/FP4 recipes, MoE routing and context-parallel schemes in the estimate (issue 11): hand-computed
numbers for the MoE and CP formulas, the two MoE memory bugs, the measured recipe order, and dense BF16
estimates untouched by the new constants."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.calibration.validate import collect_cases
from shardwise.cli.main import main
from shardwise.cost.comm import collective_s
from shardwise.cost.constants import LowPrecisionConstants, MoeConstants, default_constants
from shardwise.cost.device import Device
from shardwise.cost.flops import model_flops_per_token
from shardwise.cost.layer import attention_pass, dispatch_s, elementwise_bytes_per_token, expert_rows
from shardwise.cost.lowp import low_precision
from shardwise.cost.stack import stack_profile
from shardwise.specs.job import job_from_mapping
from shardwise.specs.layout import Layout
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import MoeSpec
from shardwise.train.assembly import gathered_moe_layer_params, layer_groups
from shardwise.train.estimate import estimate
from shardwise.train.stages import StageContent, stage_params


def job(model="llama-3-8b", gpu="H100-SXM", gpus=8, training=None, moe=None, **parallel):
    doc = {
        "model": model,
        "cluster": {"gpu": gpu, "gpus": gpus},
        "training": {"seq_len": 8192, "global_batch": 8, **(training or {})},
        "parallel": {"tp": 1, "pp": 1, "recompute": "selective", **parallel},
    }
    if moe:
        doc["moe"] = moe
    return job_from_mapping(doc)


# --- FP8 / FP4 ----------------------------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(gpu=st.sampled_from(["A100-80GB", "H100-SXM", "B200", "MI300X"]), zero=st.sampled_from([1, 3]),
       framework=st.sampled_from(["megatron", "torchtitan"]))
def test_dense_bf16_estimates_ignore_the_low_precision_and_moe_constants(gpu, zero, framework):
    j = job(gpu=gpu, zero=zero, training={"framework": framework})
    consts = default_constants()
    other = replace(consts, lowp=LowPrecisionConstants(rowwise_gemm_ratio=0.5, mx_gemm_ratio=0.6),
                    moe=MoeConstants(dispatch_overhead_s=1e-3, grouped_gemm_ratio=0.4))
    assert estimate(j, other).step_time_s == estimate(j, consts).step_time_s


def test_fp8_is_faster_than_bf16_but_not_by_the_peak_ratio_and_mfu_is_against_the_bf16_peak():
    bf16 = estimate(job(model="llama-3-70b", gpus=64, tp=8, sequence_parallel=True, training={"global_batch": 64}))
    fp8_job = job(model="llama-3-70b", gpus=64, tp=8, sequence_parallel=True,
                  training={"global_batch": 64, "precision": "fp8"})
    fp8 = estimate(fp8_job)
    assert bf16.step_time_s / 2 < fp8.step_time_s < bf16.step_time_s  # attention and the LM head stay BF16
    gpu = fp8_job.cluster.gpu
    flops = model_flops_per_token(fp8_job.model, 8192) * fp8_job.training.tokens_per_step
    assert fp8.mfu == pytest.approx(flops / (fp8.step_time_s * 64 * gpu.peak_flops("bf16")), rel=1e-12)
    assert any("against the BF16 peak" in n for n in fp8.notes)


def test_recipes_differ_and_tensorwise_beats_rowwise_on_h100():
    tw = estimate(job(training={"precision": "fp8", "fp8_recipe": "tensorwise", "framework": "torchtitan"}, zero=3))
    rw = estimate(job(training={"precision": "fp8", "fp8_recipe": "rowwise", "framework": "torchtitan"}, zero=3))
    assert tw.tokens_per_s_per_gpu > rw.tokens_per_s_per_gpu


def test_only_tensorwise_gathers_fp8_weights_in_torchtitan():
    """torchao's float8 FSDP2 all-gather is for tensorwise scaling; rowwise gathers BF16 (torchao docs)."""
    j = job(training={"precision": "fp8", "framework": "torchtitan"})
    stack = stack_profile("torchtitan", "hopper")
    gpu = j.cluster.gpu
    tw = low_precision(j.training, stack, gpu, "tensorwise")
    rw = low_precision(j.training, stack, gpu, "rowwise")
    assert (tw.gather_bytes, rw.gather_bytes) == (1.0, 2.0)


@pytest.mark.parametrize("zero, owned", [(1, 7.0e9), (3, 7.0e9 / 8)])
def test_fp8_weight_copies_are_of_the_weights_a_rank_owns(zero, owned):
    """Transformer Engine keeps cached FP8 weights (both layouts: 2 x 1 B per parameter) of the weights
    a rank owns: every weight of its stage below ZeRO-3, its shard under ZeRO-3 (a 7e9-parameter stage
    over 8 ranks: 1.75 GB of copies, not 14 GB); the casts after the optimizer step read the same."""
    from shardwise.cost.lowp import NO_LOWP, cast_s, job_device
    from shardwise.cost.stack import attention_kernel
    from shardwise.specs.layout import Layout
    from shardwise.train.assembly import Costing, RankLoad, rank_tail

    j = job(training={"precision": "fp8", "framework": "megatron"}, zero=zero)
    consts = default_constants()
    stack = stack_profile("megatron", j.cluster.gpu.arch, None, consts)
    dev, lowp = job_device(j.cluster.gpu, j.training, consts, stack, attention_kernel(j.training, stack))
    assert lowp.weight_copy_bytes == 2.0 and lowp.weights_per_step

    def tail(lp):
        return rank_tail(Costing(j.model, j.training, j.cluster, consts, stack, dev, lp), Layout(dp=8, zero=zero, dp_shard=8),
                         RankLoad(p_dense=7.0e9, p_exp=0.0, fwd_s=1.0, bwd_s=2.0, layers=32), microbatches=1)

    fp8, bf16 = tail(lowp), tail(NO_LOWP)
    assert float(fp8.fixed_bytes) - float(bf16.fixed_bytes) == pytest.approx(owned * 2.0)
    assert float(fp8.optimizer_s) - float(bf16.optimizer_s) == pytest.approx(float(cast_s(dev, lowp, owned, 32 * 4)))



def test_torchao_quantises_mx_operands_once_per_layout():
    """Transformer Engine writes an MXFP8 operand's two layouts in one pass (2 B read, 1 + 1 B written, 2/32 B
    of scales); torchao's mx_mm casts along dim0 and dim1 in separate kernels, each reading the 16-bit
    tensor: 2 x (2 + 1 + 1/32) B in two kernels (torchtitan's fused-elementwise traffic is 1.2 when compiled)."""
    gpu = job(gpu="B200").cluster.gpu
    training = job(gpu="B200", training={"precision": "fp8", "fp8_recipe": "mxfp8"}).training
    te = low_precision(training, stack_profile("megatron", "blackwell"), gpu)
    torchao = low_precision(training, stack_profile("torchtitan", "blackwell", False), gpu)
    assert (te.cast_bytes, te.cast_kernels) == (4.0 + 2 / 32, 1)
    assert torchao.cast_bytes == pytest.approx(2 * (2 + 1 + 1 / 32) * stack_profile("torchtitan", "blackwell", False).elementwise_traffic)
    assert torchao.cast_kernels == 2


def _mean(values):
    return sum(values) / len(values)


@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_fp8_recipes_rank_in_the_measured_order(gpu):
    """torchao's Llama3-8B rows compare recipes on one setup: the estimate ranks them as measured."""
    cases = [c for c in collect_cases()[0] if c.record_id.startswith(f"torchao_{gpu}_llama3_8b_")]
    picked = [c for c in cases if c.tags["precision"] == "fp8" and c.category == "throughput"]
    by_recipe: dict[str, list] = {}
    for c in picked:
        by_recipe.setdefault(c.tags["recipe"], []).append(c)
    assert len(by_recipe) >= 2
    measured = sorted(by_recipe, key=lambda r: -_mean([c.measured for c in by_recipe[r]]))
    predicted = sorted(by_recipe, key=lambda r: -_mean([c.predict(None) for c in by_recipe[r]]))
    assert predicted == measured


# --- MoE ----------------------------------------------------------------------------------------


def test_expert_rows_scale_by_the_load_factor_and_pad_to_the_tile():
    mixtral = load_model("mixtral-8x7b")  # 8 experts, top-2
    cluster = job(model="mixtral-8x7b", gpus=8, ep=8).cluster
    groups = layer_groups(cluster, Layout(tp=1, cp=1, ep=8))
    # 4096 tokens x top-2 x 8 ranks / 8 experts x 1.25 = 10240 rows (a whole number of 128-row tiles)
    assert expert_rows(mixtral, 4096, groups, MoeSpec(capacity_factor=1.25), 128) == 10240
    # 1000 x 2 x 1 / 8 x 1.25 = 312.5 rows, padded to 3 tiles of 128
    assert expert_rows(mixtral, 1000, layer_groups(cluster, Layout(tp=1, cp=1, ep=1)), MoeSpec(capacity_factor=1.25), 128) == 384


def test_moe_elementwise_traffic_is_the_routed_copies_over_tp():
    mixtral = load_model("mixtral-8x22b")  # hidden 6144, top-2 of 8 experts of 16384, SwiGLU, no dropout
    # norms and adds: (2 x 2 x 2 B + 2 x 3 x 2 B) x 6144 / tp 2 (sequence parallel) = 61,440 B;
    # SwiGLU: 2 B x (2 copies x 16384 / tp 2) x 3 (read gate and up, write one) = 98,304 B
    assert elementwise_bytes_per_token(mixtral, True, 2, True) == 61_440 + 98_304
    # a dense layer of the same width moves half the activation bytes (one copy per token)
    assert elementwise_bytes_per_token(mixtral, False, 2, True) == 61_440 + 49_152


def test_dispatch_moves_the_routed_tokens_on_the_network_all_to_all():
    mixtral = load_model("mixtral-8x7b")  # hidden 4096, top-2
    cluster = job(model="mixtral-8x7b", gpus=16, ep=8, training={"global_batch": 16}).cluster
    groups = layer_groups(cluster, Layout(tp=2, cp=1, ep=8))  # tp = expert-tp = 2
    # The rank's own 4096 tokens x 4096 x 2 B x top-2 x imbalance 1.2 over EP, then the expert-TP pair
    # all-gathers what each received (Megatron-Core's alltoall dispatcher)
    routed = 4096 * 4096 * 2 * 2 * 1.2
    a2a = dispatch_s(mixtral, 4096, groups, MoeSpec(imbalance=1.2), 2.0, False, 0.0)
    pair = collective_s("all_gather", 2 * routed, 2, groups.tp_tier)
    assert a2a == pytest.approx(collective_s("all_to_all", routed, 8, groups.ep_tier) + pair, rel=1e-12)
    no_etp = dispatch_s(mixtral, 4096, layer_groups(cluster, Layout(tp=2, cp=1, ep=8, etp=1)), MoeSpec(imbalance=1.2), 2.0, False, 0.0)
    assert no_etp == pytest.approx(collective_s("all_to_all", routed, 8, layer_groups(cluster, Layout(tp=2, cp=1, ep=8, etp=1)).ep_tier), rel=1e-12)
    fp8 = dispatch_s(mixtral, 4096, groups, MoeSpec(imbalance=1.2, dispatcher="deepep"), 2.0, True, 0.0)
    assert fp8 == pytest.approx(collective_s("all_to_all", routed / 2, 8, groups.ep_tier)
                                + collective_s("all_gather", routed, 2, groups.tp_tier), rel=1e-12)
    gathered = dispatch_s(mixtral, 4096, groups, MoeSpec(dispatcher="allgather"), 2.0, False, 0.0)
    assert gathered == pytest.approx(collective_s("all_gather", 4096 * 4096 * 2 * 2 * 8, 8, groups.ep_tier), rel=1e-12)


def _mixtral_layer(tp, ep, model=None, moe_layer=True, sp=True, moe_consts=None):
    """One Megatron layer of Mixtral-8x7B (4,096 tokens of 4,096) on 16 H100s, placed at (tp, ep)."""
    from shardwise.cost.device import Device
    from shardwise.cost.layer import transformer_layer

    cluster = job(model="mixtral-8x7b", gpus=16, ep=8, training={"global_batch": 16}).cluster
    dev = Device.of(cluster.gpu, "bf16", default_constants().compute_for(cluster.gpu.name))
    extra = {"moe_consts": moe_consts} if moe_consts is not None else {}
    return transformer_layer(model or load_model("mixtral-8x7b"), moe_layer, 4096.0, 4096, sp, "none", True, dev,
                             layer_groups(cluster, Layout(tp=tp, cp=1, ep=ep)), stack_profile("megatron", cluster.gpu.arch), **extra)


def test_routed_experts_take_their_tensor_parallel_traffic_from_the_dispatcher():
    """Bug: an MoE layer with ep > 1 paid its MLP's all-gather + reduce-scatter over tp on top of the
    dispatcher's all-to-all and expert-TP all-gather. Megatron-Core's grouped experts leave the TP/EP
    traffic to the token dispatcher, so the layer's own tp collectives are the attention's alone; with
    ep 1 (no dispatch) or shared experts (their own TP linears) the MLP keeps its pair."""
    mixtral = load_model("mixtral-8x7b")
    cluster = job(model="mixtral-8x7b", gpus=16, ep=8, training={"global_batch": 16}).cluster
    one = collective_s("all_reduce", 4096.0 * 4096 * 2.0, 2, layer_groups(cluster, Layout(tp=2, cp=1, ep=8)).tp_tier)

    def tp_fwd(model, ep, moe_layer=True):
        return _mixtral_layer(2, ep, model, moe_layer).tp_fwd_s

    assert one > 0
    assert tp_fwd(mixtral, 8) == pytest.approx(one, rel=1e-12)
    assert tp_fwd(mixtral, 1) == pytest.approx(2 * one, rel=1e-12)
    assert tp_fwd(mixtral, 8, moe_layer=False) == pytest.approx(2 * one, rel=1e-12)
    shared = mixtral.model_copy(update={"shared_experts": 1})
    assert tp_fwd(shared, 8) == pytest.approx(2 * one, rel=1e-12)


def test_one_local_expert_runs_a_plain_gemm():
    """The grouped-GEMM speed ratio is for kernels over several experts; a rank holding one expert
    (Mixtral's 8 over ep 8) runs its tokens through one ordinary GEMM."""
    def weight_grad_s(ep, ratio):
        return _mixtral_layer(1, ep, sp=False, moe_consts=MoeConstants(grouped_gemm_ratio=ratio)).w_s

    assert weight_grad_s(8, 0.5) == pytest.approx(weight_grad_s(8, 1.0), rel=1e-12)
    assert weight_grad_s(4, 0.5) > 1.2 * weight_grad_s(4, 1.0)


def test_imbalance_slows_the_step_and_the_estimate_states_it():
    even = estimate(job(model="mixtral-8x7b", gpus=16, tp=2, ep=8, training={"global_batch": 16}, moe={"imbalance": 1.0}))
    skew = estimate(job(model="mixtral-8x7b", gpus=16, tp=2, ep=8, training={"global_batch": 16}, moe={"imbalance": 1.5}))
    assert skew.step_time_s > even.step_time_s
    assert skew.time_s.ep_comm > even.time_s.ep_comm > 0
    assert any("busiest expert rank at 1.5x" in n for n in skew.notes)


def test_shared_experts_are_dense_parameters():
    """Bug: shared experts were counted with the routed ones (sharded over EP and the expert-DP group)."""
    m = ModelSpec(name="t", layers=2, hidden=1024, heads=8, kv_heads=8, ffn=512, vocab=1000, experts=8, top_k=2,
                  expert_ffn=512, shared_experts=1)
    dense, expert = stage_params(m, StageContent(0, 0, 1, False, False), tp=1, ep=4)
    one_expert = 3 * 1024 * 512  # SwiGLU: gate, up, down
    assert expert == 8 * one_expert / 4  # routed experts only, split over ep 4
    # attention (Q, K, V, O) + the shared expert + router + two RMSNorms
    assert dense == 4 * 1024 * 1024 + one_expert + 1024 * 8 + 2 * 1024


def test_zero3_gathers_a_ranks_own_experts():
    """Bug: the ZeRO-3 gathered-layer buffer counted every expert. Mixtral-8x7B layer: attention
    4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040; router 32,768; norms 8,192; one expert
    3 x 4096 x 14336 = 176,160,768: with ep 8 a rank gathers one expert, 218,144,768 parameters."""
    mixtral = load_model("mixtral-8x7b")
    assert gathered_moe_layer_params(mixtral, 8) == 41_943_040 + 32_768 + 8_192 + 176_160_768
    base = {"model": "mixtral-8x7b", "gpus": 16, "tp": 2, "zero": 3, "training": {"global_batch": 16}}
    one, eight = estimate(job(ep=1, **base)), estimate(job(ep=8, **base))
    # the double-buffered gather (2 layers, 2 B, tp 2) holds 7 experts fewer
    assert one.memory.buffers - eight.memory.buffers == pytest.approx(2 * 2 * 7 * 176_160_768 / 2, rel=1e-9)


def test_qwen3_235b_estimate_prints_the_all_to_all_and_the_imbalance(tmp_path, capsys):
    path = tmp_path / "q.yaml"
    path.write_text("model: qwen3-235b-a22b\ncluster: {gpu: H100-SXM, gpus: 256}\n"
                    "training: {seq_len: 4096, global_batch: 1024}\n"
                    "parallel: {tp: 2, pp: 8, ep: 32, etp: 1, sequence_parallel: true}\n")
    assert main(["train", "estimate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ep comm" in out and "all-to-all" in out and "busiest expert rank at 1.2x" in out


# --- context parallelism ------------------------------------------------------------------------


def test_only_the_ring_hides_under_attention():
    base = {"model": "llama-3.1-8b", "cp": 8, "training": {"seq_len": 131072}}
    ring = estimate(job(cp_comm="p2p", **base))
    gathered = estimate(job(cp_comm="allgather", **base))
    ulysses = estimate(job(cp_comm="a2a", **base))
    assert ring.time_s.cp_comm == 0.0
    assert gathered.time_s.cp_comm > 0 and ulysses.time_s.cp_comm > 0


def test_ulysses_moves_q_k_v_and_o_by_all_to_all():
    """Llama-3.1-8B, 131072 tokens over cp 8 (16384 each), head dim 128: Q and O 32 heads, K and V 8."""
    j = job(model="llama-3.1-8b", cp=8, cp_comm="a2a", training={"seq_len": 131072})
    groups = layer_groups(j.cluster, Layout(tp=1, cp=8, ep=1, cp_comm="a2a", ulysses=8))
    q_o = 32 * (128 + 128) * 16384 * 2
    k_v = 8 * (128 + 128) * 16384 * 2
    dev = Device.of(j.cluster.gpu, "bf16", default_constants().compute_for("H100-SXM"), "fa3")
    *_, cp_f, cp_b, _, _ = attention_pass(j.model, 16384, 131072, groups, dev, 2.0)
    assert cp_f == cp_b == pytest.approx(collective_s("all_to_all", q_o + k_v, 8, groups.cp_tier), rel=1e-12)


def test_a_loop_over_the_experts_pays_their_kernels_and_overlap_hides_the_all_to_all():
    """Megatron-Core's SequentialMLP (no --moe-grouped-gemm) runs a GEMM per local expert without the grouped
    kernel's row padding, and pays each expert's kernels; the 1F1B all-to-all overlap leaves exposed only
    what another micro-batch's compute of the layer cannot cover."""
    base = {"model": "mixtral-8x7b", "gpus": 16, "tp": 2, "ep": 2, "training": {"global_batch": 16}}
    grouped = estimate(job(**base))
    looped = estimate(job(**base, moe={"grouped_gemm": False}))
    assert looped.step_time_s != grouped.step_time_s
    overlapped = estimate(job(**base, moe={"overlap_a2a": True}))
    assert overlapped.time_s.ep_comm < grouped.time_s.ep_comm
    assert overlapped.step_time_s < grouped.step_time_s
