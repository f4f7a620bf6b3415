"""ModelSpec: the architecture numbers of a decoder-only transformer, and how to build one.

A spec comes from a preset name (``data/models.yaml``), a Hugging Face ``config.json`` path
(see :mod:`shardwise.specs.hf_config`) or an inline mapping, resolved by
:func:`shardwise.specs.model_ref.load_model`. Parameter counts are derived from the
architecture alone (derived; checked against the published counts in tests/specs/test_models.py).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, format_validation_error, load_yaml
from shardwise.specs.layer import (
    AttentionCore,
    Linear,
    Norm,
    attention_core,
    layer_linears,
    layer_norms,
    mlp_linears,
)


class ModelSpec(BaseModel):
    """Architecture of a decoder-only transformer (dense or MoE, MHA/GQA/MQA or MLA)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(default="custom", max_length=200, description="label in reports")
    layers: int = Field(gt=0, description="transformer layers")
    hidden: int = Field(gt=0, description="hidden size (model width)")
    heads: int = Field(gt=0, description="attention (query) heads")
    kv_heads: int | None = Field(default=None, gt=0, description="key/value heads; default: heads (MHA); 1 = MQA; fewer = GQA")
    head_dim: int | None = Field(default=None, gt=0, description="query/key head dim; default: hidden / heads")
    v_head_dim: int | None = Field(default=None, gt=0, description="value head dim; default: head_dim")
    ffn: int = Field(gt=0, description="dense MLP intermediate size")
    vocab: int = Field(gt=0, description="vocabulary size")
    mlp: Literal["gelu", "swiglu"] = Field(default="swiglu", description="MLP: gelu (2 matrices) or swiglu (3, gated)")
    norm: Literal["layernorm", "rmsnorm"] = Field(default="rmsnorm", description="normalisation layer")
    tied_embeddings: bool = Field(default=False, description="the LM head shares the input embedding's weights")
    linear_bias: bool = Field(default=False, description="bias on every linear layer (GPT-2, Megatron GPT)")
    qkv_bias: bool = Field(default=False, description="bias on Q/K/V only (Qwen2)")
    position_embeddings: int = Field(default=0, ge=0, description="learned absolute positions (0 = RoPE)")
    dropout: bool = Field(default=False, description="hidden/attention dropout during training")
    # Mixture of experts.
    experts: int = Field(default=0, ge=0, description="routed experts per MoE layer (0 = dense)")
    top_k: int = Field(default=0, ge=0, description="routed experts per token (MoE)")
    expert_ffn: int | None = Field(default=None, gt=0, description="intermediate size of one expert; default: ffn")
    shared_experts: int = Field(default=0, ge=0, description="always-active experts of size expert_ffn")
    dense_layers: int = Field(default=0, ge=0, description="leading dense layers of an MoE model")
    # Multi-head latent attention (DeepSeek-V2/V3); 0 = standard attention.
    q_lora_rank: int = Field(default=0, ge=0, description="MLA query compression rank (0 = uncompressed queries)")
    kv_lora_rank: int = Field(default=0, ge=0, description="MLA key/value compression rank (0 = standard attention)")
    qk_rope_head_dim: int = Field(default=0, ge=0, description="MLA: rotary part of the query/key head dim")
    published_params: float | None = Field(default=None, description="published total parameters, for reference")
    published_active_params: float | None = Field(default=None, description="published active parameters per "
                                                  "token (MoE), for reference")
    source: str | None = Field(default=None, description="where the numbers come from")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({kv})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); give head_dim")
        if self.experts:
            if not 0 < self.top_k <= self.experts:
                raise ValueError(f"top_k must be in 1..experts ({self.experts}), got {self.top_k}")
            if self.dense_layers >= self.layers:
                raise ValueError(f"dense_layers ({self.dense_layers}) must be < layers ({self.layers})")
        elif self.top_k or self.shared_experts:
            raise ValueError("top_k / shared_experts given but experts is 0; set experts for an MoE model")
        if self.kv_lora_rank and not self.qk_rope_head_dim:
            raise ValueError("multi-head latent attention needs qk_rope_head_dim")
        return self

    # The layer, FLOP and stage caches an estimate consults are keyed by the model, so it is hashed a few
    # dozen times per estimate: hash the fields once (the same value pydantic's frozen-model hash gives) and
    # leave that value out of pickles and copies (string hashes differ between processes).
    def __hash__(self) -> int:
        return self._fields_hash

    @cached_property
    def _fields_hash(self) -> int:
        return hash(tuple(self.__dict__[name] for name in type(self).model_fields))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["__dict__"] = {k: v for k, v in state["__dict__"].items() if k != "_fields_hash"}
        return state

    def __copy__(self) -> ModelSpec:  # model_copy(update=...) starts from a copy: it hashes its own fields
        copied = super().__copy__()
        copied.__dict__.pop("_fields_hash", None)
        return copied

    def __deepcopy__(self, memo: dict | None = None) -> ModelSpec:
        copied = super().__deepcopy__(memo)
        copied.__dict__.pop("_fields_hash", None)
        return copied

    # --- shape helpers -------------------------------------------------------------------------
    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        """Query/key head dimension (for MLA: nope + rope)."""
        return self.head_dim or self.hidden // self.heads

    @property
    def d_v_head(self) -> int:
        return self.v_head_dim or self.d_head

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def d_expert(self) -> int:
        return self.expert_ffn or self.ffn

    # --- the layer's description (shardwise.specs.layer) -----------------------------------------
    @cached_property
    def _dense_linears(self) -> tuple[Linear, ...]:
        return layer_linears(self, False)

    @cached_property
    def _moe_linears(self) -> tuple[Linear, ...]:
        return layer_linears(self, True)

    def linears(self, moe_layer: bool = False) -> tuple[Linear, ...]:
        """Every linear layer of a dense layer (or of an MoE layer): name, shape, block, TP split, copies
        (:mod:`shardwise.specs.layer`)."""
        return self._moe_linears if moe_layer else self._dense_linears

    @cached_property
    def _norms(self) -> tuple[Norm, ...]:
        return layer_norms(self)

    def norms(self) -> tuple[Norm, ...]:
        """The normalisation layers of one transformer layer (:mod:`shardwise.specs.layer`)."""
        return self._norms

    @cached_property
    def attention_core(self) -> AttentionCore:
        """The attention kernel's shapes and the KV cache per token and layer (:mod:`shardwise.specs.layer`)."""
        return attention_core(self)

    @cached_property
    def dense_mlp_linears(self) -> tuple[Linear, ...]:
        """A dense layer's MLP."""
        return tuple(lin for lin in self._dense_linears if lin.block == "mlp")

    @cached_property
    def expert_linears(self) -> tuple[Linear, ...]:
        """One expert's MLP (also defined for a dense model: an MLP of width d_expert)."""
        return mlp_linears(self, self.d_expert, "experts")

    @cached_property
    def architecture(self) -> tuple:
        """Everything that fixes the model's shapes: layers, vocabulary, embeddings, and the layer's
        description (its linears dense and MoE, norms, attention core). Two specs with the same
        architecture are the same network whatever their names (an export maps a model to an engine's
        config by it)."""
        moe = (self.dense_layers, self._moe_linears) if self.is_moe else ()
        return (self.layers, self.vocab, self.tied_embeddings, self.position_embeddings, self._dense_linears, moe,
                self._norms, self.attention_core)

    # --- parameter counts (derived from the layer's description) ---------------------------------
    @cached_property
    def attention_params(self) -> int:
        """Attention weights (+biases, + MLA's latent norms) of one layer. MLA: DeepSeek-V2 report Sec. 2.1 (derived)."""
        linears = sum(lin.params for lin in self._dense_linears if lin.block == "attention")
        return linears + sum(n.params for n in self._norms if n.block == "attention")

    @cached_property
    def dense_mlp_params(self) -> int:
        return sum(lin.params for lin in self.dense_mlp_linears)

    @cached_property
    def expert_params(self) -> int:
        """One expert's MLP weights."""
        return sum(lin.params for lin in self.expert_linears)

    @cached_property
    def router_params(self) -> int:
        return sum(lin.params for lin in self._moe_linears if lin.block == "router") if self.is_moe else 0

    @cached_property
    def norm_params(self) -> int:
        """One normalisation layer over the hidden size (LayerNorm has weight and bias; RMSNorm a weight)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    @cached_property
    def embedding_params(self) -> int:
        """Input embedding (+ learned positions)."""
        return self.vocab * self.hidden + self.position_embeddings * self.hidden

    @cached_property
    def lm_head_params(self) -> int:
        """Output projection, 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @cached_property
    def _layer_norm_params(self) -> int:
        return sum(n.params for n in self._norms if n.block == "layer")

    @cached_property
    def layer_params_dense(self) -> int:
        return self.attention_params + self.dense_mlp_params + self._layer_norm_params

    @cached_property
    def layer_params_moe(self) -> int:
        """All weights of one MoE layer (every expert)."""
        return self._moe_params(active=False)

    @cached_property
    def layer_params_moe_active(self) -> int:
        """Weights one token touches in an MoE layer (top-k + shared experts)."""
        return self._moe_params(active=True)

    def _moe_params(self, active: bool) -> int:
        linears = sum(lin.active_params if active else lin.params for lin in self._moe_linears if lin.block != "attention")
        return self.attention_params + linears + self._layer_norm_params

    @cached_property
    def params_total(self) -> int:
        dense = self.layers - self.moe_layers
        body = dense * self.layer_params_dense + self.moe_layers * self.layer_params_moe
        return body + self.embedding_params + self.lm_head_params + self.norm_params

    @cached_property
    def params_active(self) -> int:
        dense = self.layers - self.moe_layers
        body = dense * self.layer_params_dense + self.moe_layers * self.layer_params_moe_active
        return body + self.embedding_params + self.lm_head_params + self.norm_params

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """K and V cache per token over all layers: L·H_kv·(d_qk + d_v)·b (vLLM cache_engine); MLA caches the
        compressed latent plus the rope key: L·(kv_lora_rank + rope)·b (DeepSeek-V2 report Sec. 2.1);
        the values per layer are :attr:`attention_core`'s."""
        return self.layers * self.attention_core.kv_values * bytes_per_element


# --- building specs -----------------------------------------------------------------------------


def _presets() -> dict[str, dict[str, Any]]:
    return load_yaml(data_path("models.yaml"))


def preset_names() -> list[str]:
    return sorted(_presets())


def from_mapping(mapping: dict[str, Any], where: str = "model") -> ModelSpec:
    """Build a spec from an inline mapping; pydantic errors become one ShardwiseError."""
    try:
        return ModelSpec(**mapping)
    except ValidationError as exc:
        raise ShardwiseError(format_validation_error(exc, where)) from None
    except TypeError as exc:
        raise ShardwiseError(f"{where}: {exc}") from None
