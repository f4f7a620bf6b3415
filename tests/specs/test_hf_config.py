"""Hugging Face configs: each architecture's default where config.json leaves a key out, and model ids
resolved from the local Hugging Face cache (never the network)."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from shardwise.cli.main import main
from shardwise.errors import ShardwiseError
from shardwise.specs.hf_config import ARCHITECTURE_DEFAULTS, spec_from_hf_dict
from shardwise.specs.model_ref import load_model

# google/gemma-7b and google/gemma-2-2b, Qwen/Qwen1.5-MoE-A2.7B: the published config.json values
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_attention_heads": 16,
            "num_hidden_layers": 28, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
            "hidden_act": "gelu", "tie_word_embeddings": True}
GEMMA2_2B = {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_attention_heads": 8,
             "num_hidden_layers": 26, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
             "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}
QWEN15_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16,
              "num_hidden_layers": 24, "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
              "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "tie_word_embeddings": False}
# Qwen/Qwen3-30B-A3B config.json and meta-llama/Llama-4-Scout-17B-16E config.json's text_config
QWEN3_30B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 32,
             "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "num_experts": 128,
             "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "norm_topk_prob": True, "tie_word_embeddings": False}
SCOUT_TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
              "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8, "head_dim": 128,
              "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
              "tie_word_embeddings": False}
SHIPPED = {"llama": "llama-3.1-8b.json", "mistral": "mistral-7b.json", "mixtral": "mixtral-8x7b.json",
           "qwen2": "qwen2.5-7b.json", "gpt2": "gpt2.json", "gpt_neox": "pythia-6.9b.json",
           "deepseek_v3": "deepseek-v3.json"}


def base_config(arch, data_dir):
    inline = {"gemma": GEMMA_7B, "gemma2": GEMMA2_2B, "qwen2_moe": QWEN15_MOE, "qwen3_moe": QWEN3_30B, "llama4_text": SCOUT_TEXT}
    return dict(inline[arch]) if arch in inline else json.loads((data_dir / "hf" / SHIPPED[arch]).read_text())


def spec(cfg):
    return spec_from_hf_dict(cfg, Path("config.json"))


def outcome(cfg):
    """The spec, or the error (a default may not fit the model: Qwen2's 32 KV heads and 28 heads)."""
    try:
        return spec(cfg)
    except ShardwiseError as exc:
        return str(exc)


def without(cfg, *keys):
    return {k: v for k, v in cfg.items() if k not in keys}


@pytest.mark.parametrize("arch, key", [(a, k) for a, d in ARCHITECTURE_DEFAULTS.items() for k in d])
def test_a_missing_key_takes_its_architectures_default(arch, key, data_dir):
    cfg = base_config(arch, data_dir)
    assert cfg["model_type"] == arch
    explicit = outcome({**cfg, key: ARCHITECTURE_DEFAULTS[arch][key]})
    assert outcome(without(cfg, key)) == explicit


def test_gemma_ties_its_embeddings_by_default():
    """Gemma report (arXiv 2403.08295) Table 2, Gemma 7B: 786,432,000 embedding and 7,751,248,896
    non-embedding parameters; the embedding is tied (GemmaConfig.tie_word_embeddings = True)."""
    s = spec(without(GEMMA_7B, "tie_word_embeddings", "head_dim", "num_key_value_heads"))
    assert s.tied_embeddings and s.head_dim == 256 and s.n_kv_heads == 16
    assert s.params_total == 786_432_000 + 7_751_248_896


def test_llama_and_mistral_do_not_tie_and_mistral_defaults_to_8_kv_heads(data_dir):
    llama = spec(without(json.loads((data_dir / "hf" / "llama-3.1-8b.json").read_text()), "tie_word_embeddings"))
    assert not llama.tied_embeddings and llama.params_total == 8_030_261_248  # Llama 3.1 8B
    mistral = spec(without(json.loads((data_dir / "hf" / "mistral-7b.json").read_text()),
                           "tie_word_embeddings", "num_key_value_heads"))
    assert not mistral.tied_embeddings and mistral.n_kv_heads == 8 and mistral.params_total == 7_241_732_096


def test_gpt2_ties_and_learns_1024_positions_by_default(data_dir):
    cfg = without(json.loads((data_dir / "hf" / "gpt2.json").read_text()), "n_positions", "n_inner")
    s = spec(cfg)
    assert s.tied_embeddings and s.position_embeddings == 1024 and s.ffn == 4 * 768 and s.norm == "layernorm"
    assert s.params_total == 124_439_808  # GPT-2 small, as counted by transformers' GPT2Model


def test_an_unknown_architecture_gets_no_defaults():
    cfg = {"model_type": "somenew", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 1000, "intermediate_size": 512}
    s = spec(cfg)
    assert not s.tied_embeddings and s.n_kv_heads == 4


# --- Hugging Face model ids --------------------------------------------------------------------------

REPO = "meta-llama/Llama-3.1-8B"
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, data_dir):
    """A Hugging Face hub cache holding REPO's config.json (the layout huggingface_hub writes:
    models--ORG--NAME/refs/main = commit, snapshots/COMMIT/config.json)."""
    pytest.importorskip("huggingface_hub")
    repo = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    shutil.copy(data_dir / "hf" / "llama-3.1-8b.json", repo / "snapshots" / COMMIT / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def test_a_model_id_in_the_local_cache(hf_cache):
    s = load_model(REPO)
    assert s.name == REPO and s.params_total == load_model("llama-3.1-8b").params_total


def test_a_job_file_names_a_model_id(hf_cache, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {REPO}\ncluster: {{gpu: H100-SXM, gpus: 8}}\ntraining: {{seq_len: 4096, global_batch: 64}}\n"
                   "parallel: {tp: 2, pp: 1}\n")
    assert main(["train", "estimate", str(job), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == REPO


def test_a_model_id_not_in_the_cache_says_how_to_get_it(hf_cache):
    with pytest.raises(ShardwiseError, match=r"'meta-llama/Llama-3.1-70B': its config.json is not in .*hf download "
                                             r"meta-llama/Llama-3.1-70B config.json"):
        load_model("meta-llama/Llama-3.1-70B")


def test_a_model_id_without_huggingface_hub(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(ShardwiseError, match="install huggingface_hub"):
        load_model(REPO)


def test_the_cli_prints_one_line(hf_cache, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("model: nobody/nothing\ncluster: {gpu: H100-SXM, gpus: 8}\ntraining: {seq_len: 4096, global_batch: 64}\n"
                   "parallel: {tp: 2}\n")
    assert main(["train", "estimate", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model 'nobody/nothing'") and err.count("\n") == 1
