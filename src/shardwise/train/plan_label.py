"""A plan in one line, as `train plan` prints it (``tp8 pp4 v2 dp2 z1 mb1 interleaved rc=selective sp``).

Kept apart from the report so the planner's own notes can name plans without importing the report.
"""

from __future__ import annotations

from typing import Any


def plan_label(p: dict[str, Any], recipe: str | None = None) -> str:
    """A plan in one line (`recipe`: the low-precision recipe, or the plan's `fp8_recipe`; a dispatcher
    other than alltoall is named)."""
    parts = [f"tp{p['tp']}", f"pp{p['pp']}"]
    if p["vpp"] > 1:
        parts.append(f"v{p['vpp']}")
    parts.append(f"dp{p['dp']}")
    if p["cp"] > 1:
        parts.append(f"cp{p['cp']}" + (f"/{p['cp_comm']}" if p.get("cp_comm", "p2p") != "p2p" else "")
                     + (f" u{p['ulysses']}" if p.get("ulysses") else ""))
    if p["ep"] > 1:
        parts.append(f"ep{p['ep']}")
    if p.get("etp") is not None and p["etp"] != p["tp"]:
        parts.append(f"etp{p['etp']}")
    recipe = recipe or p.get("fp8_recipe")
    if recipe:
        parts.append(recipe)
    if p.get("moe_dispatcher", "alltoall") != "alltoall":
        parts.append(p["moe_dispatcher"])
    parts += [f"z{p['zero']}", f"mb{p['micro_batch']}", p["schedule"]]
    if p["recompute"] != "none":
        parts.append(f"rc={p['recompute']}")
    if p["sequence_parallel"] and p["tp"] > 1:
        parts.append("sp")
    if p.get("tp_overlap", "none") not in ("none", "auto") and p["tp"] > 1:
        parts.append(f"tpo={p['tp_overlap']}")
    if p.get("microbatch_group"):
        parts.append(f"N{p['microbatch_group']}")
    if p.get("offload", "none") != "none":
        parts.append(f"offload={p['offload']}" + ("@nvme" if p.get("offload_device") == "nvme" else ""))
    if p.get("offload_activations"):
        policy = "-selective" if p.get("offload_activations_policy") == "selective" else ""
        parts.append(f"act-offload{policy}={p['offload_activations']:g}")
    return " ".join(parts)
