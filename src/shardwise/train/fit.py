"""`train plan`'s answer to "will it fit?", shared by the CLI and the web API: without a GPU count, the search
runs at the smallest count of each GPU type that fits (or trains in time: :mod:`shardwise.train.smallest`);
when nothing fits, the search retries with the offload that fits fastest on the same GPUs and reports what it
bought, or says what to change (:mod:`shardwise.train.advice`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import make_cluster
from shardwise.train.advice import Advice, offload_fallback
from shardwise.train.fit_report import smallest_json
from shardwise.train.plan_inputs import PlanInputs, plan_inputs, split_list
from shardwise.train.planner import NothingFits
from shardwise.train.smallest import SizedCluster, smallest_clusters


def sized_inputs(model: Any, gpu: Any, seq_len: int | None, global_batch: int | None, tokens: float | None,
                 precision: str | None, memory_headroom: float | None, method: str | None, max_gpus: int,
                 days: float | None, schedules: Any = None) -> tuple[PlanInputs, list[SizedCluster]]:
    """(the plan inputs at the smallest count of each GPU type that fits, or with `days` trains `tokens` in
    time; the sized clusters). Types where no count up to `max_gpus` does are left out; none: an error."""
    names = split_list(gpu)
    probe = plan_inputs(None, model, names, 1, seq_len, global_batch, tokens, precision, memory_headroom, method)
    sized = smallest_clusters(probe.model, names, probe.training, days, max_gpus, memory_headroom,
                              tuple(split_list(schedules)) or None)
    found = [s for s in sized if s.gpus is not None]
    if not found:
        last = sized[0].verdicts[-1]
        goal = "fits" if days is None else f"trains {tokens:g} tokens in {days:g} days"
        raise ShardwiseError(f"--max-gpus: no count up to {max_gpus} {goal} ({probe.model.name} on {sized[0].gpu}; at "
                             f"{last.label}: {last.reason})")
    clusters = [make_cluster(s.gpu, s.gpus, memory_headroom=memory_headroom) for s in found]
    return replace(probe, clusters=clusters), sized


@dataclass
class FitSearch:
    """A search's outcome with what fitting took: the inputs it ran on (with the offload it fell back to)."""

    inputs: PlanInputs
    results: list
    best: list
    fronts: list
    advice: Advice | None = None
    fallback: str | None = None  # the offload searched with ("optimizer+params on nvme" when on NVMe)
    fallback_fields: dict[str, Any] | None = None  # offload and offload_device, or offload_activations


def search_fitting(inputs: PlanInputs, search: Callable[[PlanInputs], tuple], schedules: Any = None, max_gpus: int = 4096,
                   on_advice: Callable[[], None] | None = None) -> FitSearch:
    """Run `search(inputs)`; when nothing fits, price what to change and retry with the fastest offload that fits
    on the same GPUs (:func:`shardwise.train.advice.offload_fallback` raises NoPlanFits when none does);
    `on_advice` is called before the (slower) pricing starts."""
    try:
        return FitSearch(inputs, *search(inputs))
    except NothingFits as nf:
        if on_advice is not None:
            on_advice()
        fallback, advice = offload_fallback(inputs.model, inputs.training, nf, inputs.fixed, tuple(split_list(schedules)) or None,
                                            max_gpus=max_gpus)
        inputs = replace(inputs, fixed={**inputs.fixed, **fallback})
        if "offload_activations" in fallback:
            label = f"activations (share {fallback['offload_activations']:g})"
        else:
            label = fallback["offload"] + (f" on {fallback['offload_device']}" if fallback["offload_device"] != "cpu" else "")
        return FitSearch(inputs, *search(inputs), advice, label, fallback)


def fit_json(found: FitSearch, sized: list[SizedCluster] | None, days: float | None) -> dict[str, Any]:
    """What `train plan --format json` (and the web API) adds about fitting."""
    out: dict[str, Any] = {}
    if found.advice is not None:
        fields = found.fallback_fields or {}
        out["what_to_change"] = found.advice.to_dict() | {"searched_with_offload": fields.get("offload"),
                                                          "searched_with_offload_device": fields.get("offload_device"),
                                                          "searched_with_offload_activations": fields.get("offload_activations")}
    if sized is not None:
        out["smallest_gpus"] = {"gpus": sized[0].gpus, "counts": [v.to_dict() for v in sized[0].verdicts]}
        out["smallest_clusters"] = smallest_json(sized, found.results, found.inputs.clusters, days)
    return out
