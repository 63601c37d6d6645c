"""Outlying launches: Tukey fences on the log launch means of one condition.

Why: a slow launch (thermal throttling, a bad NCCL ring, another tenant) moves a whole launch, and
with five launches one such launch can move an interval enough to flip a verdict. The analysis keeps
every launch (the decision rule was registered before the data), but it flags launches outside
Tukey's fences [Q1 - k IQR, Q3 + k IQR] (Tukey 1977, k = 1.5) and re-decides without them as a
sensitivity check, so a verdict never flips silently. Quartiles by linear interpolation (numpy's
default); fewer than 4 launches are never flagged (the quartiles of 3 values say nothing).
"""

from __future__ import annotations

from typing import Sequence

MIN_LAUNCHES = 4


def _quantile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear interpolation) quantile, without numpy's per-call overhead."""
    xs = sorted(float(v) for v in values)
    h = (len(xs) - 1) * q
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def fences(values: Sequence[float], k: float = 1.5) -> tuple[float, float]:
    q1, q3 = _quantile(values, 0.25), _quantile(values, 0.75)
    iqr = q3 - q1
    return float(q1 - k * iqr), float(q3 + k * iqr)


def flag(ids: Sequence[str], log_values: Sequence[float], k: float = 1.5) -> list[str]:
    """Ids of launches whose log mean lies outside the Tukey fences of their condition."""
    if len(log_values) < MIN_LAUNCHES:
        return []
    lo, hi = fences(log_values, k)
    return [i for i, v in zip(ids, log_values, strict=False) if v < lo or v > hi]
