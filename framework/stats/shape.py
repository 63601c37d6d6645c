"""What small samples cannot see, and whether two launch distributions differ in shape.

Why: every comparison estimates the ratio of geometric means over launches. A launch mode that is
rare (a slow launch in 3% of starts) moves that ratio but may not appear among a handful of launches,
and no test can rule it out: over any nonparametric family no test of a mean has power above its
size (Bahadur & Savage 1956). What can be said is how rare a mode can be and still go unseen: with
no such launch among n, the exact one-sided 95% upper bound on its rate is 1 - 0.05^(1/n) (the
"rule of three", about 3/n; Hanley & Lippman-Hand 1983). And when two conditions' launches visibly
differ in spread, the t-based interval is an approximation at small n; the Brown-Forsythe test (a
Levene test on absolute deviations from the median; Brown & Forsythe 1974) says when they do,
robustly to the heavy tails that make the variance-ratio F test useless. Pure functions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats

UNSEEN_CONFIDENCE = 0.95  # the conventional rule-of-three level, fixed before any data
# The resolution of a launch's log metric: the metrics are times and rates from clocks read to a
# microsecond over requests of a second or less, so differences below one part in a million are the
# arithmetic of a constant (float rounding, a cached answer, a timer's jitter), not a measured spread.
RESOLUTION = 1e-6


def unseen_rate(n: int, confidence: float = UNSEEN_CONFIDENCE) -> float:
    """The largest per-launch rate of a mode that n launches miss with probability >= 1 - confidence.

    (1 - r)^n = 1 - confidence, so r = 1 - (1 - confidence)^(1/n): the exact Clopper-Pearson upper
    bound for zero events in n trials.
    """
    if n < 1:
        return 1.0
    return float(1.0 - (1.0 - confidence) ** (1.0 / n))


def brown_forsythe(groups: Sequence[Sequence[float]]) -> float | None:
    """p-value of the Brown-Forsythe test of equal spread (scipy's Levene test, median-centred), or None.

    None when some group has fewer than 3 values (the absolute deviations from the median of 2
    values are equal, so the test is degenerate) or the test is undefined (no spread at all).
    """
    if len(groups) < 2 or any(len(g) < 3 for g in groups):
        return None
    with np.errstate(invalid="ignore", divide="ignore"):  # no spread at all: scipy divides 0 by 0 -> None below
        res = stats.levene(*[list(g) for g in groups], center="median")
    p = float(res.pvalue)
    return p if math.isfinite(p) else None
