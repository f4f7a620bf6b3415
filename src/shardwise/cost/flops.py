"""FLOP counts: per-token model FLOPs (the MFU numerator) and recompute FLOPs (the HFU extra).

Conventions (DESIGN.md, "Metrics"):
- model FLOPs count every matmul of the forward pass, x3 for forward + backward (Kaplan et al. 2020
  "6N"); attention scores QK^T and AV over the full sequence, 12*L*s*a*d per token (Chowdhery et al.
  2022, PaLM App. B "6N + 12LHQT"); the LM head 6*h*V (Narayanan et al. 2021 Eq. 3). For a GPT with
  ffn = 4h this is exactly Korthikanti et al. 2022's 72*B*s*L*h^2*(1 + s/(6h) + V/(12hL)).
- the causal variant halves the attention-score term (Megatron-LM 2026 "causal" FLOPs).
- hardware FLOPs add recomputation: selective recompute repeats the attention-score forward
  (Korthikanti et al. 2022 Sec. 5: 72BLsh^2(1 + s/(3h) + V/(12hL))); full recompute repeats the whole
  layer forward.
"""

from __future__ import annotations

from functools import lru_cache

from shardwise.specs.layer import block_weights
from shardwise.specs.model import ModelSpec


@lru_cache(maxsize=256)
def matmul_weights(model: ModelSpec) -> tuple[int, int, int, int]:
    """(attention in-projections, attention out-projection, dense MLP, one expert) matmul weights of a
    layer, biases and norms excluded, summed from the layer's description (:meth:`ModelSpec.linears`):
    the out-projection is the attention's row-parallel linear, the in-projections the rest."""
    dense = model.linears(False)
    attn = block_weights(dense, "attention")
    attn_out = block_weights(dense, "attention", parallel="row")
    return attn - attn_out, attn_out, block_weights(dense, "mlp"), block_weights(model.expert_linears, "experts")


def linear_shapes(model: ModelSpec, mlp_width: float, tp: int) -> tuple[tuple[float, float], ...]:
    """(output width n, input width k) on one GPU of a layer's block linears: the attention in- and
    out-projections, then an MLP of `mlp_width` (its column-parallel linears fused: gate and up, then
    down), split over `tp`. The attention in-projections are one GEMM of their summed weights (MLA: its
    down- and up-projections as one GEMM of the same FLOPs)."""
    attn_in, attn_out, fused = _shape_terms(model)
    h = model.hidden
    return ((attn_in / h / tp, h), (h, attn_out / h / tp), (fused * (mlp_width / tp), h), (h, mlp_width / tp))


@lru_cache(maxsize=256)
def _shape_terms(model: ModelSpec) -> tuple[int, int, int]:
    """(attention in-projection weights, out-projection weights, MLP linears reading the block input) of
    :func:`linear_shapes` (cached: a layer cost asks for them twice)."""
    attn_in, attn_out, _, _ = matmul_weights(model)
    return attn_in, attn_out, sum(lin.parallel == "column" for lin in model.expert_linears)


def layer_matmul_weights_active(model: ModelSpec, moe: bool) -> int:
    """Matmul weights one token touches in a layer (router included for MoE layers): each linear's
    weights times the copies a token passes (:attr:`shardwise.specs.layer.Linear.active`)."""
    return sum(lin.active_weights for lin in model.linears(moe))


def attention_score_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """Forward FLOPs of QK^T and AV for one token attending over `seq_len` keys, summed over layers:
    2*s*a*(d_qk + d_v) per layer (PaLM App. B); halved under a causal mask when `causal`."""
    per_layer = seq_len * model.attention_core.pair_flops()
    return model.layers * per_layer * (0.5 if causal else 1.0)


@lru_cache(maxsize=1024)
def model_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """Training (forward + backward) model FLOPs per token, recompute excluded."""
    dense_layers = model.layers - model.moe_layers
    weights = dense_layers * layer_matmul_weights_active(model, False)
    weights += model.moe_layers * layer_matmul_weights_active(model, True)
    lm_head = model.hidden * model.vocab
    return 6.0 * (weights + lm_head) + 3.0 * attention_score_flops_per_token(model, seq_len, causal)


def recompute_flops_per_token(model: ModelSpec, seq_len: int, recompute: str, causal: bool = False,
                              flash: bool = False, gemm_share: float = 0.0) -> float:
    """Extra forward FLOPs per token spent re-computing activations in the backward pass. Selective:
    the attention scores (Korthikanti et al. 2022 Sec. 5), which a fused attention kernel does not store
    and so does not recompute as a separate step (`flash`), plus `gemm_share` of the other forward
    matmuls (the stack's op-level selective checkpointing, :mod:`shardwise.cost.stack`). Full: the whole
    forward but the LM head."""
    head = 2.0 * model.hidden * model.vocab
    if recompute == "selective":
        scores = attention_score_flops_per_token(model, seq_len, causal)
        gemms = model_flops_per_token(model, seq_len, causal) / 3.0 - scores - head
        return (0.0 if flash else scores) + gemm_share * gemms
    if recompute == "full":
        return model_flops_per_token(model, seq_len, causal) / 3.0 - head  # the LM head is not recomputed
    return 0.0


def megatron_gpt_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int, recompute: str = "none") -> float:
    """Korthikanti et al. 2022 Sec. 5 / Narayanan et al. 2021 Eq. 3 closed forms, for GPT with ffn = 4h:
    72*B*s*L*h^2*(1 + s/(6h) + V/(12hL)) model FLOPs; selective recompute s/(3h); full recompute x4/3 on
    the layer terms (96 instead of 72)."""
    B, s, L, h, V = batch, seq_len, layers, hidden, vocab
    if recompute == "full":
        return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    attn = s / (3 * h) if recompute == "selective" else s / (6 * h)
    return 72.0 * B * s * L * h * h * (1 + attn + V / (12 * h * L))
