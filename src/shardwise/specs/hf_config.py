"""Build a ModelSpec from a Hugging Face ``config.json``.

Field names follow the transformers configuration classes of each family: Llama/Mistral/Qwen2
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``), Mixtral (``num_local_experts``, ``num_experts_per_tok``), Qwen2-MoE
(``num_experts``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``), GPT-2 (``n_embd``,
``n_layer``, ``n_head``, ``n_inner``, ``n_positions``), GPT-NeoX (``use_parallel_residual``, untied) and
DeepSeek-V2/V3 (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``, MLA ranks).

A key the config leaves out takes its architecture's default (:data:`ARCHITECTURE_DEFAULTS`), as
transformers would when it builds the model. A model may also be named by its Hugging Face id when
``huggingface_hub`` is installed and the id's config.json is in the local cache (never the network).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from shardwise.errors import ShardwiseError, clip
from shardwise.specs._loading import display_path, read_document
from shardwise.specs.model import ModelSpec, from_mapping

#: transformers' defaults, per ``model_type``, of the keys this reader uses that hub configs may leave out
#: (the configuration class of each family, ``src/transformers/models/<type>/configuration_<type>.py``;
#: GPT-2's ``tie_word_embeddings`` is ``PretrainedConfig``'s default, true). ``num_key_value_heads: None``
#: means "as many as the attention heads". The size keys (layers, hidden, heads, vocab) get no default:
#: transformers' are those of one model size, and a config without them is not a checkpoint's.
#: Positions and norms per family are set in :func:`spec_from_hf_dict`: RoPE and RMSNorm, except GPT-2
#: (learned positions, ``n_positions``; LayerNorm) and GPT-NeoX (RoPE; LayerNorm).
ARCHITECTURE_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False, "num_key_value_heads": None, "intermediate_size": 11008},
    "mistral": {"tie_word_embeddings": False, "num_key_value_heads": 8, "intermediate_size": 14336},
    "mixtral": {"tie_word_embeddings": False, "num_key_value_heads": 8, "intermediate_size": 14336,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2": {"tie_word_embeddings": False, "num_key_value_heads": 32, "intermediate_size": 22016},
    "qwen2_moe": {"tie_word_embeddings": False, "num_key_value_heads": 16, "intermediate_size": 5632,
                  "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632},
    "gemma": {"tie_word_embeddings": True, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576},
    "gemma2": {"tie_word_embeddings": True, "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 9216},
    "gpt2": {"tie_word_embeddings": True, "n_positions": 1024, "n_inner": None},
    "gpt_neox": {"tie_word_embeddings": False, "intermediate_size": 24576},
    "deepseek_v3": {"tie_word_embeddings": False, "num_key_value_heads": 128, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
                    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
}


#: families whose MLP is gated (``down_proj(act(gate_proj(x)) * up_proj(x))`` in transformers'
#: ``modeling_<type>.py``) whatever the activation is called (Gemma's config says "gelu")
GATED_MLP = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "gemma2", "deepseek_v2",
                       "deepseek_v3"})


def with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its architecture's default for every key it leaves out (explicit values, null
    included, are kept)."""
    model_type = str(cfg.get("model_type", "")).lower()
    if not model_type and "n_embd" in cfg:
        model_type = "gpt2"
    return {**ARCHITECTURE_DEFAULTS.get(model_type, {}), **cfg}


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _require(cfg: dict[str, Any], path: Path, *names: str) -> Any:
    value = _first(cfg, *names)
    if value is None:
        raise ShardwiseError(f"{path}: config.json has none of the fields {', '.join(names)}; is it a decoder-only LM config?")
    return value


def spec_from_hf_dict(cfg: dict[str, Any], path: Path, name: str | None = None) -> ModelSpec:
    """Translate a parsed config.json mapping (see module docstring for the field names)."""
    if not isinstance(cfg, dict):
        raise ShardwiseError(f"{path}: config.json must hold a JSON object, got {type(cfg).__name__}")
    try:
        return _translate(with_defaults(cfg), path, name)
    except ShardwiseError:
        raise
    except (TypeError, ValueError) as exc:  # e.g. "hidden_size": "4k" or {}
        raise ShardwiseError(f"{path}: a config.json field has the wrong type ({exc}); sizes and counts must be numbers") from None


