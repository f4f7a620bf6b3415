"""Build a ModelSpec from a Hugging Face ``config.json``.

Field names follow the transformers configuration classes of each family: Llama/Mistral/Qwen2
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``), Mixtral (``num_local_experts``, ``num_experts_per_tok``), Qwen2-MoE and
Qwen3-MoE (``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
``shared_expert_intermediate_size`` (Qwen2-MoE's one shared expert, in units of the routed expert size),
``decoder_sparse_step`` and ``mlp_only_layers`` (which layers are MoE), ``norm_topk_prob`` (routing only,
no parameters)), Llama 4 (the language model's fields nested in ``text_config``; ``num_local_experts``,
``interleave_moe_layer_step`` or ``moe_layers``, ``intermediate_size`` for the experts and the shared
expert, ``intermediate_size_mlp`` for the dense layers), GPT-2 (``n_embd``, ``n_layer``, ``n_head``,
``n_inner``, ``n_positions``), GPT-NeoX (``use_parallel_residual``, untied) and DeepSeek-V2/V3
(``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``, MLA ranks).

Where an MoE model's dense layers sit among its MoE layers (every ``decoder_sparse_step``-th or
``interleave_moe_layer_step``-th layer is MoE), the spec keeps their count (``dense_layers``, placed
first by :mod:`shardwise.train.stages`): parameter counts are exact, pipeline stage contents approximate.
Qwen2-MoE's shared-expert gate (``hidden_size`` weights per layer) is not counted (under 1e-5 of the model).

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
    "qwen3_moe": {"tie_word_embeddings": False, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                  "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
    "llama4_text": {"tie_word_embeddings": False, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1},
    "deepseek_v3": {"tie_word_embeddings": False, "num_key_value_heads": 128, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
                    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
}


#: families whose MLP is gated (``down_proj(act(gate_proj(x)) * up_proj(x))`` in transformers'
#: ``modeling_<type>.py``) whatever the activation is called (Gemma's config says "gelu")
GATED_MLP = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama4_text", "gemma",
                       "gemma2", "deepseek_v2", "deepseek_v3"})


def language_model(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """The language model's fields: a multimodal config (Llama 4: ``model_type`` llama4) nests them in
    ``text_config`` (transformers' Llama4Config); the outer name is kept when the inner one has none."""
    text = cfg.get("text_config")
    if text is None:
        return cfg
    if not isinstance(text, dict):
        raise ShardwiseError(f"{path}: config.json text_config must be a mapping of the language model's fields, "
                             f"got {type(text).__name__}")
    inner = dict(text)
    outer_type = str(cfg.get("model_type", "")).lower()
    inner.setdefault("model_type", f"{outer_type}_text" if outer_type == "llama4" else outer_type)
    if "_name_or_path" in cfg:
        inner.setdefault("_name_or_path", cfg["_name_or_path"])
    return inner


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
        return _translate(with_defaults(language_model(cfg, path)), path, name)
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
        spec.update(_moe_fields(cfg, path, spec, experts, model_type))
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


def _count(cfg: dict[str, Any], path: Path, key: str, low: int = 1) -> int:
    """An integer field >= `low` (bools are not counts)."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ShardwiseError(f"{path}: config.json {key} must be an integer >= {low}, got {value!r}")
    return value


def moe_layer_count(cfg: dict[str, Any], path: Path, layers: int) -> int:
    """How many of the `layers` are MoE layers: Llama 4's ``moe_layers`` list or every
    ``interleave_moe_layer_step``-th layer (transformers' Llama4TextConfig: layers step-1, 2*step-1, ...);
    Qwen2/3-MoE's every ``decoder_sparse_step``-th layer less ``mlp_only_layers`` (Qwen2MoeDecoderLayer:
    MoE where ``(i + 1) % decoder_sparse_step == 0`` and i is not an MLP-only layer); else all, less
    DeepSeek's ``first_k_dense_replace`` leading dense layers."""
    if cfg.get("moe_layers") is not None:
        listed = cfg["moe_layers"]
        if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers for i in listed):
            raise ShardwiseError(f"{path}: config.json moe_layers must list layer indices in 0..{layers - 1}")
        return len(set(listed))
    if cfg.get("interleave_moe_layer_step") is not None:
        return layers // _count(cfg, path, "interleave_moe_layer_step")
    if cfg.get("decoder_sparse_step") is not None or cfg.get("mlp_only_layers") is not None:
        step = _count(cfg, path, "decoder_sparse_step") if cfg.get("decoder_sparse_step") is not None else 1
        dense_only = cfg.get("mlp_only_layers") or []
        if not isinstance(dense_only, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                                   for i in dense_only):
            raise ShardwiseError(f"{path}: config.json mlp_only_layers must list layer indices in 0..{layers - 1}")
        return sum(1 for i in range(layers) if (i + 1) % step == 0 and i not in set(dense_only))
    first = cfg.get("first_k_dense_replace") or 0
    return layers - (_count(cfg, path, "first_k_dense_replace", 0) if first else 0)


def _moe_fields(cfg: dict[str, Any], path: Path, spec: dict[str, Any], experts: Any, model_type: str) -> dict[str, Any]:
    """The ModelSpec MoE fields of a config with experts (field names in the module docstring)."""
    out: dict[str, Any] = {"experts": experts, "top_k": _require(cfg, path, "num_experts_per_tok", "moe_top_k", "top_k")}
    if cfg.get("norm_topk_prob") is not None and not isinstance(cfg["norm_topk_prob"], bool):
        raise ShardwiseError(f"{path}: config.json norm_topk_prob must be true or false, got {cfg['norm_topk_prob']!r}")
    if model_type == "llama4_text":
        # Llama4TextMoe: routed experts and one shared expert of intermediate_size; dense layers of intermediate_size_mlp.
        out["expert_ffn"] = _require(cfg, path, "intermediate_size")
        spec["ffn"] = _first(cfg, "intermediate_size_mlp", default=spec["ffn"])
        shared = 1
    else:
        out["expert_ffn"] = _first(cfg, "moe_intermediate_size", default=spec["ffn"])
        shared = cfg.get("n_shared_experts") or 0
        size = cfg.get("shared_expert_intermediate_size")
        if not shared and size:
            # Qwen2-MoE: one shared expert of its own size, expressed in expert_ffn units.
            shared, rest = divmod(size, out["expert_ffn"])
            if rest or not shared:
                raise ShardwiseError(f"{path}: config.json shared_expert_intermediate_size {size} is not a whole multiple of "
                                     f"moe_intermediate_size {out['expert_ffn']} (the spec counts shared experts in "
                                     "expert-size units); give a mapping with shared_experts instead")
    out["shared_experts"] = shared
    layers = _count(spec, path, "layers")
    moe_layers = moe_layer_count(cfg, path, layers)
    if moe_layers < 1:
        raise ShardwiseError(f"{path}: config.json makes no layer an MoE layer (decoder_sparse_step, mlp_only_layers, "
                             "interleave_moe_layer_step or moe_layers); check those fields")
    out["dense_layers"] = layers - moe_layers
    return out


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
