"""Fuzzing in the suite: a few hundred generated malformed and extreme inputs (job files, flags, traces,
schedule CSVs; tests/reliability/fuzzing.py) must each end in an answer or one clean error line — no
traceback, no NaN/Infinity, no impossible value. `python benchmarks/fuzz.py` runs thousands more, in
worker processes with time and memory limits."""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from fuzzing import BAD, check_json, classify, generate, run_case

SEED = 20_240_610
CASES = 300


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang


def test_generated_inputs_end_cleanly(tmp_path):
    previous = signal.signal(signal.SIGALRM, _alarm)
    counts: Counter[str] = Counter()
    bad = []
    try:
        for k, case in enumerate(generate(SEED, CASES)):
            signal.alarm(60)  # a guard against a hang, not a timing assertion
            try:
                cls, detail = run_case(case, tmp_path / str(k))
            except _Hang:
                cls, detail = "hang", ""
            finally:
                signal.alarm(0)
            counts[cls] += 1
            if cls in BAD:
                bad.append(f"{cls}: {case.label} {[a[:40] for a in case.argv]} -> {detail[:200]}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not bad, "\n".join(bad)
    assert counts["answer"] >= 10 and counts["clean_error"] >= CASES // 2  # the corpus reaches both paths


@pytest.mark.parametrize(
    ("status", "out", "err", "expected"),
    [
        (0, '{"mfu": 0.4}', "", "answer"),
        (0, '{"mfu": NaN}', "", "nan_inf"),
        (0, '{"a": [1, Infinity]}', "", "nan_inf"),
        (0, '{"hfu": 1.3}', "", "impossible"),
        (0, '{"time_s": {"bubble_s": -0.5}}', "", "impossible"),
        (0, '{"bubble_ratio": 3.0}', "", "answer"),  # idle / compute may exceed 1
        (2, "", "error: workload.rate: must be positive\n", "clean_error"),
        (2, "", "Usage: x\nError: bad\n", "messy_error"),
        (2, "", "error: " + "x" * 700 + "\n", "messy_error"),
        (1, "", "Traceback (most recent call last):\n", "traceback"),
        (0, "step time   nan s", "", "nan_inf"),
    ],
)
def test_classifier(status, out, err, expected):
    assert classify(status, out, err) == expected


def test_json_check_is_strict():
    assert check_json('{"x": 1e400}') == "nan_inf"  # json.loads reads 1e400 as inf
    assert check_json('{"peak_memory_gib": 3.5, "mfu_causal": 0.2}') is None