def _translate(cfg: dict[str, Any], path: Path, name: str | None) -> ModelSpec:
    model_type = str(cfg.get("model_type", "")).lower()
    is_gpt2 = model_type == "gpt2" or "n_embd" in cfg
    hidden = _require(cfg, path, "hidden_size", "n_embd", "d_model")
    spec: dict[str, Any] = {
        "name": clip(name or str(cfg.get("_name_or_path") or path.parent.name or "hf-model"), 100),
        "layers": _require(cfg, path, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden": hidden,
        "heads": _require(cfg, path, "num_attention_heads", "n_head"),
        "vocab": _require(cfg, path, "vocab_size"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", is_gpt2)),
    }
    kv = _first(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num")
    if kv is not None:
        spec["kv_heads"] = kv
    if cfg.get("head_dim"):
        spec["head_dim"] = cfg["head_dim"]
    act = str(_first(cfg, "hidden_act", "activation_function", "hidden_activation", default="silu")).lower()
    gated = model_type in GATED_MLP or (
        act in ("silu", "swish", "swiglu", "geglu", "gelu_pytorch_tanh") and not is_gpt2 and model_type != "gpt_neox")
    spec["mlp"] = "swiglu" if gated else "gelu"
    ffn = _first(cfg, "intermediate_size", "n_inner", "ffn_dim")
    spec["ffn"] = ffn if ffn else 4 * hidden
    if is_gpt2 or model_type in ("gpt_neox", "gpt_bigcode", "opt"):
        spec.update(norm="layernorm", linear_bias=True)
    if is_gpt2:
        spec["position_embeddings"] = _first(cfg, "n_positions", "max_position_embeddings", default=0)
    if model_type.startswith("qwen2"):
        spec["qkv_bias"] = True
    experts = _first(cfg, "num_local_experts", "n_routed_experts", "num_experts")
    if experts:
        spec["experts"] = experts
        spec["top_k"] = _require(cfg, path, "num_experts_per_tok", "moe_top_k", "top_k")
        spec["expert_ffn"] = _first(cfg, "moe_intermediate_size", default=spec["ffn"])
        shared = cfg.get("n_shared_experts") or 0
        if not shared and cfg.get("shared_expert_intermediate_size"):
            # Qwen2-MoE: one shared expert of its own size, expressed in expert_ffn units.
            shared = max(1, round(cfg["shared_expert_intermediate_size"] / spec["expert_ffn"]))
        spec["shared_experts"] = shared
        spec["dense_layers"] = cfg.get("first_k_dense_replace") or 0
    if cfg.get("kv_lora_rank"):
        rope = _require(cfg, path, "qk_rope_head_dim")
        nope = _require(cfg, path, "qk_nope_head_dim")
        spec.update(
            kv_lora_rank=cfg["kv_lora_rank"],
            q_lora_rank=cfg.get("q_lora_rank") or 0,
            qk_rope_head_dim=rope,
            head_dim=rope + nope,
            v_head_dim=_first(cfg, "v_head_dim", default=rope + nope),
        )
    return from_mapping(spec, where=str(path))


def from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Load ``config.json`` (or a directory containing one)."""
    p = Path(path).expanduser()
    try:
        if p.is_dir():
            p = p / "config.json"
        found = p.exists()
    except (OSError, ValueError):  # a name no file system accepts (too long, a NUL byte)
        found = False
    if not found:
        raise ShardwiseError(f"model config not found: {display_path(p)} (give a preset name or an existing config.json path)")
    cfg = read_document(p)
    try:
        return spec_from_hf_dict(cfg, p, name)
    except (TypeError, ZeroDivisionError) as exc:  # e.g. a size given as a string, used in arithmetic
        raise ShardwiseError(f"{display_path(p)}: a size field of config.json is not a positive number ({clip(exc, 80)})") from None


#: ``organisation/name`` as the Hugging Face Hub spells repository ids
HF_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def from_hf_hub(repo_id: str) -> ModelSpec:
    """The spec of a Hugging Face model id from the config.json in the local cache (``HF_HUB_CACHE``,
    else huggingface_hub's default); never the network (``local_files_only=True``)."""
    fetch = f"`hf download {repo_id} config.json` (a gated model needs `hf auth login` first)"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ShardwiseError(f"model {repo_id!r} looks like a Hugging Face model id: install huggingface_hub and "
                             f"fetch its config once with {fetch}, or give the path to a config.json") from None
    cache = os.environ.get("HF_HUB_CACHE") or None  # read now, not when huggingface_hub was imported
    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=cache, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - LocalEntryNotFoundError, or an id the hub library rejects
        where = cache or "the default Hugging Face cache"
        raise ShardwiseError(f"model {repo_id!r}: its config.json is not in {where} ({type(exc).__name__}); fetch "
                             f"it once with {fetch}, or give the path to a config.json") from None
    return from_hf_config(path, name=repo_id)
