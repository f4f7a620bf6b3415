"""A small GPT-style decoder built from a :class:`~shardwise.specs.model.ModelSpec` (needs torch).

Architecture follows the spec (its linears from the layer's description, :mod:`shardwise.specs.layer`): token embedding (+ learned positions, else RoPE, Su et al. 2021),
``layers`` pre-norm blocks (RMSNorm or LayerNorm; causal attention with ``kv_heads`` < ``heads`` for
GQA/MQA, Ainslie et al. 2023; GELU MLP or SwiGLU, Shazeer 2020), a final norm and an LM head
(optionally tied to the embedding). Dropout is never applied, so runs are deterministic.

Initialisation is deterministic from a seed (normal, std 0.02; output projections scaled by
``1/sqrt(2 * layers)`` as in GPT-2), and every module keeps the same fully qualified parameter name
(``layers.3.attn.wq.weight``) in the full model, in a pipeline stage, and after FSDP/TP, so gradients
can be compared name by name. Attention infers its local head count from the projection width, so
column-wise tensor parallelism (heads split across ranks) needs no change here (torchtitan's pattern).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from shardwise.errors import ShardwiseError
from shardwise.specs.layer import Linear as LinearSpec
from shardwise.specs.layer import unknown_parts
from shardwise.specs.model import ModelSpec

#: The linears of the layer's description (shardwise.specs.layer) this model builds, as (block, name).
BUILT_LINEARS = {("attention", n) for n in ("q", "k", "v", "o")} | {("mlp", n) for n in ("gate", "up", "down")}


def check_executable(spec: ModelSpec) -> None:
    """Raise ShardwiseError for architectures the executor's model does not build."""
    if spec.is_moe:
        raise ShardwiseError(
            f"model {spec.name}: the executor builds dense models only (experts={spec.experts}); "
            "give an inline dense model such as {layers: 4, hidden: 64, heads: 4, ffn: 128, vocab: 256}"
        )
    if spec.is_mla:
        raise ShardwiseError(f"model {spec.name}: multi-head latent attention is not built by the executor; "
                             "use a standard-attention model (kv_lora_rank: 0)")
    unbuilt = unknown_parts(spec, BUILT_LINEARS, {"attention_norm", "mlp_norm"})
    if unbuilt:
        raise ShardwiseError(f"model {spec.name}: the executor's model has no {', '.join(unbuilt)}; it builds q/k/v/o "
                             "attention, a gated or GeLU MLP and two norms a layer (add the module to "
                             "execute/model.py to run it)")
    if spec.d_v_head != spec.d_head:
        raise ShardwiseError(f"model {spec.name}: v_head_dim must equal head_dim for the executor's model")
    if spec.position_embeddings == 0 and spec.d_head % 2:
        raise ShardwiseError(f"model {spec.name}: RoPE needs an even head dim, got {spec.d_head}")


def _linears(spec: ModelSpec, block: str) -> dict[str, LinearSpec]:
    """The layer's linears of `block`, by name, from the spec's description (:meth:`ModelSpec.linears`)."""
    return {lin.name: lin for lin in spec.linears() if lin.block == block}


def _linear(lin: LinearSpec) -> nn.Linear:
    return nn.Linear(lin.in_features, lin.out_features, bias=lin.bias)


