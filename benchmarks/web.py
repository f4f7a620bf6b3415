"""Load test of the web planner on 127.0.0.1: concurrent clients sending training estimates while others run
small plan searches through the job queue; prints p50/p99 latency per kind and the failed requests.

    .venv/bin/python benchmarks/web.py [--clients 50] [--plan-clients 5] [--seconds 30] [--think-s 0]

The server (`shardwise web`, one search worker) runs in its own process; the clients are asyncio tasks
in this one, on the same machine, so both share its cores. `--think-s` is each client's mean pause
between requests (exponential; 0 = closed loop, every client always waiting on a request); with a pause,
each client's first request also waits one such pause, so the clients do not start as one burst. Bounded: the
run stops after `--seconds` and waits at most 120 s more for the requests in flight. Prints figures only;
tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

MODELS = [("llama-3.1-8b", 8), ("llama-3.1-70b", 64), ("mistral-7b", 16), ("qwen2.5-72b", 64), ("gpt-22b", 32)]


def estimate_body(rng: random.Random) -> dict:
    """A varied job, so the server's caches do not answer every request."""
    model, gpus = rng.choice(MODELS)
    tp = rng.choice([1, 2, 4, 8])
    pp = rng.choice([1, 2, 4])
    while gpus % (tp * pp):
        tp //= 2
    batch = rng.choice([64, 128, 256, 512])
    return {"model": model, "cluster": {"gpu": rng.choice(["h100", "a100-80gb", "h200"]), "gpus": gpus},
            "training": {"seq_len": rng.choice([2048, 4096, 8192]), "global_batch": batch},
            "parallel": {"tp": tp, "pp": pp, "micro_batch": rng.choice([1, 2]), "recompute": rng.choice(["selective", "full"]),
                         "schedule": rng.choice(["1f1b", "zb-h1", "zbv"]) if pp > 1 else "1f1b"}}


def plan_body(rng: random.Random) -> dict:
    model, gpus = rng.choice(MODELS[:3])
    return {"model": model, "gpu": "h100", "gpus": gpus, "seq_len": rng.choice([2048, 4096]),
            "global_batch": rng.choice([64, 128]), "top": 3}


async def client(http: httpx.AsyncClient, kind: str, deadline: float, think_s: float, seed: int, out: list) -> None:
    rng = random.Random(seed)
    if think_s > 0:  # clients arrive spread out, as in steady state, not as one burst at t = 0
        await asyncio.sleep(rng.expovariate(1.0 / think_s))
    while time.monotonic() < deadline:
        path, body = ("/api/train/estimate", estimate_body(rng)) if kind == "estimate" else ("/api/train/plan", plan_body(rng))
        t0 = time.perf_counter()
        try:
            r = await http.post(path, json=body)
            ok = r.status_code == 200 or (kind == "estimate" and r.status_code == 422)  # a job that cannot run is an answer
            status = r.status_code
        except httpx.HTTPError as exc:
            ok, status = False, type(exc).__name__
        out.append((kind, time.perf_counter() - t0, ok, status))
        if think_s > 0:
            await asyncio.sleep(rng.expovariate(1.0 / think_s))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run(args: argparse.Namespace, base: str) -> list:
    out: list = []
    deadline = time.monotonic() + args.seconds
    limits = httpx.Limits(max_connections=args.clients + args.plan_clients)
    async with httpx.AsyncClient(base_url=base, timeout=180.0, limits=limits) as http:
        tasks = [client(http, "estimate", deadline, args.think_s, k, out) for k in range(args.clients - args.plan_clients)]
        tasks += [client(http, "plan", deadline, args.think_s, 1000 + k, out) for k in range(args.plan_clients)]
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.seconds + 120)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients in all")
    ap.add_argument("--plan-clients", type=int, default=5, help="of which send plan searches")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--think-s", type=float, default=0.0, help="mean pause between a client's requests (s)")
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "shardwise.cli.main", "web", "--port", str(port), "--no-access-log"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("the server did not start")
        httpx.post(base + "/api/train/plan", json=plan_body(random.Random(0)), timeout=120)  # start the search worker
        t0 = time.monotonic()
        results = asyncio.run(run(args, base))
        wall = time.monotonic() - t0
    finally:
        server.terminate()
        server.wait(timeout=15)
    print(f"{args.clients} clients ({args.plan_clients} sending plan searches), {args.seconds:g} s, think time "
          f"{args.think_s:g} s, server and clients on {os.cpu_count()} cores of 127.0.0.1 (load average before: "
          f"{os.getloadavg()[0]:.1f})")
    print(f"{'kind':10} {'requests':>9} {'per s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'failed':>7}")
    for kind in ("estimate", "plan"):
        rows = [r for r in results if r[0] == kind]
        if not rows:
            continue
        lat = np.array([r[1] for r in rows]) * 1e3
        failed = [r[3] for r in rows if not r[2]]
        p50, p90, p99 = np.percentile(lat, [50, 90, 99])
        print(f"{kind:10} {len(rows):9d} {len(rows) / wall:7.1f} {p50:8.1f} {p90:8.1f} {p99:8.1f} {lat.max():8.1f} {len(failed):7d}"
              + (f"  ({', '.join(sorted({str(s) for s in failed}))})" if failed else ""))


if __name__ == "__main__":
    main()
