"""How a prediction is scored against a measurement: the signed error convention and the class of a row.

One module that both the validation and the fit read, so neither imports the other for it.
"""

from __future__ import annotations

from typing import Any

TIME_METRICS = frozenset({"iteration_s", "forward_ms", "backward_ms"})


def signed_error(metric: str, measured: float, predicted: float) -> float:
    """Relative error with + meaning "predicted faster (or larger) than measured": for times,
    measured/predicted - 1; for everything else predicted/measured - 1."""
    return measured / predicted - 1.0 if metric in TIME_METRICS else predicted / measured - 1.0


def row_class(tags: dict[str, Any]) -> str:
    """dense (BF16/FP16, no experts), fp8 (FP8/FP4 GEMMs, dense) or moe (any precision)."""
    if tags.get("moe"):
        return "moe"
    return "fp8" if tags.get("precision") not in ("bf16", "fp16") else "dense"
