"""Schedule engine benchmarks: speed at pp=32 x 256 micro-batches, and the Zero Bubble paper's Table 5.

Run: ``.venv/bin/python benchmarks/schedules.py`` (add ``--quick`` to skip the Table 5 fits).

1. Speed: for each schedule, wall time of generation + simulation and of simulation alone (best of
   5 runs, unit pass times); target < 50 ms each on a 2-core machine. ``auto`` is a search (several
   greedy runs, each simulated) and is reported separately.
2. Table 5 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): bubble rates the paper computed from
   profiled T_F, T_B, T_W, T_comm. The profiled times are not in the calibration data, so per model the
   three ratios are fitted on the smallest micro-batch count and the other two counts are predicted;
   ``auto`` at 1x and 2x 1F1B's memory is set against the paper's ZB-1p and ZB-2p.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import shardwise
from shardwise.pipeline import generate_schedule, list_schedules, simulate
from shardwise.pipeline.auto import auto_schedule, compare_schedules

PP, MB = 32, 256
TARGET_MS = 50.0
DATA = Path(shardwise.__file__).parent / "data" / "calibration" / "training-measurements.json"


def best_of(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def speed() -> None:
    print(f"== speed: pp={PP}, microbatches={MB} (interleaved and bfs at vpp=2), unit pass times ==")
    print(f"{'schedule':12s} {'actions':>8s} {'gen+sim ms':>11s} {'sim ms':>8s}  target {TARGET_MS:.0f} ms")
    for name in list_schedules():
        if name == "auto":
            continue
        vpp = 2 if name in ("interleaved", "bfs") else None
        sched = generate_schedule(name, PP, MB, vpp)
        simulate(sched)  # warm the compiled dependency arrays once, as a caller re-simulating would
        both = best_of(lambda name=name, vpp=vpp: simulate(generate_schedule(name, PP, MB, vpp)))
        alone = best_of(lambda sched=sched: simulate(sched))
        ok = "ok" if both < TARGET_MS else "over"
        print(f"{name:12s} {sched.num_actions:8d} {both:11.1f} {alone:8.1f}  {ok}")
    t = best_of(lambda: simulate(auto_schedule(PP, MB)), n=1)
    print(f"{'auto':12s} {3 * PP * MB:8d} {t:11.1f} {'':>8s}  (search: greedy variants + named seeds, each simulated)")


def _rates(x, p, m, cache):
    b, w, c = x
    out = []
    for name in ("1f1b", "zb-h1", "zb-h2"):
        if (name, p, m) not in cache:
            cache[(name, p, m)] = generate_schedule(name, p, m)
        out.append(simulate(cache[(name, p, m)], 1.0, b, w, p2p_s=c).stage_bubble_ratio)
    return np.array(out)


def table5() -> None:
    from scipy.optimize import least_squares

    rows = [r for r in json.loads(DATA.read_text()) if r["id"].startswith("zb_t5")]
    models: dict[str, list[dict]] = {}
    for r in rows:
        models.setdefault(r["model"]["name"], []).append(r)
    print("\n== Zero Bubble PP Table 5: bubble rate (cost - m(F+B+W))/cost, cost = longest rank span ==")
    print("fit T_B/T_F, T_W/T_F, T_comm/T_F on the smallest m; other rows are predictions")
    hdr = f"{'model':6s} {'p':>3s} {'m':>4s} | {'1F1B':>13s} {'ZB-H1':>13s} {'ZB-H2':>13s} | {'auto 1x':>7s} " \
          f"{'ZB-1p':>6s} {'auto 2x':>7s} {'ZB-2p':>6s}"
    print(hdr + "\n" + "-" * len(hdr) + "   (cells: ours/paper)")
    worst = 0.0
    for name, rs in models.items():
        rs.sort(key=lambda r: r["parallel"]["grad_accum"])
        p = rs[0]["parallel"]["pp"]
        cache: dict = {}
        tgt0 = [rs[0]["measured"]["bubble_rate_theoretical"][k] for k in ("1F1B", "ZB-H1", "ZB-H2")]
        m0 = rs[0]["parallel"]["grad_accum"]
        fit = least_squares(lambda x, p=p, m0=m0, cache=cache, tgt0=tgt0: _rates(x, p, m0, cache) - tgt0,
                            x0=[1.0, 0.7, 0.03], bounds=([0.2, 0.05, 0.0], [3.0, 3.0, 1.0]))
        b, w, c = fit.x
        print(f"{name.split()[1]:6s} fitted T_B/T_F={b:.3f} T_W/T_F={w:.3f} T_comm/T_F={c:.3f}")
        for k, r in enumerate(rs):
            m = r["parallel"]["grad_accum"]
            paper = r["measured"]["bubble_rate_theoretical"]
            ours = _rates(fit.x, p, m, cache)
            if k:
                worst = max(worst, float(np.max(np.abs(ours - [paper["1F1B"], paper["ZB-H1"], paper["ZB-H2"]]))))
            cells = " ".join(f"{o:.4f}/{paper[key]:.4f}" for o, key in zip(ours, ("1F1B", "ZB-H1", "ZB-H2")))
            autos = []
            for cap in (p, 2 * p):
                if p > 16:
                    autos.append(float("nan"))
                    continue
                a = auto_schedule(p, m, 1, 1.0, b, w, c, mem_cap=cap, objective="stage")
                autos.append(simulate(a, 1.0, b, w, p2p_s=c).stage_bubble_ratio)
            print(f"{'':6s} {p:3d} {m:4d} | {cells} | {autos[0]:7.4f} {paper['ZB-1p']:6.4f} {autos[1]:7.4f} "
                  f"{paper['ZB-2p']:6.4f}{'  (fit row)' if k == 0 else ''}")
    print(f"largest prediction error (non-fit rows): {worst:.4f}; auto not run for p > 16 (search time)")


def comparison() -> None:
    for label, kw in (("F=I=W=1", {}), ("I=1.3, W=0.6, comm=0.04 (1.5B fit)", {"i_s": 1.3, "w_s": 0.6, "p2p_s": 0.04})):
        print(f"\n== compare at pp=8, microbatches=32, {label}, times per rank slice ==")
        print(f"{'schedule':12s} {'vpp':>3s} {'makespan':>9s} {'span':>8s} {'bub_frac':>8s} {'bub_ratio':>9s} "
              f"{'stage_bub':>9s} {'peak act':>8s}")
        for row in compare_schedules(8, 32, 2, **kw):
            if "error" in row:
                print(f"{row['schedule']:12s} n/a: {row['error'][:70]}")
                continue
            print(f"{row['schedule']:12s} {row['vpp']:3d} {row['makespan']:9.2f} {row['stage_span']:8.2f} "
                  f"{row['bubble_fraction']:8.4f} {row['bubble_ratio']:9.4f} {row['stage_bubble_ratio']:9.4f} "
                  f"{row['peak_activation_rank_microbatches']:8.2f}")


if __name__ == "__main__":
    speed()
    comparison()
    if "--quick" not in sys.argv:
        table5()
