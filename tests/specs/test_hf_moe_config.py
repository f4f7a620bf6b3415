"""MoE config.json field names: Qwen2-MoE / Qwen3-MoE (num_experts, moe_intermediate_size,
shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers, norm_topk_prob) and Llama 4
(text_config nesting, num_local_experts, interleave_moe_layer_step, intermediate_size_mlp); parameter
counts against the published totals, malformed fields as one-line errors."""

from pathlib import Path

import pytest

from shardwise.errors import ShardwiseError
from shardwise.specs.hf_config import spec_from_hf_dict
from shardwise.specs.model_ref import load_model
from tests.specs.test_hf_config import QWEN3_30B, QWEN15_MOE, SCOUT_TEXT

# Qwen/Qwen2-57B-A14B config.json
QWEN2_57B = {"model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 151936, "num_experts": 64,
             "num_experts_per_tok": 8, "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
             "decoder_sparse_step": 1, "norm_topk_prob": False, "tie_word_embeddings": False}
# meta-llama/Llama-4-Scout-17B-16E config.json: the language model nested in text_config
SCOUT = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": SCOUT_TEXT,
         "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 34}}


def spec(cfg):
    return spec_from_hf_dict(cfg, Path("config.json"))


@pytest.mark.parametrize("cfg,total,active,rel", [
    # Qwen3 report / model card: 30.5B total, 3.3B activated
    (QWEN3_30B, 30.5e9, 3.3e9, 0.02),
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated
    (QWEN15_MOE, 14.3e9, 2.7e9, 0.02),
    # Qwen2 report Table 1 / model card: 57B total, 14B activated
    (QWEN2_57B, 57e9, 14e9, 0.02),
    # Llama 4 model card: 109B total (with the ~0.8B vision encoder the text model leaves out), 17B active
    (SCOUT, 109e9, 17e9, 0.015),
], ids=["qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "qwen2-57b-a14b", "llama-4-scout"])
def test_moe_configs_give_the_published_counts(cfg, total, active, rel):
    s = spec(cfg)
    assert s.params_total == pytest.approx(total, rel=rel)
    assert s.params_active == pytest.approx(active, rel=rel)


def test_qwen2_moe_shared_expert_is_counted_in_expert_units():
    s = spec(QWEN2_57B)
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_experts, s.dense_layers) == (64, 8, 2560, 8, 0)  # 20480 / 2560
    assert s.qkv_bias and s.mlp == "swiglu"


def test_llama4_text_config_and_its_dense_mlp_size():
    s = spec(SCOUT)
    assert (s.hidden, s.layers, s.heads, s.n_kv_heads, s.d_head) == (5120, 48, 40, 8, 128)
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_experts, s.ffn, s.dense_layers) == (16, 1, 8192, 1, 16384, 0)
    assert s.params_total == load_model("llama-4-scout").params_total
    # Maverick-style interleaving: every second layer MoE, the others dense MLPs of intermediate_size_mlp
    half = spec({**SCOUT, "text_config": {**SCOUT_TEXT, "interleave_moe_layer_step": 2}})
    assert (half.moe_layers, half.dense_layers) == (24, 24)
    dense_mlp = 3 * 5120 * 16384
    moe_mlp = 17 * 3 * 5120 * 8192 + 5120 * 16
    assert s.params_total - half.params_total == 24 * (moe_mlp - dense_mlp)
    listed = spec({**SCOUT, "text_config": {**SCOUT_TEXT, "moe_layers": [1, 3, 5]}})
    assert listed.moe_layers == 3


def test_qwen_sparse_step_and_mlp_only_layers_choose_the_moe_layers():
    every_other = spec({**QWEN3_30B, "decoder_sparse_step": 2})
    assert every_other.moe_layers == 24  # layers 1, 3, ..., 47: (i + 1) % 2 == 0
    spared = spec({**QWEN3_30B, "decoder_sparse_step": 2, "mlp_only_layers": [1, 2, 3]})
    assert spared.moe_layers == 22  # 1 and 3 were MoE layers; 2 was dense anyway
    assert spec({**QWEN3_30B, "norm_topk_prob": False}).params_total == spec(QWEN3_30B).params_total  # routing only


@pytest.mark.parametrize("cfg,field", [
    ({**QWEN3_30B, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({**QWEN3_30B, "decoder_sparse_step": "2"}, "decoder_sparse_step"),
    ({**QWEN3_30B, "mlp_only_layers": [0, 48]}, "mlp_only_layers"),
    ({**QWEN3_30B, "mlp_only_layers": "none"}, "mlp_only_layers"),
    ({**QWEN3_30B, "mlp_only_layers": list(range(48))}, "no layer an MoE layer"),
    ({**QWEN3_30B, "norm_topk_prob": "yes"}, "norm_topk_prob"),
    ({**QWEN3_30B, "num_experts_per_tok": 200}, "top_k"),
    ({**QWEN2_57B, "shared_expert_intermediate_size": 3000}, "shared_expert_intermediate_size"),
    ({**SCOUT, "text_config": [1, 2]}, "text_config"),
    ({**SCOUT, "text_config": {**SCOUT_TEXT, "interleave_moe_layer_step": -1}}, "interleave_moe_layer_step"),
    ({**SCOUT, "text_config": {**SCOUT_TEXT, "moe_layers": [0, 99]}}, "moe_layers"),
])
def test_malformed_moe_fields_are_one_line_errors(cfg, field):
    with pytest.raises(ShardwiseError, match=field) as err:
        spec(cfg)
    assert "\n" not in str(err.value)
