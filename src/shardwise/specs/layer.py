"""One description of a transformer layer: its linear layers, norms and attention core, declared once.

Everything that needs a layer's shapes reads them here (through :meth:`ModelSpec.linears`,
:meth:`ModelSpec.norms` and :attr:`ModelSpec.attention_core`): the parameter counts, the FLOPs
(:mod:`shardwise.cost.flops`), the layer's GEMMs and activations (:mod:`shardwise.cost.layer`,
:mod:`shardwise.cost.activations`), LoRA's targets (:mod:`shardwise.cost.adapters`,
:mod:`shardwise.serve.adapters`), the serving timer and memory (:mod:`shardwise.serve.timing`,
:mod:`shardwise.serve.memory`) and the executor's model (:mod:`shardwise.execute.model`). An architecture
feature that changes a layer's shapes is a field of the spec plus its entries here.

Shapes (each a matmul y = x W with W of in_features x out_features):

- Standard attention (Vaswani et al. 2017; GQA, Ainslie et al. 2023): q (h -> a d_qk), k (h -> g d_qk),
  v (h -> g d_v), o (a d_v -> h), a query heads, g key/value heads; Hugging Face's q/k/v/o_proj.
- Multi-head latent attention (DeepSeek-V2 report, arXiv:2405.04434, Sec. 2.1; DeepSeek-V3's
  config.json names): q_a (h -> q_lora_rank) with its RMSNorm, q_b (q_lora_rank -> a d_qk), or one q
  (h -> a d_qk) without query compression; kv_a (h -> kv_lora_rank + rope) with its RMSNorm over the
  latent, kv_b (kv_lora_rank -> a (d_qk - rope + d_v)); o (a d_v -> h). The down-projections are
  replicated over tensor parallelism (vLLM's DeepseekV2MLAAttention: q_a_proj and kv_a_proj_with_mqa are
  ReplicatedLinear); the training and serving cost models still split every attention matmul over tp
  (their approximation, small: the down-projections are ~4% of DeepSeek-V3's attention weights).
- MLP: gated (SwiGLU, Shazeer 2020: gate and up h -> f, down f -> h) or not (GeLU: up h -> f, down
  f -> h); biases on every linear with ``linear_bias`` (GPT-2, Megatron GPT), on q/k/v with ``qkv_bias``.
- Mixture of experts (Shazeer et al. 2017; Mixtral, DeepSeekMoE): the router (h -> E, replicated), E
  routed experts of which a token passes top_k, and always-active shared experts, each an MLP of width
  d_expert.
- Tensor parallelism (Shoeybi et al. 2019, Megatron-LM Sec. 3): column-parallel layers split their
  outputs (q, k, v, gate, up), row-parallel ones their inputs (o, down).
- KV cache per token and layer: standard attention keeps K and V, g (d_qk + d_v) values, split over TP
  by KV heads (vLLM cache_engine); MLA keeps the latent and the rope key, kv_lora_rank + rope values,
  one copy per TP rank (DeepSeek-V2 report Sec. 2.1.2).
- Attention-core FLOPs per (query, key) pair and layer: 2 a (d_qk + d_v) (PaLM App. B: QK^T and AV);
  MLA decodes with the up-projections absorbed, over the latent: 2 a (2 c + rope) (DeepSeek-V2 report
  Sec. 2.1.2; FlashMLA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from shardwise.specs.model import ModelSpec

Block = Literal["attention", "mlp", "experts", "shared_experts", "router"]
Parallel = Literal["column", "row", "replicated"]
#: Blocks whose linears every token of a layer passes (the routed experts pass top_k of their copies).
DENSE_BLOCKS = ("attention", "mlp", "shared_experts")


@dataclass(frozen=True)
class Linear:
    """One linear layer of a transformer layer: y = x W (+ b), W in_features x out_features."""

    name: str  # Hugging Face module name without _proj: q, k, v, o, gate, up, down; MLA q_a, q_b, kv_a, kv_b; router
    in_features: int
    out_features: int
    block: Block
    parallel: Parallel  # how tensor parallelism splits it (module docstring)
    bias: bool = False
    count: int = 1  # copies in the layer (routed experts: experts; shared experts: shared_experts)
    active: int = 1  # copies one token passes (routed experts: top_k)

    @property
    def weights(self) -> int:
        """Matmul weights of one copy."""
        return self.in_features * self.out_features

    @property
    def params(self) -> int:
        """Weights and biases of all copies."""
        return self.count * (self.weights + (self.out_features if self.bias else 0))

    @property
    def active_weights(self) -> int:
        """Matmul weights one token multiplies."""
        return self.active * self.weights

    @property
    def active_params(self) -> int:
        """Weights and biases one token touches."""
        return self.active * (self.weights + (self.out_features if self.bias else 0))


@dataclass(frozen=True)
class Norm:
    """One normalisation layer of a transformer layer (LayerNorm: weight and bias; RMSNorm: a weight)."""

    name: str
    width: int
    params: int
    block: Literal["layer", "attention"] = "layer"  # "attention": inside the attention block (MLA's latents)


@dataclass(frozen=True)
class AttentionCore:
    """The attention kernel's shapes and the KV cache of one layer (module docstring)."""

    heads: int
    kv_heads: int
    d_qk: int
    d_v: int
    kv_values: int  # cached values per token and layer
    kv_split: int  # ways the cache splits over TP (by KV heads; 1: replicated)
    decode_d_qk: int  # per-head dims a decode step multiplies (MLA: absorbed, over the latent)
    decode_d_v: int

    def pair_flops(self, decode: bool = False) -> float:
        """FLOPs per (query, key) pair of one layer (module docstring)."""
        if decode:
            return 2.0 * self.heads * (self.decode_d_qk + self.decode_d_v)
        return 2.0 * self.heads * (self.d_qk + self.d_v)

    def kv_share(self, tp: int) -> float:
        """Share of a token's KV cache on each of `tp` GPUs: ceil(split / tp) / split (replicated when tp
        exceeds the KV heads, as vLLM does)."""
        return -(-self.kv_split // tp) / self.kv_split


def attention_linears(m: ModelSpec) -> tuple[Linear, ...]:
    """The attention block's linear layers (module docstring)."""
    h, a = m.hidden, m.heads
    q_dim, v_dim = a * m.d_head, a * m.d_v_head
    if m.is_mla:
        rope = m.qk_rope_head_dim
        if m.q_lora_rank:
            q: tuple[Linear, ...] = (Linear("q_a", h, m.q_lora_rank, "attention", "replicated"),
                                     Linear("q_b", m.q_lora_rank, q_dim, "attention", "column"))
        else:
            q = (Linear("q", h, q_dim, "attention", "column"),)
        kv = (Linear("kv_a", h, m.kv_lora_rank + rope, "attention", "replicated"),
              Linear("kv_b", m.kv_lora_rank, a * (m.d_head - rope + m.d_v_head), "attention", "column"))
        return (*q, *kv, Linear("o", v_dim, h, "attention", "row"))
    g, qkv_bias = m.n_kv_heads, m.linear_bias or m.qkv_bias
    return (Linear("q", h, q_dim, "attention", "column", qkv_bias),
            Linear("k", h, g * m.d_head, "attention", "column", qkv_bias),
            Linear("v", h, g * m.d_v_head, "attention", "column", qkv_bias),
            Linear("o", v_dim, h, "attention", "row", m.linear_bias))


def mlp_linears(m: ModelSpec, width: int, block: Block = "mlp", count: int = 1, active: int = 1) -> tuple[Linear, ...]:
    """An MLP of intermediate size `width`: gate, up, down (gated) or up, down (module docstring)."""
    h, bias = m.hidden, m.linear_bias
    up = (Linear("gate", h, width, block, "column", bias, count, active),) if m.mlp == "swiglu" else ()
    return (*up, Linear("up", h, width, block, "column", bias, count, active),
            Linear("down", width, h, block, "row", bias, count, active))


def layer_linears(m: ModelSpec, moe_layer: bool) -> tuple[Linear, ...]:
    """Every linear layer of a dense layer, or of an MoE layer (router, routed and shared experts)."""
    if not moe_layer:
        return (*attention_linears(m), *mlp_linears(m, m.ffn))
    shared = mlp_linears(m, m.d_expert, "shared_experts", m.shared_experts, m.shared_experts) if m.shared_experts else ()
    return (*attention_linears(m), Linear("router", m.hidden, m.experts, "router", "replicated"),
            *mlp_linears(m, m.d_expert, "experts", m.experts, m.top_k), *shared)


def layer_norms(m: ModelSpec) -> tuple[Norm, ...]:
    """The layer's norms: before attention and before the MLP, and MLA's RMSNorms over its latents."""
    per = 2 if m.norm == "layernorm" else 1
    norms = [Norm("attention_norm", m.hidden, per * m.hidden), Norm("mlp_norm", m.hidden, per * m.hidden)]
    if m.is_mla:
        if m.q_lora_rank:
            norms.append(Norm("q_a_norm", m.q_lora_rank, m.q_lora_rank, "attention"))
        norms.append(Norm("kv_a_norm", m.kv_lora_rank, m.kv_lora_rank, "attention"))
    return tuple(norms)


def attention_core(m: ModelSpec) -> AttentionCore:
    """The attention kernel's shapes and KV cache (module docstring)."""
    if m.is_mla:
        c, rope = m.kv_lora_rank, m.qk_rope_head_dim
        return AttentionCore(m.heads, m.n_kv_heads, m.d_head, m.d_v_head, c + rope, 1, c + rope, c)
    g = m.n_kv_heads
    return AttentionCore(m.heads, g, m.d_head, m.d_v_head, g * (m.d_head + m.d_v_head), g, m.d_head, m.d_v_head)


def block_weights(linears: tuple[Linear, ...], *blocks: str, parallel: str | None = None) -> int:
    """Matmul weights of one copy of each linear of `blocks` (optionally of one TP `parallel` kind only)."""
    return sum(lin.weights for lin in linears if lin.block in blocks and (parallel is None or lin.parallel == parallel))


def mlp_values(linears: tuple[Linear, ...]) -> int:
    """Width-sized values per token around one MLP copy's activation: each column-parallel linear's
    outputs and each row-parallel linear's inputs (gated: gate, up and their product, 3 f; GeLU: its
    input and output, 2 f). What the activation kernel reads and writes and what autograd keeps."""
    return sum(lin.out_features if lin.parallel == "column" else lin.in_features for lin in linears)



def unknown_parts(m: ModelSpec, linears: set[tuple[str, str]], norms: set[str]) -> list[str]:
    """The parts of `m`'s layers ("block.name" of a linear, a norm's name) outside what a program builds
    (`linears` as (block, name), `norms` by name): what an executor or an export must refuse rather than
    run another network."""
    both = (*m.linears(False), *(m.linears(True) if m.is_moe else ()))
    parts = dict.fromkeys(f"{lin.block}.{lin.name}" for lin in both if (lin.block, lin.name) not in linears)
    return [*parts, *(n.name for n in m.norms() if n.name not in norms)]
