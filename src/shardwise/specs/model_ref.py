"""A model reference resolved to a :class:`~shardwise.specs.model.ModelSpec`: a preset name, a path to a
Hugging Face ``config.json`` (:mod:`shardwise.specs.hf_config`), a Hugging Face model id in the local cache,
an inline mapping, or a spec. Kept apart from the spec itself, which the config.json reader builds on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.errors import ShardwiseError, shorten
from shardwise.specs.hf_config import HF_MODEL_ID, from_hf_config, from_hf_hub
from shardwise.specs.model import ModelSpec, _presets, from_mapping

_CACHE: dict[str, ModelSpec] = {}


def load_model(ref: str | dict[str, Any] | ModelSpec, allow_paths: bool = True) -> ModelSpec:
    """Resolve a preset name, a path to a HF ``config.json`` or a Hugging Face model id (config in the
    local cache) (neither unless `allow_paths`: a server reads no file a request names), an inline
    mapping, or a spec."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, dict):
        return from_mapping(ref)
    if not isinstance(ref, str) or not ref.strip():
        raise ShardwiseError(f"model must be a preset name, a config.json path or a mapping, got {shorten(ref)}")
    key = ref.strip().lower()
    if key in _CACHE:
        return _CACHE[key]
    presets = _presets()
    if key in presets:
        spec = from_mapping({"name": key, **presets[key]}, where=f"preset {key}")
        _CACHE[key] = spec
        return spec
    if allow_paths and _is_path(ref):
        return from_hf_config(Path(ref).expanduser())
    if allow_paths and len(ref) <= 200 and HF_MODEL_ID.match(ref.strip()):
        return from_hf_hub(ref.strip())
    close = [n for n in presets if len(key) <= 64 and (key.replace("_", "-") in n or n in key)]
    hint = f" Did you mean {', '.join(close[:3])}?" if close else ""
    raise ShardwiseError(
        f"model: unknown model {shorten(ref)}.{hint} Use a preset (one of {len(presets)}, e.g. llama-3.1-8b, "
        "llama-3.1-70b, mixtral-8x7b; all in the README), a path to a Hugging Face config.json, "
        "a Hugging Face model id in the local cache, "
        "or a mapping {layers, hidden, heads, ffn, vocab, ...}."
    )


def _is_path(ref: str) -> bool:
    """A model string names a file when it ends in .json or exists; a string no file system accepts as a
    path (too long, a NUL byte) is a name, not a path."""
    try:
        path = Path(ref).expanduser()
        return path.suffix == ".json" or path.exists()
    except (OSError, ValueError):
        return False
