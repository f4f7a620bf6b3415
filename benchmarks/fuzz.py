"""Fuzzing at scale: thousands of newly generated malformed and extreme inputs (job files, flags, traces,
schedule CSVs) through the CLI, each in a worker process with a time limit and a memory limit; prints
the count per outcome class (tests/reliability/fuzzing.py defines the generator and the classes).

    python benchmarks/fuzz.py                    # 3,000 cases, seed 1, 2 workers, 20 s and 4 GiB per case
    python benchmarks/fuzz.py --cases 500 --seed 7 --workers 1

The suite's test (tests/reliability/test_fuzz.py) uses another seed: these cases are new.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from fuzzing import BAD, CLASSES, generate, run_case  # noqa: E402


def _worker(conn: Connection, mem_bytes: int, tmp: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    import shardwise.cli.main  # noqa: F401 - import before the clock of the first case starts

    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        k, case = job
        try:
            cls, detail = run_case(case, Path(tmp) / str(k))
        except MemoryError:
            cls, detail = "crash", "MemoryError"
        conn.send((k, cls, detail))


class Worker:
    """A process that runs cases one by one; the parent times each case from when it is handed over."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        self.parent, child = mp.Pipe()
        self.proc = mp.get_context("fork").Process(target=_worker, args=(child, int(args.mem_gib * 2**30), tmp), daemon=True)
        self.proc.start()
        self.parent.recv()  # "ready"
        self.case: int | None = None
        self.since = 0.0

    def give(self, k: int, case: object) -> None:
        self.case, self.since = k, time.monotonic()
        self.parent.send((k, case))

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--mem-gib", type=float, default=4.0, help="address-space limit per worker")
    args = ap.parse_args()

    cases = generate(args.seed, args.cases)
    counts: Counter[str] = Counter()
    by_label: dict[str, Counter[str]] = {}
    bad: list[str] = []
    slowest: list[tuple[float, str]] = []
    todo = list(range(args.cases))[::-1]
    t0 = time.monotonic()

    def record(k: int, cls: str, detail: str, seconds: float) -> None:
        counts[cls] += 1
        by_label.setdefault(cases[k].label, Counter())[cls] += 1
        slowest.append((seconds, f"{cases[k].label}: {' '.join(a[:30] for a in cases[k].argv)}"))
        if cls in BAD:
            bad.append(f"case {k} {cls}: {' '.join(a[:40] for a in cases[k].argv)} -> {detail[:240]}")

    with tempfile.TemporaryDirectory() as tmp:
        workers = [Worker(args, tmp) for _ in range(args.workers)]
        while todo or any(w.case is not None for w in workers):
            for i, w in enumerate(workers):
                if w.case is None and todo:
                    k = todo.pop()
                    w.give(k, cases[k])
                if w.case is None:
                    continue
                elapsed = time.monotonic() - w.since
                if w.parent.poll(0.01):
                    try:
                        k, cls, detail = w.parent.recv()
                    except EOFError:  # the worker died (killed by the OS, out of memory)
                        record(w.case, "crash", "worker died", elapsed)
                        w.stop()
                        workers[i] = Worker(args, tmp)
                        continue
                    record(k, cls, detail, elapsed)
                    w.case = None
                elif not w.proc.is_alive():
                    record(w.case, "crash", f"worker exited with {w.proc.exitcode}", elapsed)
                    workers[i] = Worker(args, tmp)
                elif elapsed > args.timeout:
                    record(w.case, "hang", f"over {args.timeout:g} s", elapsed)
                    w.stop()
                    workers[i] = Worker(args, tmp)
        for w in workers:
            w.parent.send(None)
            w.stop()

    wall = time.monotonic() - t0
    print(f"{args.cases:,} generated cases (seed {args.seed}), {args.workers} workers, {wall:.0f} s wall; "
          f"limits {args.timeout:g} s and {args.mem_gib:g} GiB per case")
    for cls in CLASSES:
        print(f"  {cls:12s} {counts[cls]:6,d}")
    print("by input kind:")
    for label, c in sorted(by_label.items()):
        print(f"  {label:24s} " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
    print("slowest cases:")
    for s, what in sorted(slowest, reverse=True)[:5]:
        print(f"  {s:6.2f} s  {what}")
    if bad:
        print(f"{len(bad)} cases ended badly:")
        for line in bad[:40]:
            print("  " + line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
