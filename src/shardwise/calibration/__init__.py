"""Public measurements -> validation cases, the fit of the cost model's constants, and its
leave-one-source-out cross-validation (:mod:`shardwise.calibration.fit`)."""

from __future__ import annotations

from typing import Any

from shardwise.calibration.formulas import activation_cases, bubble_cases, layer_cases, zero_cases
from shardwise.calibration.records import NOT_ESTIMATES, Case, Skip, throughput_cases
from shardwise.calibration.sources import source_of

__all__ = ["Case", "Skip", "record_cases"]


def record_cases(record: dict[str, Any]) -> list[Case] | Skip:
    """The validation cases of one calibration record, or why it is skipped."""
    rid, kind = record.get("id", "?"), record.get("kind")
    source = source_of(rid)
    if source.skip:
        return Skip(rid, source.label, source.skip)
    own = source.records.get(rid)
    if isinstance(own, str):
        return Skip(rid, source.label, own)
    if kind in NOT_ESTIMATES:
        return Skip(rid, source.label, NOT_ESTIMATES[kind])
    if kind == "layer-time":
        return layer_cases(record, source)
    if kind == "pipeline-bubble":
        return bubble_cases(record, source)
    if rid.startswith("korthikanti22_fig"):
        return activation_cases(record, source)
    if kind == "train-memory-analytical" and rid.startswith("zero_fig1"):
        return zero_cases(record, source)
    if kind == "train-memory":
        return Skip(rid, source.label, "a fine-tune's memory claim, not a throughput case: checked by "
                    "tests/train/test_finetune_evidence.py (data/finetune_measurements.yaml)")
    if kind == "train-throughput":
        par = record.get("parallel") or {}
        if "microbatch-level" in str(par.get("recompute", "")):
            return Skip(rid, source.label, "unsupported feature: micro-batch-level activation recomputation")
        if isinstance(par.get("zero_stage"), str) and "nvme" in par["zero_stage"].lower():
            # NVMe offload is modelled (docs/offload.md); the one such record (ZeRO-Infinity's abstract, 25 PF on
            # 512 V100) states no model, layout or batch to estimate.
            return Skip(rid, source.label, "NVMe offload record without a model, layout or batch (an abstract's aggregate figure)")
        return throughput_cases(record, source)
    return Skip(rid, source.label, f"unknown record kind {kind!r}")