def _norm(spec: ModelSpec) -> nn.Module:
    return nn.RMSNorm(spec.hidden, eps=1e-6) if spec.norm == "rmsnorm" else nn.LayerNorm(spec.hidden)


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on ``x`` of shape (batch, seq, heads, d): rotate-half form (Su et al. 2021)."""
    seq, d = x.shape[1], x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1)[None, :, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1)[None, :, None, :].to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads; head counts are read from the weights' width."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.d_head = spec.d_head
        self.rope = spec.position_embeddings == 0
        lin = _linears(spec, "attention")
        self.wq, self.wk, self.wv, self.wo = (_linear(lin[n]) for n in ("q", "k", "v", "o"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.d_head)
        k = self.wk(x).view(b, s, -1, self.d_head)
        v = self.wv(x).view(b, s, -1, self.d_head)
        if self.rope:
            q, k = rope(q), rope(k)
        rep = q.shape[2] // k.shape[2]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """GELU MLP (w1, w2) or SwiGLU (w1 gate, w3 up, w2 down)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        lin = _linears(spec, "mlp")
        self.swiglu = "gate" in lin
        self.w1 = _linear(lin["gate" if self.swiglu else "up"])
        if self.swiglu:
            self.w3 = _linear(lin["up"])
        self.w2 = _linear(lin["down"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.attn_norm = _norm(spec)
        self.attn = Attention(spec)
        self.mlp_norm = _norm(spec)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """Decoder-only LM. Any of ``tok_emb`` / ``norm`` + ``lm_head`` may be ``None`` in a pipeline stage:
    the first stage takes token ids, later ones take hidden states; the last stage returns logits."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.tok_emb: nn.Embedding | None = nn.Embedding(spec.vocab, spec.hidden)
        self.pos_emb: nn.Embedding | None = (
            nn.Embedding(spec.position_embeddings, spec.hidden) if spec.position_embeddings else None
        )
        self.layers = nn.ModuleDict({str(i): Block(spec) for i in range(spec.layers)})
        self.norm: nn.Module | None = _norm(spec)
        self.lm_head: nn.Linear | None = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None:
            h = self.tok_emb(x)
            if self.pos_emb is not None:
                h = h + self.pos_emb(torch.arange(x.shape[1], device=x.device))[None]
        else:
            h = x
        for layer in self.layers.values():
            h = layer(h)
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def init_weights(model: GPT, seed: int) -> None:
    """Deterministic init from ``seed``: N(0, 0.02) for linears and embeddings, output projections (wo, w2)
    N(0, 0.02/sqrt(2L)) (GPT-2, Radford et al. 2019), zero biases, unit norms. Parameters are visited in
    name order, so the result depends on the seed and the spec only."""
    gen = torch.Generator().manual_seed(seed)
    std_out = 0.02 / math.sqrt(2 * model.spec.layers)
    with torch.no_grad():
        seen: set[int] = set()
        for name, p in sorted(model.named_parameters(remove_duplicate=False), key=lambda kv: kv[0]):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)
            else:
                std = std_out if name.endswith(("wo.weight", "w2.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def build_model(spec: ModelSpec, seed: int = 0) -> GPT:
    """The full model, deterministically initialised (fp32, CPU)."""
    check_executable(spec)
    model = GPT(spec)
    init_weights(model, seed)
    return model


def split_layers(num_layers: int, num_stages: int, counts: tuple[int, ...] | None = None) -> list[list[int]]:
    """Contiguous layer ranges per pipeline stage: `counts` layers each (an uneven split), or as even as
    possible (earlier stages take the extra layers; stages may be empty when there are more stages than
    layers: they hold only the embedding or the LM head)."""
    base, extra = divmod(num_layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = counts[s] if counts is not None else base + (1 if s < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def stage_module(full: GPT, stage: int, num_stages: int, counts: tuple[int, ...] | None = None) -> GPT:
    """A copy of ``full`` keeping only stage ``stage``'s layers (embedding on stage 0, norm + head on the
    last); parameter names are unchanged."""
    if full.spec.tied_embeddings and num_stages > 1:
        raise ShardwiseError("tied_embeddings with pipeline parallelism is not supported by the executor "
                             "(embedding and LM head live on different stages); use tied_embeddings: false")
    keep = {str(i) for i in split_layers(len(full.layers), num_stages, counts)[stage]}
    mod = copy.deepcopy(full)
    for key in list(mod.layers.keys()):
        if key not in keep:
            del mod.layers[key]
    if stage != 0:
        mod.tok_emb = None
        mod.pos_emb = None
    if stage != num_stages - 1:
        mod.norm = None
        mod.lm_head = None
    return mod


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all tokens of the (micro-)batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def synthetic_batch(vocab: int, batch: int, seq_len: int, seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and next-token labels for ``step``, the same on every rank (each takes its data-parallel
    slice). Row ``i`` is an arithmetic progression ``(b_i + a_i t) mod vocab`` with random ``a_i, b_i``
    drawn from a fixed seed, so the next token follows from the previous two and the loss falls."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    a = torch.randint(1, vocab, (batch, 1), generator=gen)
    b = torch.randint(0, vocab, (batch, 1), generator=gen)
    tokens = (b + a * torch.arange(seq_len + 1)[None, :]) % vocab
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
