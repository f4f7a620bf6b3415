"""Pipeline stage contents: which layers, embedding and LM head each virtual stage holds.

Layers are split as evenly as possible over pp*vpp virtual stages; when they do not divide, the
extra layers go to the middle stages, since the first and last stages also carry the embedding and the
LM head (the imbalance Llama 3 corrects by giving them one layer fewer: Dubey et al. 2024 Sec. 3.3.2).
MoE models keep their leading dense layers first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardwise.errors import ShardwiseError
from shardwise.memo import quick_init
from shardwise.specs.model import ModelSpec


@quick_init
@dataclass(frozen=True)
class StageContent:
    index: int
    dense_layers: int
    moe_layers: int
    embedding: bool
    lm_head: bool

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


def layer_counts(layers: int, stages: int) -> list[int]:
    """Even split; the remainder goes to the stages nearest the middle. Up to two stages more than
    layers are allowed: the first and last then hold only the embedding and the LM head."""
    return list(_layer_counts(layers, stages))


@lru_cache(maxsize=1024)
def _layer_counts(layers: int, stages: int) -> tuple[int, ...]:
    """:func:`layer_counts` (cached: a pure function of two small numbers)."""
    if stages > layers + 2:
        raise ShardwiseError(f"{stages} pipeline stages for {layers} layers: at most layers + 2 stages")
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    order = sorted(range(stages), key=lambda s: (abs(2 * s - (stages - 1)), s))
    for s in order[:extra]:
        counts[s] += 1
    return tuple(counts)


def stage_contents(model: ModelSpec, stages: int, counts: tuple[int, ...] | None = None) -> list[StageContent]:
    """Contents of each virtual stage in model order (stage 0 holds the embedding); `counts` gives the
    layers of each stage (an uneven split), default :func:`layer_counts`."""
    if counts is None:
        return list(_even_contents(model, stages))
    return _contents(model, stages, counts)


@lru_cache(maxsize=1024)
def _even_contents(model: ModelSpec, stages: int) -> tuple[StageContent, ...]:
    """:func:`stage_contents` of the even split (cached: a pure function of the model and the stage count)."""
    return tuple(_contents(model, stages, None))


def _contents(model: ModelSpec, stages: int, counts: tuple[int, ...] | None) -> list[StageContent]:
    out = []
    first = 0
    dense_total = model.layers - model.moe_layers
    if counts is not None and (len(counts) != stages or sum(counts) != model.layers or min(counts) < 0):
        raise ShardwiseError(f"layer split {list(counts)}: give {stages} counts >= 0 adding up to {model.layers} layers")
    for s, n in enumerate(counts if counts is not None else _layer_counts(model.layers, stages)):
        dense = max(0, min(first + n, dense_total) - first)
        out.append(StageContent(s, dense, n - dense, embedding=s == 0, lm_head=s == stages - 1))
        first += n
    return out


def stage_params(model: ModelSpec, content: StageContent, tp: int, ep: int) -> tuple[float, float]:
    """(dense, expert) parameters a GPU of this stage holds after TP (and EP for the routed experts;
    shared experts run on every token like a dense MLP and are dense parameters).

    Norms are counted as TP-sharded (they are replicated in practice: < 0.01% of a layer). With tied
    embeddings, the last stage keeps its own copy of the embedding for the LM head (Megatron-LM).
    """
    routed = model.experts * model.expert_params
    expert_local = routed / ep  # shared experts are dense weights: replicated over EP, in the dense DP group
    moe_dense = model.layer_params_moe - routed
    dense = content.dense_layers * model.layer_params_dense + content.moe_layers * moe_dense
    if content.embedding:
        dense += model.embedding_params
    if content.lm_head:
        dense += model.norm_params + model.lm_head_params
        if model.tied_embeddings and not content.embedding:
            dense += model.vocab * model.hidden
    return dense / tp, content.moe_layers * expert_local / tp
