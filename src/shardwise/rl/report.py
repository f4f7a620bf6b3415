"""What `rl estimate` prints (tables) and writes (`--export`: the phases as serve and train job files, so each
phase can be re-run with `serve simulate` and `train estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from shardwise.console import make_console
from shardwise.rl.batch import draw_batch
from shardwise.rl.planner import RLPlanResult, placement_block
from shardwise.rl.spec import RLJob
from shardwise.rl.step import RLEstimate
from shardwise.specs.model import preset_names


def preset(name: str) -> bool:
    return name in preset_names()


def _s(x: float) -> str:
    return f"{x:,.2f}"


def estimate_tables(est: RLEstimate) -> list[Table]:
    """Headline, phases, the rollout's drain, memory per phase, and the iteration's timeline."""
    d = est.to_dict()
    p = d["placement"]
    pools = ", ".join(f"{k} {v}" for k, v in est.pools.items())
    where = (f"{p['kind']} ({pools} GPUs), {p['mode']}" + (f" staleness {p['staleness']}" if p["mode"] == "async" else "")
             + f"; rollout tp{p['rollout_tp']} pp{p['rollout_pp']}; train {p['train_plan']}")
    head = Table(title=f"{est.name}: {where}", title_justify="left", show_header=False, min_width=min(120, 30 + len(where)))
    head.add_column("metric")
    head.add_column("value", justify="right")
    rows = [
        ("samples per iteration", f"{est.samples:,}"),
        ("iteration time (s)", _s(est.period_s)),
        ("samples/s", _s(est.samples_per_s)),
        ("generated tokens/s", f"{est.generated_tokens_per_s:,.0f}"),
        ("trained tokens/s", f"{est.trained_tokens_per_s:,.0f}"),
        ("GPU idle (share of pool time)", ", ".join(f"{k} {v:.0%}" for k, v in d["gpu_idle_fraction"].items())),
        ("fits in memory", "yes" if est.fits else "NO"),
    ]
    if est.usd_per_1k_samples is not None:
        rows.append(("$ per 1k samples", f"${est.usd_per_1k_samples:,.3f}"))
    for k, v in rows:
        head.add_row(k, v)
    phases = Table(title="phases (s per iteration)", title_justify="left")
    phases.add_column("phase")
    phases.add_column("seconds", justify="right")
    phases.add_column("component")
    for name, t in est.phases_s.items():
        what = ("serve simulate" if name == "rollout" else "train estimate" if name.startswith(("train", "forward"))
                else "network model" if name == "weight sync" else "PCIe copies" if name.startswith("offload") else "CPU")
        phases.add_row(name, _s(t), what)
    r = d["rollout"]
    dr = r["drain"]
    drain = Table(title="rollout: how the batch drains", title_justify="left", show_header=False)
    drain.add_column("metric")
    drain.add_column("value", justify="right")
    f = dr["finish_s"]
    for k, v in (("replicas x (tp, pp)", f"{r['replicas']} x (tp{r['tp']}, pp{r['pp']})"),
                 ("responses done at 50/90/99/100% (s)", f"{f['p50']:,.1f} / {f['p90']:,.1f} / {f['p99']:,.1f} / {f['max']:,.1f}"),
                 ("peak running sequences", f"{dr['peak_running']:,}"),
                 ("batch idle (1 - mean running / peak)", f"{dr['batch_idle_fraction']:.0%}"),
                 ("replicas with nothing left (GPU time)", f"{dr['replica_idle_fraction']:.0%}"),
                 ("output tokens/s while generating", f"{r['output_tokens_per_s']:,.0f}"),
                 ("KV cache per GPU (GiB), engine memory share", f"{d['memory']['rollout']['kv_gib_per_gpu']:.1f}, "
                  f"{d['memory']['rollout']['engine_share']:.2f}")):
        drain.add_row(k, v)
    m = d["memory"]["train"]
    drain.add_row("training phase memory (GiB per GPU)", f"{m['need_gib']:.1f} of {m['usable_gib']:.1f} ({m['peak_model']})")
    time = Table(title="one iteration (s from its start)", title_justify="left")
    for col in ("pool", "phase", "start", "end"):
        time.add_column(col, justify="right" if col in ("start", "end") else "left")
    for s in est.timeline:
        time.add_row(s.pool, s.phase, _s(s.start_s), _s(s.end_s))
    return [head, phases, drain, time]


def print_estimate(est: RLEstimate) -> None:
    console = make_console()
    for t in estimate_tables(est):
        console.print(t)
    for note in est.notes:
        console.print(f"note: {note}")


def phase_jobs(job: RLJob, est: RLEstimate) -> dict[str, Any]:
    """The rollout as a serve job with its batch as a trace, and the policy update as a train job: `serve simulate`
    of the first gives the rollout phase's time, `train estimate` of the second one optimizer step."""
    r, a = job.rollout, job.algorithm
    requests = draw_batch(r.input_len, r.output_len, a.prompts_per_step, a.group_size, r.seed, job.engine.max_model_len)
    trace = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"0,{i},{o}\n" for i, o in zip(requests.input_len.tolist(), requests.output_len.tolist(), strict=True))
    model = job.spec.policy if isinstance(job.spec.policy, str) and preset(job.spec.policy) else job.policy.model_dump(exclude_none=True)
    util = est.memory["rollout"]["engine_share"]
    engine = {**(r.engine or {}), "gpu_memory_utilization": util}
    pools = est.pools
    serve = {"model": model, "precision": r.precision,
             "deployment": {"gpu": job.cluster.gpu.name, "tp": r.tp, "pp": r.pp,
                            "replicas": est.rollout.replicas, "engine": engine},
             "workload": {"arrival": "trace", "path": "rollout.csv"}}
    if job.spec.cluster.get("price_usd_per_gpu_hour") is not None:
        serve["deployment"]["price_usd_per_gpu_hour"] = job.spec.cluster["price_usd_per_gpu_hour"]
    elif job.cluster.gpu.price_usd_per_hour is None:
        serve["deployment"]["price_usd_per_gpu_hour"] = 0.0  # as the rollout phase simulated it (no list price)
    t = est.train_estimate
    plan = {k: v for k, v in t.plan.items() if v is not None and k != "tp_overlap"}
    train = {"model": model, "cluster": {**job.spec.cluster, "gpus": pools.get("train", pools.get("all"))},
             "training": {"seq_len": est.row_len, "global_batch": t.microbatches * plan["micro_batch"] * plan["dp"],
                          "precision": job.training.precision, "framework": job.training.framework},
             "parallel": plan}
    if job.training.compile is not None:
        train["training"]["compile"] = job.training.compile
    return {"rollout.yaml": serve, "rollout.csv": trace, "train.yaml": train}


