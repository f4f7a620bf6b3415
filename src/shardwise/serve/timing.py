"""Iteration time of one serving replica: a roofline per operation group, plus TP/PP communication.

t = max(F_body / (peak*eta_c), W_body / (BW*eta_m))            weights GEMMs over T = prefill + decode tokens
  + max(F_head / (peak*eta_c), W_head / (BW*eta_m))            LM head, only for rows that sample a token
  + S_dec * max(KV_tok / (BW*eta_m), F_attn_tok / (peak*eta_a)) decode attention over S_dec context tokens
  + P_pf * F_pair / (peak*eta_a)                               prefill attention over P_pf (query, key) pairs
  + 2L * all_reduce(T*h*2 B, tp) + (pp-1) * send(T*h*2 B)      Megatron TP (Vidur execution_time.py) and PP,
                                                               times (latency included) of cost.comm's
                                                               network model, fitted on nccl-tests
  + (KERNELS_PER_LAYER * L + 3) * kernel_overhead             the kernels' fixed costs (the device model's)
  + step_overhead + per_seq_overhead * n_seqs                  CPU-side scheduling and sampling
(roofline per op: LLM-Viewer roofline_model.py, GenZ get_roofline; TP all-reduces: Vidur). The rates are
the one device model's (:mod:`shardwise.cost.device`): peak x the GPU family's fitted GEMM efficiency,
HBM x its streaming efficiency, the attention kernel's efficiency. A PP replica runs pp
micro-batches in flight (vLLM virtual engines); each takes the whole model's time, so weights count
once per iteration and the stages' sends are added. Attention FLOPs per (query, key) pair and layer:
2*heads*(d_qk + d_v) (PaLM App. B). MoE layers stream only the experts the batch routes to:
E*(1 - (1 - k/E)^T) of them in expectation (uniform routing; derived).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shardwise.cost.comm import collective_s
from shardwise.cost.device import Device
from shardwise.cost.flops import layer_matmul_weights_active, linear_shapes
from shardwise.serve.constants import ServingConstants
from shardwise.serve.memory import kv_bytes_per_token_per_gpu
from shardwise.specs.hardware import GPU, Cluster, CommGroup, make_cluster
from shardwise.specs.model import ModelSpec

ACT_BYTES = 2.0  # activations travel in 16-bit even with fp8 weights
# Kernels a decoder layer launches besides its TP collectives, vLLM's LlamaDecoderLayer under CUDA graphs
# (vllm/model_executor/models/llama.py): two fused residual-add + RMSNorm, the QKV, O, gate-up and down
# GEMMs, rotary embedding, the KV-cache write, the attention kernel, SiLU-and-mul.
KERNELS_PER_LAYER = 10
HEAD_KERNELS = 3  # the final norm, the LM-head GEMM, the sampler


@dataclass(frozen=True)
class StepTimer:
    """Seconds per iteration for one replica (tp GPUs per stage, pp stages) of `gpu` serving `model`."""

    model: ModelSpec
    gpu: GPU
    tp: int
    pp: int
    precision: str
    bytes_per_element: float
    constants: ServingConstants

    # --- coefficients (computed once) ------------------------------------------------------------
    @cached_property
    def device(self) -> Device:
        consts = self.constants.device_constants()
        return Device.of(self.gpu, self.precision, consts.compute_for(self.gpu.name), self.constants.attention_kernel)

    @cached_property
    def flop_rate(self) -> float:
        return self.device.peak_flops * self.device.gemm_efficiency

    @cached_property
    def gemm_offset_nk(self) -> float:
        """d0 x the FLOP-weighted mean of (1/n + 1/k) over a layer's GEMMs: their small-dimension cost
        (Device.gemm_s) apart from the tokens' d0 / m, which :meth:`iteration_s` adds per iteration."""
        m = self.model
        width, copies = (m.d_expert, m.top_k + m.shared_experts) if m.is_moe else (m.ffn, 1)
        shapes = linear_shapes(m, width, self.tp)
        weights = [n * k * c for (n, k), c in zip(shapes, (1, 1, copies, copies), strict=True)]  # FLOPs per token
        return self.device.gemm_dim_offset * sum(w * (1 / n + 1 / k) for w, (n, k) in zip(weights, shapes, strict=True)) / sum(weights)

    @cached_property
    def attn_rate(self) -> float:
        return self.device.attention_peak_flops * self.device.attention_efficiency

    @cached_property
    def mem_rate(self) -> float:
        return self.device.hbm_rate

    @cached_property
    def body_flops_per_token(self) -> float:
        """2 x matmul weights a token touches in all layers, per GPU."""
        m = self.model
        dense = (m.layers - m.moe_layers) * layer_matmul_weights_active(m, False)
        moe = m.moe_layers * layer_matmul_weights_active(m, True) if m.is_moe else 0
        return 2.0 * (dense + moe) / self.tp

    @cached_property
    def head_flops_per_row(self) -> float:
        return 2.0 * self.model.hidden * self.model.vocab / self.tp

    @cached_property
    def head_bytes(self) -> float:
        return self.model.hidden * self.model.vocab * self.bytes_per_element / self.tp

    @cached_property
    def _body_bytes_parts(self) -> tuple[float, float]:
        """(bytes always streamed, bytes per routed expert over all MoE layers), per GPU."""
        m = self.model
        lm = m.hidden * m.vocab
        embed = 0 if m.tied_embeddings else m.embedding_params
        total = m.params_total - embed - lm  # the LM head is timed on its own
        if not m.is_moe:
            return total * self.bytes_per_element / self.tp, 0.0
        routed = m.moe_layers * m.experts * m.expert_params
        per_expert = m.moe_layers * m.expert_params
        return (total - routed) * self.bytes_per_element / self.tp, per_expert * self.bytes_per_element / self.tp

    def body_bytes(self, tokens: float) -> float:
        fixed, per_expert = self._body_bytes_parts
        if per_expert == 0.0 or tokens <= 0:
            return fixed
        e, k = self.model.experts, self.model.top_k
        active = e * (1.0 - (1.0 - k / e) ** tokens)
        return fixed + per_expert * active

    @cached_property
    def decode_attn_s_per_token(self) -> float:
        """Seconds per context token of one decoding sequence (all layers)."""
        kv = kv_bytes_per_token_per_gpu(self.model, self.tp, 1, self.bytes_per_element)
        return max(kv / self.mem_rate, self.pair_flops / self.attn_rate)

    @cached_property
    def pair_flops(self) -> float:
        m = self.model
        return 2.0 * m.heads * (m.d_head + m.d_v_head) * m.layers / self.tp

    @cached_property
    def prefill_attn_s_per_pair(self) -> float:
        return self.pair_flops / self.attn_rate

    @cached_property
    def _cluster(self) -> Cluster:
        """The replica's GPUs (whole nodes once it spans more than one), for the network model."""
        per_node, gpus = self.gpu.gpus_per_node, self.tp * self.pp
        return make_cluster(self.gpu, gpus if gpus <= per_node else -(-gpus // per_node) * per_node)

    @cached_property
    def comm_coeffs(self) -> tuple[float, float]:
        """(seconds per iteration, seconds per token) of TP all-reduces and PP sends."""
        m, per_token = self.model, self.model.hidden * ACT_BYTES
        fixed = per = 0.0
        if self.tp > 1:
            latency_s, token_s = self._collective_terms("all_reduce", per_token, self.tp, self._cluster.tier_for(self.tp, 1))
            fixed, per = fixed + 2 * m.layers * latency_s, per + 2 * m.layers * token_s
        if self.pp > 1:
            latency_s, token_s = self._collective_terms("send_recv", per_token, 2, self._cluster.tier_for(2, self.tp))
            fixed, per = fixed + (self.pp - 1) * latency_s, per + (self.pp - 1) * token_s
        return fixed, per

    @staticmethod
    def _collective_terms(kind: str, per_token_bytes: float, n: int, tier: CommGroup) -> tuple[float, float]:
        """(latency, seconds per token) of one collective in the network model: its transfer time is
        linear in the bytes, the latency the rest."""
        transfer_s = collective_s(kind, per_token_bytes, n, tier, latency=False)
        return collective_s(kind, per_token_bytes, n, tier) - transfer_s, transfer_s

    # --- iteration time --------------------------------------------------------------------------
    def iteration_s(self, tokens: int, n_seqs: int, n_logits: int, decode_ctx: float = 0.0, prefill_pairs: float = 0.0) -> float:
        """One iteration: `tokens` scheduled (prefill chunks + decodes), `n_seqs` sequences, `n_logits`
        of them sampling, `decode_ctx` context tokens read by decodes, `prefill_pairs` attention pairs."""
        if tokens <= 0:
            return 0.0
        d0 = self.device.gemm_dim_offset  # each GEMM works as if every dimension were d0 longer (Device.gemm_s)
        work = tokens * (1.0 + self.gemm_offset_nk) + d0
        body = max(work * self.body_flops_per_token / self.flop_rate, self.body_bytes(tokens) / self.mem_rate)
        head_work = n_logits * (1.0 + d0 * (self.tp / self.model.vocab + 1.0 / self.model.hidden)) + d0
        head = max(head_work * self.head_flops_per_row / self.flop_rate, self.head_bytes / self.mem_rate) if n_logits else 0.0
        fixed, per = self.comm_coeffs
        return (body + head + fixed + self.kernels_s + per * tokens + self.host_overhead_s(n_seqs)
                + decode_ctx * self.decode_attn_s_per_token + prefill_pairs * self.prefill_attn_s_per_pair)

    @cached_property
    def kernels_s(self) -> float:
        """GPU time per iteration of its kernels' fixed costs (Device.kernel_overhead_s each, the launch gap
        the training runs fit): KERNELS_PER_LAYER a layer plus the head's."""
        return (KERNELS_PER_LAYER * self.model.layers + HEAD_KERNELS) * self.device.kernel_overhead_s

    def host_overhead_s(self, n_seqs: int) -> float:
        """The engine's CPU time per iteration with `n_seqs` sequences (scheduling, input preparation,
        sampled-token transfer, output processing), during which the GPU idles."""
        c = self.constants
        return c.step_overhead_s + c.per_seq_overhead_s * n_seqs

    def decode_fixed_table(self, max_batch: int) -> np.ndarray:
        """A[B]: seconds of a decode-only step with B sequences, excluding the context term."""
        return np.array([self.iteration_s(b, b, b) for b in range(max_batch + 1)])

    def prefill_s(self, prompt_tokens: int) -> float:
        """One whole prompt prefilled alone (the TTFT floor without queueing)."""
        return self.iteration_s(prompt_tokens, 1, 1, 0.0, prefill_pairs(0, prompt_tokens))


def prefill_pairs(done: int, chunk: int) -> float:
    """Causal (query, key) pairs when `chunk` new tokens attend to `done` cached ones plus themselves."""
    return chunk * done + chunk * (chunk + 1) / 2.0


def kv_transfer_s(model: ModelSpec, prompt_tokens: np.ndarray, bytes_per_element: float, link_gbps: float, efficiency: float) -> np.ndarray:
    """Prefill->decode KV transfer: KV bytes / link bandwidth (splitwise-sim's KV flows; Vidur PR #80)."""
    kv = model.kv_cache_bytes_per_token(bytes_per_element)
    return prompt_tokens * kv / (link_gbps / 8 * 1e9 * efficiency)
