"""Iteration time of one serving replica: a roofline per operation group, plus TP/PP/EP communication.

A replica is tp GPUs per stage x pp stages, and for MoE models with data-parallel attention dp such
groups (vLLM --data-parallel-size, SGLang --dp-size --enable-dp-attention) whose MoE layers run
expert-parallel over ep = tp x dp GPUs. The dp ranks step in lockstep (vLLM runs dummy batches on idle
ranks so the all-to-alls match), so one iteration's time is that of one rank holding 1/dp of the batch:

t = max(F_lin / R_lin, W_lin / (BW*eta_m))                 block linears (attention, dense MLPs, shared
                                                           experts) over the rank's T/dp tokens
  + max(F_exp / R_lin, W_exp_active / (BW*eta_m))           routed experts: TP-sharded (ep = 1) or whole
                                                           experts on each of ep GPUs, tokens routed to
                                                           the busiest GPU (uniform routing, below)
  + max(F_head / R16, W_head / (BW*eta_m))                  LM head, rows that sample a token
  + S_dec * max(KV_tok / (BW*eta_m), F_attn_tok / R_attn)   decode attention over S_dec context tokens
  + P_pf * F_pair / (R_attn * s_kv * f_d)                   prefill attention: P_pf the fused kernel's tile
                                                           work in (query, key) pairs (below)
  + 2L * all_reduce(T*h*2 B, tp) + (pp-1) * send(T*h*2 B)   Megatron TP (Vidur execution_time.py), vLLM's
                                                           custom all-reduce inside a node (below), and PP
  + 2L_moe * all_to_all(T*k*h*b, ep)                        EP dispatch (FP8 with FP8 weights, DeepEP) and
                                                           combine (BF16), each rank sending its tokens'
                                                           k copies (DeepSeek-V3 report Sec. 3.2.2)
  + kernels * kernel_overhead                               the kernels' fixed costs (the device model's)
  + step_overhead + per_seq_overhead * n_seqs/dp            CPU-side scheduling and sampling, per rank
                                                           (overlapped with the GPU's work under vLLM's
                                                           async scheduling or SGLang's overlap scheduler:
                                                           max(GPU, CPU) instead of the sum)
(roofline per op: LLM-Viewer roofline_model.py, GenZ get_roofline; collective times, latency included,
from cost.comm's network model fitted on nccl-tests). R_lin is the weight format's GEMM rate
(:mod:`shardwise.serve.precision`), R16 the 16-bit rate, R_attn the attention kernel's; each GEMM works as
if every dimension were the device model's d0 longer (Device.gemm_s). Attention FLOPs per (query, key)
pair and layer: 2*heads*(d_qk + d_v) (PaLM App. B); MLA decodes with the up-projections absorbed, over
the latent: 2*heads*(2*c + r) (DeepSeek-V2 report Sec. 2.1.2; FlashMLA), and prefills with them
expanded. Prefill attention runs the training model's fused kernel (:mod:`shardwise.cost.attention`, the
tile model fitted on FlashAttention-2/3 kernel benchmarks): a chunk of s_q new tokens over s_k = done + s_q
keys costs, per (sequence, head), TILE^2 x (c0 n_q + n_q (n_k - n_q) + n_q (n_q + 1) / 2) pair-equivalents
(n_q, n_k its query and key tiles: the loop's fixed part c0 per query tile, the causal diagonal tile
computed whole), at the kernel's asymptote R_attn times its head-dimension factor f_d; a varlen launch
balances the tiles of all chunks over the SMs (the model's wave and longest-CTA bounds, which matter only
for prefills too small to fill the GPU, are left out). Routed experts: of E experts with top-k routing, T tokens touch E*(1 - (1 - k/E)^T) of them in
expectation (uniform routing; derived); with EP the busiest of ep GPUs receives the mean n/ep of the
n = T*k routed copies plus the Gumbel approximation of the maximum of ep binomial counts,
sqrt(2 ln(ep) * n (1/ep)(1 - 1/ep)) (derived), times the deployment's `expert_imbalance`. A PP replica
runs pp micro-batches in flight (vLLM virtual engines); each takes the whole model's time, so weights
count once per iteration and the stages' sends are added.

TP all-reduces of up to 8 MiB inside one NVLink or xGMI domain of 2, 4, 6 or 8 GPUs run vLLM's (and
SGLang's) custom all-reduce, not NCCL/RCCL (vLLM PR #2192, "Custom all reduce kernels";
vllm/distributed/device_communicators/custom_all_reduce.py: max_size 8 MiB, those world sizes): one-shot,
every GPU reads the n-1 peers' buffers after a barrier and reduces, 2 barriers and S(n-1) bytes in; or
two-shot, a reduce-scatter and an all-gather through the buffers, 3 barriers and 2S(n-1)/n bytes; the
faster (derived). A barrier costs one step of the scale-up fabric's fitted latency and bytes move at its
fitted ring efficiency x the link rate (per peer link on a mesh). Larger messages and other groups use
the network model's NCCL/RCCL collectives. EP all-to-alls run DeepEP's kernels, which write each token
straight to its destination (NVLink, RDMA/IBGDA) from many SMs at once instead of NCCL's chunked
send/receive pair per peer (deepseek-ai/DeepEP README): the network model's all-to-all rates and
per-level latency, without NCCL's per-remote-peer latency and chunk-pipeline term (fitted on nccl-tests'
all-to-alls; derived).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from shardwise.cost.attention import TILE, tile_steps
from shardwise.cost.comm import collective_s
from shardwise.cost.constants import NetworkConstants, fitted_network_constants
from shardwise.cost.device import Device
from shardwise.cost.flops import linear_shapes
from shardwise.serve.constants import ServingConstants
from shardwise.serve.precision import Precision
from shardwise.specs.hardware import GPU, Cluster, CommGroup, Network, make_cluster
from shardwise.specs.layer import DENSE_BLOCKS
from shardwise.specs.model import ModelSpec

ACT_BYTES = 2.0  # activations travel in 16-bit even with low-precision weights
# Kernels a decoder layer launches besides its TP collectives, vLLM's LlamaDecoderLayer under CUDA graphs
# (vllm/model_executor/models/llama.py): two fused residual-add + RMSNorm, the QKV, O, gate-up and down
# GEMMs, rotary embedding, the KV-cache write, the attention kernel, SiLU-and-mul.
KERNELS_PER_LAYER = 10
# A fused MoE layer runs the router GEMM, top-k softmax, the token sort/align, two grouped GEMMs, the
# activation and the weighted sum (vllm/model_executor/layers/fused_moe) where a dense MLP runs three.
MOE_EXTRA_KERNELS = 4
HEAD_KERNELS = 3  # the final norm, the LM-head GEMM, the sampler
CUSTOM_AR_MAX_BYTES = 8 * 2**20  # vLLM's custom all-reduce buffer (custom_all_reduce.py max_size)
CUSTOM_AR_SIZES = (2, 4, 6, 8)  # world sizes its kernels support


def custom_all_reduce_s(size_bytes: float, n: int, net: Network) -> float | None:
    """vLLM's custom all-reduce of `size_bytes` over `n` GPUs of one P2P domain (module docstring);
    None where vLLM would use NCCL/RCCL instead."""
    if n not in CUSTOM_AR_SIZES or n > net.nvlink_domain or net.link_family == "pcie" or size_bytes > CUSTOM_AR_MAX_BYTES:
        return None
    c = fitted_network_constants()
    link = net.nvlink_gbyte_s * 0.5e9 * c.ring_efficiency(net.link_family)
    rate = link * (n - 1) / (net.nvlink_domain - 1) if net.topology == "mesh" else link
    one_shot = 2 * c.link_latency_s + size_bytes * (n - 1) / rate
    two_shot = 3 * c.link_latency_s + 2 * size_bytes * (n - 1) / n / rate
    return min(one_shot, two_shot)


def deepep_network() -> NetworkConstants:
    """The network constants DeepEP's all-to-alls run at: NCCL's rates and per-level latency, no
    per-remote-peer latency or chunk pipeline (module docstring)."""
    return replace(fitted_network_constants(), a2a_peer_latency_s=0.0, chunk_latency_s=0.0)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, pp: int, kv_bytes: float) -> float:
    """KV-cache bytes one token occupies on each GPU of a tp x pp group: 2*L*H_kv*d_h*b divided over TP by
    KV heads (replicated when tp > H_kv, as vLLM does; vllm/worker/cache_engine.py) and over PP by
    layers; MLA caches one latent per token, replicated over TP (the layer's
    :attr:`~shardwise.specs.model.ModelSpec.attention_core`)."""
    total = model.kv_cache_bytes_per_token(kv_bytes)
    return total * model.attention_core.kv_share(tp) / pp


def busiest_share(routed: float, ep: int) -> float:
    """Routed token copies the busiest of `ep` GPUs receives, of `routed` spread uniformly (module docstring)."""
    if ep <= 1 or routed <= 0:
        return routed
    mean = routed / ep
    return mean + math.sqrt(2.0 * math.log(ep) * routed * (1.0 / ep) * (1.0 - 1.0 / ep))


@dataclass(frozen=True)
class StepTimer:
    """Seconds per iteration for one replica (tp x dp GPUs per stage, pp stages) of `gpu` serving `model`."""

    model: ModelSpec
    gpu: GPU
    tp: int
    pp: int
    precision: Precision
    constants: ServingConstants
    dp: int = 1  # data-parallel attention ranks (MoE): the batch is split over them
    ep: int = 1  # expert-parallel GPUs (1: experts sharded by TP inside each rank)
    expert_imbalance: float = 1.0  # extra load of the busiest EP GPU over uniform routing's spread
    overlap_host: bool = False  # the engine schedules the next step while the GPU runs this one

    # --- rates (computed once) -------------------------------------------------------------------
    @cached_property
    def device(self) -> Device:
        consts = self.constants.device_constants()
        dev = Device.of(self.gpu, self.precision.activations, consts.compute_for(self.gpu.name), self.constants.attention_kernel)
        speedup = self.precision.attention_speedup(self.gpu.arch)
        return replace(dev, attention_peak_flops=dev.attention_peak_flops * speedup) if speedup != 1.0 else dev

    @cached_property
    def flop_rate(self) -> float:
        """Achieved FLOP/s of 16-bit GEMMs (LM head, router, LoRA adapters)."""
        return self.device.peak_flops * self.device.gemm_efficiency

    @cached_property
    def linear_rate(self) -> float:
        """Achieved FLOP/s of the block linears in the weight format (W8A8 FP8 / W4A4 FP4 on their tensor
        cores, else the 16-bit rate)."""
        dtype = self.precision.compute_dtype(lambda d: d in self.gpu.tflops)
        if dtype is None:
            return self.flop_rate
        compute = self.constants.device_constants().compute_for(self.gpu.name)
        eff = compute.fp4_gemm_efficiency if dtype == "fp4" else compute.fp8_gemm_efficiency
        return self.gpu.peak_flops(dtype) * eff

    @cached_property
    def attn_rate(self) -> float:
        return self.device.attention_peak_flops * self.device.attention_efficiency

    @cached_property
    def mem_rate(self) -> float:
        return self.device.hbm_rate

    # --- weights and FLOPs per GPU ---------------------------------------------------------------
    @cached_property
    def _experts_apart(self) -> bool:
        """Routed experts timed as their own group (MoE models)."""
        return self.model.is_moe

    @cached_property
    def _linear_weights(self) -> tuple[float, float]:
        """(block-linear weights one token touches outside the routed experts, router weights), per GPU,
        summed from the layer's description (:meth:`~shardwise.specs.model.ModelSpec.linears`)."""
        m = self.model
        lin = (m.layers - m.moe_layers) * sum(x.active_weights for x in m.linears(False) if x.block in DENSE_BLOCKS)
        lin += m.moe_layers * sum(x.active_weights for x in m.linears(True) if x.block in DENSE_BLOCKS)
        router = m.moe_layers * sum(x.weights for x in m.linears(True) if x.block == "router")
        return lin / self.tp, router / self.tp

    @cached_property
    def lin_flops_per_token(self) -> float:
        return 2.0 * self._linear_weights[0]

    @cached_property
    def router_flops_per_token(self) -> float:
        return 2.0 * self._linear_weights[1]

    @cached_property
    def lin_bytes(self) -> float:
        """Bytes streamed each iteration outside the routed experts and the LM head, per GPU: the block
        linears in the weight format, router and norms in 16-bit."""
        m = self.model
        lin, router = self._linear_weights
        norms = (2 * m.layers + 1) * m.norm_params / self.tp
        return lin * self.precision.weight_bytes + (router + norms) * ACT_BYTES

    @cached_property
    def gemm_offset_nk(self) -> float:
        """d0 x the FLOP-weighted mean of (1/n + 1/k) over a dense layer's GEMMs: their small-dimension
        cost (Device.gemm_s) apart from the tokens' d0 / m, which :meth:`iteration_s` adds per iteration."""
        m = self.model
        width, copies = (m.d_expert, m.shared_experts) if m.is_moe else (m.ffn, 1)
        shapes = linear_shapes(m, width or m.ffn, self.tp)
        weights = [n * k * c for (n, k), c in zip(shapes, (1, 1, max(copies, 1), max(copies, 1)), strict=True)]
        return self.device.gemm_dim_offset * sum(w * (1 / n + 1 / k) for w, (n, k) in zip(weights, shapes, strict=True)) / sum(weights)

    @cached_property
    def _expert_shape(self) -> tuple[float, float, float]:
        """(weights of one expert on one GPU, d0*(1/n + 1/k) of its GEMMs, local experts per GPU)."""
        m = self.model
        split = 1 if self.ep > 1 else self.tp  # EP keeps experts whole; otherwise TP shards each one
        shapes = linear_shapes(m, m.d_expert, split)[2:]
        weights = [n * k for n, k in shapes]
        offset = self.device.gemm_dim_offset * sum(w * (1 / n + 1 / k) for w, (n, k) in zip(weights, shapes, strict=True)) / sum(weights)
        local = m.experts / self.ep if self.ep > 1 else m.experts
        return m.expert_params / split, offset, local

    def expert_s(self, tokens: float) -> float:
        """Routed experts of all MoE layers for `tokens` tokens of the whole replica (all dp ranks)."""
        m = self.model
        if not m.is_moe or tokens <= 0:
            return 0.0
        per_expert, offset_nk, local = self._expert_shape
        e, k = m.experts, m.top_k
        touched = 1.0 - (1.0 - k / e) ** tokens  # chance an expert gets at least one token
        rows = busiest_share(tokens * k, self.ep) * (self.expert_imbalance if self.ep > 1 else 1.0)  # token copies on this GPU
        active = local * touched
        d0 = self.device.gemm_dim_offset
        work = rows * (1.0 + offset_nk) + d0 * active  # each active expert's GEMM pays d0 on its rows
        flops = 2.0 * per_expert * work * m.moe_layers
        weights = per_expert * active * m.moe_layers * self.precision.weight_bytes
        return max(flops / self.linear_rate, weights / self.mem_rate)

    @cached_property
    def head_flops_per_row(self) -> float:
        return 2.0 * self.model.hidden * self.model.vocab / self.tp

    @cached_property
    def head_bytes(self) -> float:
        return self.model.hidden * self.model.vocab * ACT_BYTES / self.tp

    # --- attention ---------------------------------------------------------------------------------
    @cached_property
    def decode_pair_flops(self) -> float:
        """FLOPs per (query, key) pair of a decode step, all layers, per GPU (MLA absorbed: over the latent)."""
        m = self.model
        return m.attention_core.pair_flops(decode=True) * m.layers / self.tp

    @cached_property
    def pair_flops(self) -> float:
        """FLOPs per (query, key) pair of a prefill, all layers, per GPU."""
        m = self.model
        return m.attention_core.pair_flops() * m.layers / self.tp

    @cached_property
    def decode_attn_s_per_token(self) -> float:
        """Seconds per context token of one decoding sequence (all layers), for the whole replica: the
        context of the dp ranks is read in parallel."""
        kv = kv_bytes_per_token_per_gpu(self.model, self.tp, 1, self.precision.kv_bytes)
        return max(kv / self.mem_rate, self.decode_pair_flops / self.attn_rate) / self.dp

    @cached_property
    def prefill_attn_s_per_pair(self) -> float:
        """Seconds per pair-equivalent of :meth:`prefill_pairs` (the kernel's asymptote at this head dimension)."""
        core = self.model.attention_core
        factor = self.device.attention_shape.head_dim_factor((core.d_qk + core.d_v) / 2.0)
        return self.pair_flops / (self.attn_rate * factor) / self.dp

    def prefill_pairs(self, done: int, chunk: int) -> float:
        """The fused kernel's work for `chunk` new tokens over `done` cached ones, in (query, key) pairs
        (module docstring: the tile model's steps x TILE^2). It depends on the tokens only through their
        tile counts (cost.attention: max(1, ceil(tokens / TILE))), so it is kept per pair of counts."""
        if chunk <= 0:
            return 0.0
        key = (max(1, math.ceil(chunk / TILE)), max(1, math.ceil((done + chunk) / TILE)))
        pairs = self._pairs_by_tiles.get(key)
        if pairs is None:
            steps, _, _ = tile_steps(chunk, done + chunk, True, False, self.device.attention_shape.c0_fwd)
            pairs = self._pairs_by_tiles[key] = steps * TILE * TILE
        return pairs

    @cached_property
    def _pairs_by_tiles(self) -> dict[tuple[int, int], float]:
        return {}

    # --- communication -----------------------------------------------------------------------------
    @cached_property
    def _cluster(self) -> Cluster:
        """The replica's GPUs (whole nodes once it spans more than one), for the network model."""
        per_node, gpus = self.gpu.gpus_per_node, self.tp * self.pp * self.dp
        return make_cluster(self.gpu, gpus if gpus <= per_node else -(-gpus // per_node) * per_node)

    def tp_all_reduces_s(self, rank_tokens: float) -> float:
        """The 2L TP all-reduces of an iteration over `rank_tokens` tokens (custom kernels where vLLM uses them)."""
        if self.tp <= 1:
            return 0.0
        size = rank_tokens * self.model.hidden * ACT_BYTES
        t = custom_all_reduce_s(size, self.tp, self._cluster.network)
        if t is None:
            t = collective_s("all_reduce", size, self.tp, self._tp_tier)
        return 2 * self.model.layers * t

    @cached_property
    def _tp_tier(self) -> CommGroup:
        return self._cluster.tier_for(self.tp, 1)

    @cached_property
    def comm_coeffs(self) -> tuple[float, float]:
        """(seconds per iteration, seconds per token of one rank) of PP sends and EP all-to-alls."""
        m, per_token = self.model, self.model.hidden * ACT_BYTES
        fixed = per = 0.0
        if self.pp > 1:
            latency_s, token_s = self._collective_terms("send_recv", per_token, 2, self._cluster.tier_for(2, self.tp * self.dp))
            fixed, per = fixed + (self.pp - 1) * latency_s, per + (self.pp - 1) * token_s
        if self.ep > 1:
            tier = self._cluster.tier_for(self.ep, 1)
            dispatch = 1.0 if self.precision.weights == "fp8" else ACT_BYTES  # DeepEP dispatches FP8 with FP8 experts
            for b in (dispatch, ACT_BYTES):
                latency_s, token_s = self._collective_terms("all_to_all", m.top_k * m.hidden * b, self.ep, tier, deepep_network())
                fixed, per = fixed + m.moe_layers * latency_s, per + m.moe_layers * token_s
        return fixed, per

    @staticmethod
    def _collective_terms(kind: str, per_token_bytes: float, n: int, tier: CommGroup,
                          constants: NetworkConstants | None = None) -> tuple[float, float]:
        """(latency, seconds per token) of one collective in the network model: its transfer time is
        linear in the bytes, the latency the rest."""
        transfer_s = collective_s(kind, per_token_bytes, n, tier, constants, latency=False)
        return collective_s(kind, per_token_bytes, n, tier, constants) - transfer_s, transfer_s

    # --- iteration time ----------------------------------------------------------------------------
    def iteration_s(self, tokens: int, n_seqs: int, n_logits: int, decode_ctx: float = 0.0, prefill_pairs: float = 0.0,
                    decoders: int = 0) -> float:
        """One iteration: `tokens` scheduled (prefill chunks + decodes), `n_seqs` sequences, `n_logits`
        of them sampling, `decode_ctx` context tokens read by decodes, `prefill_pairs` attention pairs
        (all counts over the whole replica, its dp ranks together); `decoders` of the tokens are decodes
        (what a speculative timer charges differently)."""
        if tokens <= 0:
            return 0.0
        (dp, d0, offset_nk, lin_flops, linear_rate, router_flops, flop_rate, lin_time_floor, experts_apart,
         head_d0, head_flops, head_floor, fixed, per, kernels_s, attn_s_per_token, attn_s_per_pair, step_overhead_s,
         per_seq_overhead_s, overlap_host) = self._iteration_terms
        rank_tokens = tokens / dp if dp > 1 else tokens
        work = rank_tokens * (1.0 + offset_nk) + d0  # each GEMM works as if every dimension were d0 longer (Device.gemm_s)
        body = max(work * lin_flops / linear_rate + rank_tokens * router_flops / flop_rate, lin_time_floor)
        if experts_apart:
            body += self.expert_s(tokens)
        rows = n_logits / dp if dp > 1 else n_logits
        head_work = rows * (1.0 + head_d0) + d0
        head = max(head_work * head_flops / flop_rate, head_floor) if n_logits else 0.0
        gpu = (body + head + fixed + (self.tp_all_reduces_s(rank_tokens) if self.tp > 1 else 0.0) + kernels_s
               + per * rank_tokens + decode_ctx * attn_s_per_token + prefill_pairs * attn_s_per_pair)
        host = step_overhead_s + per_seq_overhead_s * (n_seqs / dp if dp > 1 else n_seqs)  # host_overhead_s
        return max(gpu, host) if overlap_host else gpu + host

    @cached_property
    def _iteration_terms(self) -> tuple:
        """The constants :meth:`iteration_s` reads, looked up once (it runs once per simulated iteration)."""
        d0, m, c = self.device.gemm_dim_offset, self.model, self.constants
        fixed, per = self.comm_coeffs
        return (self.dp, d0, self.gemm_offset_nk, self.lin_flops_per_token, self.linear_rate, self.router_flops_per_token,
                self.flop_rate, self.lin_bytes / self.mem_rate, self._experts_apart,
                d0 * (self.tp / m.vocab + 1.0 / m.hidden), self.head_flops_per_row, self.head_bytes / self.mem_rate,
                fixed, per, self.kernels_s, self.decode_attn_s_per_token, self.prefill_attn_s_per_pair,
                c.step_overhead_s, c.per_seq_overhead_s, self.overlap_host)

    @cached_property
    def kernels_s(self) -> float:
        """GPU time per iteration of its kernels' fixed costs (Device.kernel_overhead_s each, the launch gap
        the training runs fit): KERNELS_PER_LAYER a layer, MOE_EXTRA_KERNELS more per MoE layer, the head's."""
        kernels = KERNELS_PER_LAYER * self.model.layers + MOE_EXTRA_KERNELS * self.model.moe_layers + HEAD_KERNELS
        return kernels * self.device.kernel_overhead_s

    def host_overhead_s(self, n_seqs: float) -> float:
        """The engine's CPU time per iteration with `n_seqs` sequences on a rank (scheduling, input
        preparation, sampled-token transfer, output processing), during which the GPU idles."""
        c = self.constants
        return c.step_overhead_s + c.per_seq_overhead_s * n_seqs

    def decode_fixed_table(self, max_batch: int) -> np.ndarray:
        """A[B]: seconds of a decode-only step with B sequences, excluding the context term."""
        return np.array([self.iteration_s(b, b, b) for b in range(max_batch + 1)])

    def prefill_s(self, prompt_tokens: int) -> float:
        """One whole prompt prefilled alone (the TTFT floor without queueing)."""
        return self.iteration_s(prompt_tokens, 1, 1, 0.0, self.prefill_pairs(0, prompt_tokens))


def kv_transfer_s(model: ModelSpec, prompt_tokens: np.ndarray, kv_bytes: float, link_gbps: float, efficiency: float) -> np.ndarray:
    """Prefill->decode KV transfer: KV bytes / link bandwidth (splitwise-sim's KV flows; Vidur PR #80)."""
    kv = model.kv_cache_bytes_per_token(kv_bytes)
    return prompt_tokens * kv / (link_gbps / 8 * 1e9 * efficiency)
