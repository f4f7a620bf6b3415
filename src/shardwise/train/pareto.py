"""Pareto fronts: the plans no other plan beats on both axes."""

from __future__ import annotations

import numpy as np


def pareto_front(maximise: np.ndarray, minimise: np.ndarray) -> np.ndarray:
    """Indices of the points not dominated on (maximise up, minimise down), sorted by `minimise`.

    A point is dominated when another is at least as good on both axes and better on one. Sort by the
    minimised axis (ties: larger maximised first), then keep points that strictly raise the running
    best of the maximised axis: O(n log n).
    """
    maximise, minimise = np.asarray(maximise, float), np.asarray(minimise, float)
    if maximise.size == 0:
        return np.zeros(0, dtype=int)
    order = np.lexsort((np.arange(len(maximise)), -maximise, minimise))
    best = np.maximum.accumulate(maximise[order])
    prev = np.concatenate([[-np.inf], best[:-1]])
    return order[maximise[order] > prev]
