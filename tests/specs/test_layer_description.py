"""The one description of a layer (shardwise.specs.layer): shapes pinned to the published configs, and the
parameter counts, FLOPs and KV cache read from it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import ShardwiseError
from shardwise.specs.model import ModelSpec
from shardwise.specs.model_ref import load_model


def _shapes(model: ModelSpec, moe: bool = False) -> dict[str, tuple[int, int, str, int, int]]:
    return {f"{lin.block}.{lin.name}": (lin.in_features, lin.out_features, lin.parallel, lin.count, lin.active)
            for lin in model.linears(moe)}


def test_llama_3_1_8b_matches_its_config():
    # meta-llama/Llama-3.1-8B config.json: hidden 4096, 32 heads, 8 KV heads (head_dim 128), intermediate 14336
    assert _shapes(load_model("llama-3.1-8b")) == {
        "attention.q": (4096, 4096, "column", 1, 1), "attention.k": (4096, 1024, "column", 1, 1),
        "attention.v": (4096, 1024, "column", 1, 1), "attention.o": (4096, 4096, "row", 1, 1),
        "mlp.gate": (4096, 14336, "column", 1, 1), "mlp.up": (4096, 14336, "column", 1, 1),
        "mlp.down": (14336, 4096, "row", 1, 1)}
    core = load_model("llama-3.1-8b").attention_core
    assert core.kv_values == 8 * 256 and core.kv_share(4) == 0.25 and core.kv_share(16) == 1 / 8  # replicated past 8


def test_deepseek_v3_mla_and_experts_match_its_config():
    # deepseek-ai/DeepSeek-V3 config.json: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 + rope 64, v_head 128,
    # 128 heads, 256 routed experts (moe_intermediate_size 2048, top-8), 1 shared expert
    s = _shapes(load_model("deepseek-v3"), moe=True)
    assert s["attention.q_a"] == (7168, 1536, "replicated", 1, 1)
    assert s["attention.q_b"] == (1536, 128 * 192, "column", 1, 1)
    assert s["attention.kv_a"] == (7168, 512 + 64, "replicated", 1, 1)
    assert s["attention.kv_b"] == (512, 128 * (128 + 128), "column", 1, 1)
    assert s["attention.o"] == (128 * 128, 7168, "row", 1, 1)
    assert s["router.router"] == (7168, 256, "replicated", 1, 1)
    assert s["experts.gate"] == (7168, 2048, "column", 256, 8) and s["experts.down"] == (2048, 7168, "row", 256, 8)
    assert s["shared_experts.up"] == (7168, 2048, "column", 1, 1)
    m = load_model("deepseek-v3")
    assert [n.name for n in m.norms()] == ["attention_norm", "mlp_norm", "q_a_norm", "kv_a_norm"]
    # DeepSeek-V2 report Sec. 2.1.2: the cache holds (d_c + d_h^R) values per token and layer, on every TP rank
    assert m.attention_core.kv_values == 576 and m.attention_core.kv_share(8) == 1.0
    assert m.attention_core.pair_flops(decode=True) == 2 * 128 * (2 * 512 + 64)


def test_gelu_mlp_has_no_gate_and_biases_where_gpt2_has_them():
    m = load_model("gpt-22b")  # Korthikanti et al. 2022 Table 3: GeLU MLP of 4h, biases, LayerNorm
    assert [(lin.name, lin.in_features, lin.out_features) for lin in m.linears()][4:] == [
        ("up", 6144, 24576), ("down", 24576, 6144)]
    assert [lin.name for lin in m.linears()][:4] == ["q", "k", "v", "o"] and all(lin.bias for lin in m.linears())
    assert [n.params for n in m.norms()] == [2 * 6144, 2 * 6144]


@st.composite
def _models(draw: st.DrawFn) -> ModelSpec:
    heads = draw(st.sampled_from([4, 8, 16]))
    spec = dict(layers=draw(st.integers(2, 8)), hidden=heads * draw(st.sampled_from([8, 16])), heads=heads,
                kv_heads=draw(st.sampled_from([1, 2, 4])), ffn=draw(st.integers(8, 300)), vocab=draw(st.integers(10, 999)),
                mlp=draw(st.sampled_from(["gelu", "swiglu"])), norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
                linear_bias=draw(st.booleans()), qkv_bias=draw(st.booleans()))
    if draw(st.booleans()):
        e = draw(st.integers(2, 16))
        spec.update(experts=e, top_k=draw(st.integers(1, e)), shared_experts=draw(st.integers(0, 2)),
                    expert_ffn=draw(st.integers(4, 99)), dense_layers=draw(st.integers(0, spec["layers"] - 1)))
    if draw(st.booleans()):
        spec.update(kv_lora_rank=draw(st.integers(4, 64)), q_lora_rank=draw(st.sampled_from([0, 32])),
                    qk_rope_head_dim=8, head_dim=24, v_head_dim=16)
    return ModelSpec(**spec)


@settings(max_examples=200, deadline=None)
@given(_models())
def test_parameter_counts_are_the_sum_of_the_description(m: ModelSpec) -> None:
    norms = sum(n.params for n in m.norms())
    dense = sum(lin.params for lin in m.linears(False)) + norms
    moe = sum(lin.params for lin in m.linears(True)) + norms
    moe_active = sum(lin.active_params for lin in m.linears(True)) + norms
    assert m.layer_params_dense == dense
    if m.is_moe:
        assert (m.layer_params_moe, m.layer_params_moe_active) == (moe, moe_active)
    body = (m.layers - m.moe_layers) * dense + m.moe_layers * moe
    assert m.params_total == body + m.embedding_params + m.lm_head_params + m.norm_params
    assert m.kv_cache_bytes_per_token(2.0) == 2.0 * m.layers * m.attention_core.kv_values


def test_exports_map_a_model_by_its_architecture_alone():
    """The engine rules and the exporters use one test (ModelSpec.architecture): a renamed Mixtral maps to
    DeepSpeed AutoEP's and torchtitan's configs as the preset does; a Mixtral with other experts maps to
    neither (before, the rules table accepted it by a shorter shape and the AutoEP export then failed)."""
    from shardwise.engines.table import DEEPSPEED_AUTOEP
    from shardwise.handoff.deepspeed import autoep_preset
    from shardwise.handoff.torchtitan import torchtitan_model

    base = load_model("mixtral-8x7b").model_dump()
    renamed = ModelSpec(**{**base, "name": "my-moe"})
    assert renamed.architecture == load_model("mixtral-8x7b").architecture

    class Job:  # what autoep_preset reads
        model = renamed

    assert autoep_preset(Job) == DEEPSPEED_AUTOEP["mixtral-8x7b"]
    other = ModelSpec(**{**base, "name": "my-moe", "expert_ffn": base["ffn"] // 2})
    assert other.architecture != renamed.architecture
    llama = load_model("llama-3.1-8b").model_dump()
    assert torchtitan_model(ModelSpec(**{**llama, "name": "mine"})) == torchtitan_model(load_model("llama-3.1-8b"))
    with pytest.raises(ShardwiseError, match="torchtitan has no config"):
        torchtitan_model(ModelSpec(**{**llama, "name": "mine", "qkv_bias": True}))
    with pytest.raises(ShardwiseError, match="torchtitan has no config"):  # a preset's name on another network
        torchtitan_model(ModelSpec(**{**llama, "layers": 4}))
