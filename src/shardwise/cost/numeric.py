"""Element-wise operations on numbers or numpy arrays. The exact estimate passes plain numbers and the
planner's screen passes arrays (one plan per element) through the same cost rules; for numbers these
stay in plain Python, which is several times faster than a numpy call on a scalar."""

from __future__ import annotations

import math

import numpy as np

# A number for the exact estimate, an array with one element per plan for the screen.
Num = float | np.ndarray


def where(cond: bool | np.ndarray, a: Num, b: Num) -> Num:
    """np.where(cond, a, b)."""
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) and cond.ndim else (a if cond else b)


def maximum(a: Num, b: Num) -> Num:
    """np.maximum(a, b)."""
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else (a if a >= b else b)


def minimum(a: Num, b: Num) -> Num:
    """np.minimum(a, b)."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else (a if a <= b else b)


def ceil(x: Num) -> Num:
    """np.ceil(x) (a float for a number, as numpy gives)."""
    return np.ceil(x) if isinstance(x, np.ndarray) else float(math.ceil(x))