def write_phase_jobs(job: RLJob, est: RLEstimate, out: Path) -> list[Path]:
    """Write :func:`phase_jobs` into the directory `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, body in phase_jobs(job, est).items():
        path = out / name
        path.write_text(body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False))
        written.append(path)
    return written


def plan_tables(res: RLPlanResult, top: int) -> list[Table]:
    """The ranked candidates (the chosen one first) and the rejections by reason."""
    pruned = f" ({res.bounded} bounded below the ranked ones without simulating)" if res.bounded else ""
    t = Table(title=f"rl plan: {res.considered} candidates, {res.feasible} run{pruned}, in {res.seconds:.1f} s", title_justify="left")
    for col in ("", "placement", "mode", "rollout", "train plan", "iteration (s)", "samples/s", "gen tok/s", "$/1k samples",
                "idle", "rollout drain idle"):
        t.add_column(col, justify="right" if col in ("iteration (s)", "samples/s", "gen tok/s", "$/1k samples", "idle",
                                                     "rollout drain idle") else "left")
    for k, e in enumerate(res.ranked[:top]):
        p = e.placement
        pools = "+".join(str(v) for v in e.pools.values())
        mode = p["mode"] + (f" (staleness {p['staleness']})" if p["mode"] == "async" else "")
        kind = p["kind"] + (" offload" if p.get("offload") else "")
        cost = "" if e.usd_per_1k_samples is None else f"${e.usd_per_1k_samples:,.3f}"
        idle = ", ".join(f"{v:.0%}" for v in e.idle().values())
        t.add_row("chosen" if k == 0 else "", f"{kind} {pools}", mode, f"tp{p['rollout_tp']} pp{p['rollout_pp']}", p["train_plan"],
                  _s(e.period_s), _s(e.samples_per_s), f"{e.generated_tokens_per_s:,.0f}", cost, idle,
                  f"{e.rollout.drain.batch_idle_fraction:.0%}")
    rej = Table(title="rejected", title_justify="left")
    rej.add_column("candidate")
    rej.add_column("why")
    for c, r in res.rejected[:12]:
        rej.add_row(c, r)
    if len(res.rejected) > 12:
        rej.add_row(f"... {len(res.rejected) - 12} more", "; ".join(f"{k}: {v}" for k, v in res.rejected_by_reason().items()))
    return [t, rej] if res.rejected else [t]


def print_plan(res: RLPlanResult, top: int) -> None:
    console = make_console()
    for t in plan_tables(res, top):
        console.print(t)
    console.print("chosen, as job-file sections: " + yaml.safe_dump(placement_block(res.best), default_flow_style=True,
                                                                     sort_keys=False).strip())
    for note in res.notes:
        console.print(f"note: {note}")
