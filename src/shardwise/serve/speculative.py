"""Speculative decoding: a proposer drafts k tokens per sequence, the model verifies them in one pass.

With a per-token acceptance rate alpha (each drafted token accepted independently while the ones before
it were), one verification step emits E = (1 - alpha^(k+1)) / (1 - alpha) tokens per sequence on
average (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", Eq. 1: the
accepted drafts plus the model's own next token). alpha depends on the data and the proposer: it is a
workload input (`workload.acceptance_rate`, vLLM reports it as the spec-decode acceptance rate).

A decode step of B sequences costs (derived from what vLLM's and SGLang's spec-decode workers run):
- verification: the model's forward over B(k+1) tokens with B(k+1) logits rows; each sequence's KV is
  read once for its k+1 queries (the decode kernel's bytes) with k+1 times the attention FLOPs;
- drafting: ``draft``, k sequential decode steps of a small model; ``eagle`` / ``eagle3``, k steps of a
  one-layer head of the model's width over the model's features, then an LM head (EAGLE's is the
  model's; EAGLE-3's predicts a 32,000-token draft vocabulary: Li et al. 2025, EAGLE-3, Sec. 3 and its
  released heads' draft_vocab_size); ``mtp``, k steps of the model's multi-token-prediction module, one
  more decoder layer of the model (DeepSeek-V3 report Sec. 2.2) sharing its LM head; ``ngram``, prompt
  lookup on the CPU, no GPU work (vLLM's n-gram proposer).
The proposer also runs over every prompt token (its own prefill). Its weights and its KV cache (the
draft model's layers, or the head's one layer) come out of the KV cache's memory.

The simulator advances decodes one token at a time; a spec step's time is spread over the E tokens it
emits: a decode-only step of B sequences takes (verify + draft) / E per token, so TPOT and throughput
follow in expectation; an iteration that also prefills pays the prompt chunk's marginal cost plus the
decoders' per-token share. ITL, which counts streamed chunks, comes out per token (real chunks carry E
tokens on average).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.serve.config import SpeculativeSpec
from shardwise.serve.precision import Precision
from shardwise.serve.timing import StepTimer, kv_bytes_per_token_per_gpu
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model

EAGLE3_DRAFT_VOCAB = 32000  # Li et al. 2025 (EAGLE-3); yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config draft_vocab_size


def tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens one verification emits per sequence (Leviathan et al. 2023, Eq. 1)."""
    if alpha <= 0:
        return 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def proposer_model(spec: SpeculativeSpec, model: ModelSpec) -> ModelSpec | None:
    """The network the proposer runs (None for n-gram lookup)."""
    if spec.method == "ngram":
        return None
    if spec.method == "draft":
        if spec.draft_model is None:
            raise ShardwiseError("engine.speculative: method draft needs draft_model (a preset such as llama-3.2-1b, "
                                 "a config.json path or a mapping)")
        draft = load_model(spec.draft_model)
        if draft.vocab != model.vocab:
            raise ShardwiseError(f"engine.speculative.draft_model: {draft.name} has a {draft.vocab}-token vocabulary, "
                                 f"{model.name} {model.vocab}; a draft model must share the tokenizer")
        return draft
    if spec.method == "mtp":
        if not model.is_moe and not model.is_mla:
            raise ShardwiseError(f"engine.speculative: method mtp is DeepSeek-V3's multi-token-prediction module; {model.name} "
                                 "has none: use eagle, eagle3, draft or ngram")
        return _variant(model, name=f"{model.name}-mtp", layers=1, dense_layers=0)
    vocab = EAGLE3_DRAFT_VOCAB if spec.method == "eagle3" else model.vocab
    # one dense decoder layer of the model's width (for an MoE model: its dense layers' MLP)
    return _variant(model, name=f"{model.name}-{spec.method}", layers=1, vocab=vocab, experts=0, top_k=0, expert_ffn=None,
                    shared_experts=0, dense_layers=0, published_params=None, published_active_params=None)


def _variant(model: ModelSpec, **changes: Any) -> ModelSpec:
    """`model` with some architecture fields changed (validated afresh: no cached counts carried over)."""
    return ModelSpec(**{**model.model_dump(), "published_params": None, "published_active_params": None, **changes})


