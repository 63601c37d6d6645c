"""Evidence of a launch mode, a skewed condition or unequal spreads, each a test with a known null.

Why: a mark beside a verdict informs only if it fires more often on wrong verdicts than on right
ones. These three fire on what the launches show, and each is a level-`a` test under the model the
comparisons assume (a condition's log launch values independent and normal), so on launches that
fit that model each fires with probability at most `a`, fixed before any data:

- **a launch apart** (Grubbs 1969, two-sided): G = max_i |x_i - mean| / s against the critical value
  ((n-1)/sqrt(n)) sqrt(t^2 / (n - 2 + t^2)), t the upper a/(2n) point of t with n - 2 df (Bonferroni
  over the n launches; exact for G above sqrt((n-1)(n-2)/(2n)), conservative below). n >= 3.
- **skewness beyond chance** (D'Agostino 1970; scipy.stats.skewtest): the sample skewness, transformed
  to a standard normal under normality. n >= 8 (the transformation's range).
- **spreads that differ**: the variance-ratio F test for two conditions (exact under normality), or
  Bartlett's test for more (Bartlett 1937).

Pure functions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats

SKEWTEST_MIN_N = 8  # scipy's skewtest needs n >= 8


def grubbs_critical(n: int, a: float) -> float:
    """The two-sided Grubbs critical value at level `a` for n values."""
    t = float(stats.t.isf(a / (2 * n), n - 2))
    return (n - 1) / math.sqrt(n) * math.sqrt(t * t / (n - 2 + t * t))


def apart(values: Sequence[float], a: float) -> dict[str, float] | None:
    """Grubbs' test of one launch apart from the others: its statistic, critical value and the launch, or None.

    None when the test is not defined (fewer than 3 values, no spread) or does not reject at level `a`.
    """
    x = np.asarray(values, float)
    n = len(x)
    if n < 3:
        return None
    s = float(np.std(x, ddof=1))
    if not s > 0:
        return None
    dev = np.abs(x - x.mean()) / s
    i = int(np.argmax(dev))
    g, crit = float(dev[i]), grubbs_critical(n, a)
    if g <= crit:
        return None
    return {"g": g, "critical": crit, "index": i, "offset_log": float(x[i] - np.median(np.delete(x, i)))}


def skew_p(values: Sequence[float]) -> float | None:
    """Two-sided p of D'Agostino's skewness test, or None below 8 values or without spread."""
    x = np.asarray(values, float)
    if len(x) < SKEWTEST_MIN_N or not np.std(x) > 0:
        return None
    p = float(stats.skewtest(x).pvalue)
    return p if math.isfinite(p) else None


def spread_p(groups: Sequence[Sequence[float]]) -> float | None:
    """Two-sided p that the groups' variances are equal: F test for two groups, Bartlett's for more; or None."""
    if len(groups) < 2 or any(len(g) < 2 for g in groups):
        return None
    v = [float(np.var(g, ddof=1)) for g in groups]
    if not all(x > 0 for x in v):
        return None
    if len(groups) == 2:
        f = v[0] / v[1]
        d1, d2 = len(groups[0]) - 1, len(groups[1]) - 1
        return float(min(1.0, 2 * min(stats.f.cdf(f, d1, d2), stats.f.sf(f, d1, d2))))
    return float(stats.bartlett(*[list(g) for g in groups]).pvalue)
