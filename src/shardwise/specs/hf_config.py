"""Build a ModelSpec from a Hugging Face ``config.json``.

Field names follow the transformers configuration classes of each family: Llama/Mistral/Qwen2
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``), Mixtral (``num_local_experts``, ``num_experts_per_tok``), Qwen2-MoE
(``num_experts``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``), GPT-2 (``n_embd``,
``n_layer``, ``n_head``, ``n_inner``, ``n_positions``), GPT-NeoX (``use_parallel_residual``, untied) and
DeepSeek-V2/V3 (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``, MLA ranks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.errors import ShardwiseError, clip
from shardwise.specs._loading import display_path, read_document
from shardwise.specs.model import ModelSpec, from_mapping


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


def spec_from_hf_dict(cfg: dict[str, Any], path: Path) -> ModelSpec:
    """Translate a parsed config.json mapping (see module docstring for the field names)."""
    if not isinstance(cfg, dict):
        raise ShardwiseError(f"{path}: config.json must hold a JSON object, got {type(cfg).__name__}")
    try:
        return _translate(cfg, path)
    except ShardwiseError:
        raise
    except (TypeError, ValueError) as exc:  # e.g. "hidden_size": "4k" or {}
        raise ShardwiseError(f"{path}: a config.json field has the wrong type ({exc}); sizes and counts must be numbers") from None


def _translate(cfg: dict[str, Any], path: Path) -> ModelSpec:
    model_type = str(cfg.get("model_type", "")).lower()
    is_gpt2 = model_type == "gpt2" or "n_embd" in cfg
    hidden = _require(cfg, path, "hidden_size", "n_embd", "d_model")
    spec: dict[str, Any] = {
        "name": clip(str(cfg.get("_name_or_path") or path.parent.name or "hf-model"), 100),
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
    gated = act in ("silu", "swish", "swiglu", "geglu", "gelu_pytorch_tanh") and not is_gpt2 and model_type != "gpt_neox"
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


def from_hf_config(path: str | Path) -> ModelSpec:
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
        return spec_from_hf_dict(cfg, p)
    except (TypeError, ZeroDivisionError) as exc:  # e.g. a size given as a string, used in arithmetic
        raise ShardwiseError(f"{display_path(p)}: a size field of config.json is not a positive number ({clip(exc, 80)})") from None