@dataclass(frozen=True)
class SpecTimer:
    """A :class:`StepTimer` with speculative decoding: the same interface, decode costs per emitted token."""

    target: StepTimer
    spec: SpeculativeSpec
    alpha: float
    draft: StepTimer | None  # the proposer's network (None: n-gram)

    # --- what other parts read of a timer --------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)

    @cached_property
    def k(self) -> int:
        return self.spec.num_tokens

    @cached_property
    def emitted(self) -> float:
        return tokens_per_step(self.alpha, self.k)

    @cached_property
    def verify_attn_s_per_token(self) -> float:
        """Verification attention per context token: one read of the KV, k+1 queries' FLOPs."""
        t = self.target
        kv = kv_bytes_per_token_per_gpu(t.model, t.tp, 1, t.precision.kv_bytes)
        return max(kv / t.mem_rate, (self.k + 1) * t.decode_pair_flops / t.attn_rate) / t.dp

    @cached_property
    def draft_attn_s_per_token(self) -> float:
        return self.k * self.draft.decode_attn_s_per_token if self.draft is not None else 0.0

    @cached_property
    def decode_attn_s_per_token(self) -> float:
        """Per context token of a decoder, per emitted token."""
        return (self.verify_attn_s_per_token + self.draft_attn_s_per_token) / self.emitted

    def _draft_s(self, decoders: int) -> float:
        """k sequential draft steps for `decoders` sequences (context excluded)."""
        return self.k * self.draft.iteration_s(decoders, decoders, decoders) if self.draft is not None and decoders else 0.0

    def _verify_s(self, prompt_tokens: int, n_seqs: int, prompt_logits: int, pairs: float, decoders: int) -> float:
        rows = decoders * (self.k + 1)
        t = self.target.iteration_s(prompt_tokens + rows, n_seqs, prompt_logits + rows, 0.0, pairs)
        if self.draft is not None and prompt_tokens:
            t += self.draft.iteration_s(prompt_tokens, n_seqs - decoders, 0, 0.0, pairs)  # the proposer's prefill
        return t

    def iteration_s(self, tokens: int, n_seqs: int, n_logits: int, decode_ctx: float = 0.0, prefill_pairs: float = 0.0,
                    decoders: int = 0) -> float:
        """One iteration, its decoders charged per emitted token (module docstring)."""
        if tokens <= 0:
            return 0.0
        prompt = tokens - decoders
        ctx = decode_ctx * (self.verify_attn_s_per_token + self.draft_attn_s_per_token)
        real = self._verify_s(prompt, n_seqs, n_logits - decoders, prefill_pairs, decoders) + self._draft_s(decoders) + ctx
        if not decoders:
            return real
        dec = self._verify_s(0, decoders, 0, 0.0, decoders) + self._draft_s(decoders) + ctx
        return real - (1.0 - 1.0 / self.emitted) * dec

    def decode_fixed_table(self, max_batch: int) -> np.ndarray:
        return np.array([0.0] + [self.iteration_s(b, b, b, decoders=b) for b in range(1, max_batch + 1)])

    def prefill_pairs(self, done: int, chunk: int) -> float:
        return self.target.prefill_pairs(done, chunk)

    def prefill_s(self, prompt_tokens: int) -> float:
        return self.iteration_s(prompt_tokens, 1, 1, 0.0, self.prefill_pairs(0, prompt_tokens))


def make_spec_timer(target: StepTimer, spec: SpeculativeSpec, alpha: float | None) -> tuple[SpecTimer, float, float]:
    """The timer of a pool that speculates, and the proposer's (weight bytes, KV bytes per token) per GPU."""
    from shardwise.serve.memory import weight_bytes_per_gpu

    if alpha is None:
        raise ShardwiseError(f"speculative decoding ({spec.method}) needs workload.acceptance_rate: the chance a drafted "
                             "token is accepted on your data (vLLM reports it as the spec-decode acceptance rate); e.g. "
                             f"acceptance_rate: {{{spec.method}: 0.7}}")
    if target.pp > 1:
        raise ShardwiseError("speculative decoding with pp > 1 is not supported by vLLM; use tp (or replicas) instead")
    draft_model = proposer_model(spec, target.model)
    draft = None
    weights = kv = 0.0
    if draft_model is not None:
        quiet = replace(target.constants, step_overhead_s=0.0, per_seq_overhead_s=0.0)  # one scheduler step covers the drafts
        ep = target.ep if draft_model.is_moe else 1
        precision = target.precision if spec.method == "mtp" else Precision("bf16", target.precision.kv_cache)
        draft = StepTimer(draft_model, target.gpu, target.tp, 1, precision, quiet, target.dp, ep, target.expert_imbalance)
        weights = weight_bytes_per_gpu(draft_model, target.tp, 1, precision, ep)
        if spec.method in ("eagle", "eagle3", "mtp") and draft_model.vocab == target.model.vocab:
            weights -= draft_model.hidden * draft_model.vocab * 2 * 2 / target.tp  # the model's embedding and LM head are shared
        kv = kv_bytes_per_token_per_gpu(draft_model, target.tp, 1, precision.kv_bytes)
    return SpecTimer(target, spec, alpha, draft), max(weights, 0.0), kv
