"""Model presets and config.json loading: parameter counts against the published ones."""

from decimal import Decimal

import pytest

from shardwise.errors import ShardwiseError
from shardwise.specs.hf_config import from_hf_config
from shardwise.specs.model import preset_names
from shardwise.specs.model_ref import load_model

# Published totals as printed by the source (paper tables round; model cards give exact counts).
PUBLISHED = {
    "gpt-1.7b": "1.7e9", "gpt-3.6b": "3.6e9", "gpt-7.5b": "7.5e9", "gpt-18b": "18.4e9", "gpt-39b": "39.1e9",
    "gpt-76b": "76.1e9", "gpt-145b": "145.6e9", "gpt-310b": "310.1e9", "gpt-530b": "529.6e9", "gpt-1t": "1008e9",
    "gpt-22b": "22e9", "gpt-175b": "174.6e9",
    "llama-2-7b": "6738415616", "llama-2-13b": "13015864320", "llama-2-70b": "68976648192",
    "llama-3.1-8b": "8030261248", "llama-3.1-70b": "70553706496", "llama-3.1-405b": "405853388800",
    "mistral-7b": "7241732096", "mixtral-8x7b": "46702792704", "mixtral-8x22b": "140.6e9",
    "llama-33b": "32.5e9",
    "qwen2.5-7b": "7615616512", "qwen2.5-72b": "72706203648", "deepseek-v3": "671e9",
    "qwen3-30b-a3b": "30.5e9", "qwen3-235b-a22b": "235e9",
}
ACTIVE = {"mixtral-8x7b": "12.9e9", "mixtral-8x22b": "39e9", "deepseek-v3": "37e9", "qwen3-30b-a3b": "3.3e9",
          "qwen3-235b-a22b": "22e9", "llama-4-scout": "17e9"}


def _half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: the rounding tolerance of a published figure."""
    mantissa = Decimal(printed.split("e")[0])
    exponent = int(printed.split("e")[1]) if "e" in printed else 0
    return 0.5 * 10.0 ** (mantissa.as_tuple().exponent + exponent)


def test_at_least_fifteen_presets_cover_the_issue_list():
    names = preset_names()
    assert len(names) >= 15
    assert set(PUBLISHED) <= set(names)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_params_match_published(name):
    spec = load_model(name)
    assert abs(spec.params_total - float(PUBLISHED[name])) <= _half_unit(PUBLISHED[name])


def test_llama_65b_matches_the_paper_truncated():
    """Touvron et al. 2023 Table 2 prints 65.2B; the architecture gives 65,285,660,672 (the table truncates)."""
    total = load_model("llama-65b").params_total
    assert total == 80 * (4 * 8192**2 + 3 * 8192 * 22016 + 2 * 8192) + 2 * 32000 * 8192 + 8192
    assert 65.2e9 <= total < 65.3e9


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_params_match_published(name):
    """Within 2%: reports differ on whether the input-embedding lookup counts as activated (DeepSeek-V3:
    37.55B with it, 36.6B without; Mixtral-8x7B: 12.88B with it, matching the published 12.9B)."""
    spec = load_model(name)
    assert spec.params_active == pytest.approx(float(ACTIVE[name]), rel=0.02)


def test_megatron_eq2_parameter_count():
    """Narayanan et al. 2021 Eq. 2: P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh))."""
    spec = load_model("gpt-175b")
    L, h, V, s = spec.layers, spec.hidden, spec.vocab, spec.position_embeddings
    eq2 = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
    assert spec.params_total == pytest.approx(eq2 + 2 * h, rel=1e-9)  # + final LayerNorm


@pytest.mark.parametrize(
    "file,expected",
    [
        ("llama-3.1-8b.json", 8030261248),
        ("mistral-7b.json", 7241732096),
        ("mixtral-8x7b.json", 46702792704),
        ("qwen2.5-7b.json", 7615616512),
        ("gpt2.json", 124439808),  # GPT-2 small, tied embeddings and learned positions
        ("pythia-6.9b.json", 6857302016),  # GPT-NeoX family
    ],
)
def test_hf_config_param_counts(data_dir, file, expected):
    assert from_hf_config(data_dir / "hf" / file).params_total == expected


def test_hf_deepseek_v3_mla_and_moe(data_dir):
    spec = load_model(str(data_dir / "hf" / "deepseek-v3.json"))
    assert spec.is_mla and spec.is_moe and spec.dense_layers == 3
    assert spec.params_total == load_model("deepseek-v3").params_total
    # MLA caches the 512-d latent plus the 64-d rope key per layer.
    assert spec.kv_cache_bytes_per_token(2) == 61 * (512 + 64) * 2


def test_inline_mapping_and_gqa_mqa():
    mqa = load_model({"layers": 2, "hidden": 256, "heads": 8, "kv_heads": 1, "ffn": 512, "vocab": 1000})
    mha = load_model({"layers": 2, "hidden": 256, "heads": 8, "ffn": 512, "vocab": 1000})
    assert mqa.n_kv_heads == 1 and mha.n_kv_heads == 8
    assert mqa.attention_params < mha.attention_params


def test_kv_cache_bytes_llama3():
    """vLLM cache_engine: 2*L*H_kv*d_h*b; Llama-3-8B bf16 = 128 KiB, 70B = 320 KiB per token."""
    assert load_model("llama-3-8b").kv_cache_bytes_per_token(2) == 128 * 1024
    assert load_model("llama-3-70b").kv_cache_bytes_per_token(2) == 320 * 1024


@pytest.mark.parametrize(
    "ref,fragment",
    [
        ("llama-9000", "unknown model"),
        ({"layers": 2, "hidden": 100, "heads": 3, "ffn": 10, "vocab": 10}, "not divisible by heads"),
        ({"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 3, "ffn": 10, "vocab": 10}, "multiple of kv_heads"),
        ({"layers": 2, "hidden": 64, "heads": 8, "ffn": 10}, "vocab"),
        ({"layers": -1, "hidden": 64, "heads": 8, "ffn": 10, "vocab": 10}, "layers"),
        ({"layers": 2, "hidden": 64, "heads": 8, "ffn": 10, "vocab": 10, "expertz": 4}, "unknown field"),
        ({"layers": 2, "hidden": 64, "heads": 8, "ffn": 10, "vocab": 10, "experts": 4, "top_k": 5}, "top_k"),
    ],
)
def test_bad_models_raise_clear_errors(ref, fragment):
    with pytest.raises(ShardwiseError, match=fragment):
        load_model(ref)


def test_broken_config_json(data_dir):
    with pytest.raises(ShardwiseError, match="malformed JSON"):
        load_model(str(data_dir / "hf" / "broken.json"))
    with pytest.raises(ShardwiseError, match="hidden_size"):
        load_model(str(data_dir / "hf" / "missing-fields.json"))
    with pytest.raises(ShardwiseError, match="not found"):
        load_model(str(data_dir / "hf" / "nope.json"))
