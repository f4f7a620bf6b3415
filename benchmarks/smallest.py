#!/usr/bin/env python
"""How long the smallest-cluster search takes (`train plan` without `--gpus`): the target is <= 10 s for
Llama-3.1-405B.

    python benchmarks/smallest.py

Prints, per case, the smallest count that fits, the counts checked (screened) and the counts the memory bound
ruled out, and the seconds of the search alone (`smallest_fit`); then the same search with every count
checked (`exhaustive=True`, the brute force the tests compare it with) where that takes under a minute, and
the deadline search (`smallest_in_time`) for 405B on 15T tokens in 90 days.
"""

from __future__ import annotations

import time

from shardwise.specs.model_ref import load_model
from shardwise.specs.training import TrainingSpec
from shardwise.train.smallest import smallest_fit, smallest_in_time

CASES = [  # model, GPU, sequence, global batch (sequences), method, brute force too
    ("llama-3.1-405b", "h100", 8192, 2048, "full", False),
    ("llama-3.1-405b", "a100-80gb", 8192, 2048, "full", False),
    ("llama-3.1-70b", "h100", 8192, 512, "full", True),
    ("mixtral-8x7b", "h100", 4096, 256, "full", True),
    ("llama-3.1-70b", "l40s", 2048, 16, "qlora", True),
]


def main() -> None:
    for name, gpu, seq, batch, method, brute in CASES:
        model, training = load_model(name), TrainingSpec(seq_len=seq, global_batch=batch, method=method)
        t0 = time.perf_counter()
        n, verdicts = smallest_fit(model, gpu, training, max_gpus=4096)
        took = time.perf_counter() - t0
        checked = sum(1 for v in verdicts if v.first is None)
        ruled_out = sum(1 for v in verdicts if v.first is not None)
        line = (f"{name:15} {method:5} on {gpu:10} seq {seq:5} batch {batch:5}: smallest {n} GPUs; "
                f"{checked} counts screened, {ruled_out} range(s) ruled out by the memory bound; {took:6.2f} s")
        if brute:
            t0 = time.perf_counter()
            m, _ = smallest_fit(model, gpu, training, max_gpus=4096, exhaustive=True)
            line += f"; brute force {m} GPUs in {time.perf_counter() - t0:.2f} s"
        print(line, flush=True)
    model, training = load_model("llama-3.1-405b"), TrainingSpec(seq_len=8192, global_batch=2048, tokens=15e12)
    t0 = time.perf_counter()
    n, best, verdicts = smallest_in_time(model, "h100", training, days=90, max_gpus=65536)
    print(f"llama-3.1-405b 15T tokens in 90 days on h100: smallest {n} GPUs ({best.days_to_train:.1f} days, "
          f"{len(verdicts)} verdicts); {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
