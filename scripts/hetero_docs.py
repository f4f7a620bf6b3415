"""Regenerate the heterogeneous-cluster figures of docs/hetero.md and the README from the code.

    .venv/bin/python scripts/hetero_docs.py          # rewrite them
    .venv/bin/python scripts/hetero_docs.py --check  # exit 1 if a block is out of date

The figures sit between `<!-- hetero-docs: KEY -->` and `<!-- /hetero-docs -->`: `plans` (train plan of
examples/hetero-h100-a100.yaml), `pick` (its best plan's groups), `links` (the example's layout and the
planner's pick at each inter_group_gbps), `pipeline` (the small pipeline across groups that
benchmarks/hetero.py --plot draws) and `comparison` (the README's sentence). Run it after a refit, as
scripts/refresh_golden.py.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from shardwise.specs._loading import read_document
from shardwise.specs.hetero import HeteroJob
from shardwise.specs.job import job_from_mapping
from shardwise.train.hetero.estimate import hetero_estimate
from shardwise.train.hetero.plan import HeteroPlanResult, hetero_plan
from shardwise.train.hetero.result import HeteroEstimate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hetero-h100-a100.yaml"
FILES = (ROOT / "docs" / "hetero.md", ROOT / "README.md")
GBPS = (100, 400, 1600, 6400)
BLOCK = re.compile(r"(<!-- hetero-docs: (\w+) -->)(.*?)(<!-- /hetero-docs -->)", re.S)


def _job(gbps: float | None = None) -> HeteroJob:
    doc = copy.deepcopy(read_document(EXAMPLE))
    if gbps is not None:
        doc["cluster"]["inter_group_gbps"] = gbps
    return job_from_mapping(doc)


@cache
def _plan(gbps: float | None = None) -> HeteroPlanResult:
    job = _job(gbps)
    return hetero_plan(job.model, job.cluster, job.training)


def _usd(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _versus_fastest(res: HeteroPlanResult) -> str:
    """The pick against the best plan on the fastest group alone, in a few words."""
    best, alone = res.best, res.single.get(res.fastest_group)
    if alone is None:
        return f"no plan fits on {res.fastest_group} alone"
    if best is alone:
        return f"{res.fastest_group} alone"
    cost = ("" if best.usd_per_million_tokens is None or alone.usd_per_million_tokens is None
            else f" at {best.usd_per_million_tokens / alone.usd_per_million_tokens:.2f}x the cost per token")
    return f"{best.tokens_per_s / alone.tokens_per_s - 1:+.0%} throughput{cost}"


def plans() -> str:
    res = _plan()
    rows = ["| # | plan | GPUs | tokens/s | $ per M tokens | memory used |", "|---|---|---|---:|---:|---:|"]
    for i, o in enumerate(res.ranked, 1):
        gpus = ", ".join(f"{n} {g}" for g, n in o.groups.items())
        rows.append(f"| {i} | {o.label} | {gpus} | {o.tokens_per_s:,.0f} | {_usd(o.usd_per_million_tokens)} | "
                    f"{o.memory_used_fraction:.0%} |")
    return "\n".join(rows) + f"\n\n> {res.comparison()}"


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)} to {format(hi, fmt)}"


def pick() -> str:
    best = _plan().best.estimate
    if not isinstance(best, HeteroEstimate):
        return f"The pick runs on one group alone ({_plan().best.label}): `train estimate` of that plan is a homogeneous one."
    rows = [f"`train estimate` of the pick: step {best.step_time_s:.2f} s, set by {best.critical_group}; "
            f"{best.tokens_per_s:,.0f} tokens/s.", "",
            "| group | pipeline ranks (copies each) | layers per rank | micro-batches per replica | busy s | "
            "memory GiB (usable) | ZeRO share per GPU |", "|---|---|---:|---:|---:|---:|---:|"]
    mbs = {}
    for g in best.gpus_per_group:
        rs = [r for r in best.ranks if r.group == g]
        mbs[g] = max(r.microbatches for r in rs)
        rows.append(f"| {g} | {len(rs)} ({_span([r.copies for r in rs], 'd')}) | {_span([r.layers for r in rs], 'd')} | "
                    f"{_span([r.microbatches for r in rs], 'd')} | {_span([r.busy_s for r in rs], '.1f')} | "
                    f"{_span([r.memory.total / 2**30 for r in rs], '.1f')} ({_span([r.capacity_gib for r in rs], '.1f')}) | "
                    f"{_span([r.state_share for r in rs], '.4f')} |")
    if best.layout.kind == "data" and len(mbs) == 2:
        (g1, m1), (g2, m2) = sorted(mbs.items(), key=lambda kv: -kv[1])
        rows += ["", f"The {g1} replicas take {m1 / m2:.2f} times the {g2} replicas' micro-batches."]
    return "\n".join(rows)


def links() -> str:
    rows = ["| inter_group_gbps | layout's step s | dp comm share | layout tokens/s | planner's pick (tokens/s) | "
            "vs the fastest group alone |", "|---:|---:|---:|---:|---|---|"]
    example = hetero_estimate(_job()).label()
    for g in GBPS:
        e = hetero_estimate(_job(g))
        res = _plan(None if g == _job().cluster.inter_group_gbps else g)
        label = "the example's layout" if res.best.label == example else res.best.label
        rows.append(f"| {g} | {e.step_time_s:.2f} | {e.time_s.dp_comm / e.step_time_s:.1%} | {e.tokens_per_s:,.0f} | "
                    f"{label} ({res.best.tokens_per_s:,.0f}) | {_versus_fastest(res)} |")
    return "\n".join(rows)


def pipeline() -> str:
    """The figures of the timeline benchmarks/hetero.py --plot draws (the same job)."""
    groups = [{"name": "h100", "gpu": "h100-sxm", "nodes": 2, "nic": {"count": 8, "gbps": 400, "kind": "ib"}},
              {"name": "a100", "gpu": "a100-80gb", "nodes": 2, "nic": {"count": 4, "gbps": 100, "kind": "roce"}}]
    e = hetero_estimate(job_from_mapping({
        "model": "llama-3.1-8b", "cluster": {"groups": groups, "inter_group_gbps": 400},
        "training": {"seq_len": 4096, "global_batch": 16},
        "parallel": {"tp": 8, "stage_groups": ["h100", "h100", "a100", "a100"], "micro_batch": 1, "schedule": "1f1b",
                     "recompute": "selective"}}))
    split = "/".join(str(r.layers) for r in e.ranks)
    busy = ", ".join(f"{r.busy_s:.2f}" for r in e.ranks)
    return f"The split {split} (step {e.step_time_s:.2f} s); per-rank busy time {busy} s."


def comparison() -> str:
    return _plan().comparison().split("; ")[0].split(": ", 1)[1]


RENDER: dict[str, Callable[[], str]] = {"plans": plans, "pick": pick, "links": links, "pipeline": pipeline,
                                        "comparison": comparison}


def refresh(text: str) -> str:
    """``text`` with every hetero-docs block rendered anew (inline blocks stay inline)."""
    def one(m: re.Match) -> str:
        body = RENDER[m.group(2)]()
        inline = "\n" not in m.group(3)
        return m.group(1) + (body if inline else "\n" + body + "\n") + m.group(4)

    return BLOCK.sub(one, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files")
    args = parser.parse_args()
    stale = []
    for path in FILES:
        text = path.read_text()
        new = refresh(text)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new)
    for path in stale:
        print(f"{'out of date' if args.check else 'rewrote'}: {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
