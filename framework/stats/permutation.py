"""A distribution-free check beside the t-based rule: the studentized permutation test of a mean difference.

Why: the Welch interval assumes roughly normal launch means. Permuting the launches between the two
conditions needs no distribution at all when they are exchangeable under the null, and studentizing
the statistic (Welch's t, not the raw difference) keeps the test asymptotically valid for the
difference of means even when the two distributions differ in spread or shape (Janssen 1997;
Chung & Romano 2013), where the plain permutation test is not. It is a check, not a rule: at the
launch counts of these experiments neither it nor any test sees a mode that did not occur
(`framework.stats.shape`).

What: for H0: mean(x) - mean(y) <= theta (`alternative="greater"`; "less" mirrors it), shift x by
theta, pool, and count the splits whose Welch t is at least the observed one. All C(n_x + n_y, n_x)
splits when there are at most `EXACT_LIMIT` (exact), otherwise `RESAMPLES` seeded random ones with
the observed split counted, p = (1 + #{T* >= T}) / (1 + B). Pure functions.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal, Sequence

import numpy as np

EXACT_LIMIT = 20_000
RESAMPLES = 4_000


def _welch_t(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Welch t statistics of rows of a against rows of b (2-D arrays, one resample a row)."""
    va, vb = a.var(axis=1, ddof=1), b.var(axis=1, ddof=1)
    se = np.sqrt(va / a.shape[1] + vb / b.shape[1])
    diff = a.mean(axis=1) - b.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.sign(diff) * np.inf)
    return t


def smallest_p(nx: int, ny: int) -> float:
    """The smallest p-value `studentized_p` can return for these group sizes: 1 over the number of splits
    (exact) or over the resamples plus the observed split. Below it, the check cannot reach a level at all."""
    splits = math.comb(nx + ny, nx)
    return 1.0 / splits if splits <= EXACT_LIMIT else 1.0 / (RESAMPLES + 1)


def studentized_p(x: Sequence[float], y: Sequence[float], theta: float = 0.0,
                  alternative: Literal["greater", "less"] = "greater", seed: int = 0) -> float:
    """One-sided permutation p-value of H0: mean(x) - mean(y) <= theta ("greater") or >= theta ("less")."""
    xs = np.asarray(x, float) - theta
    ys = np.asarray(y, float)
    nx, ny = len(xs), len(ys)
    if nx < 2 or ny < 2:
        raise ValueError("the permutation check needs at least 2 values per condition")
    pooled = np.concatenate([xs, ys])
    n = nx + ny
    sign = 1.0 if alternative == "greater" else -1.0
    t_obs = sign * float(_welch_t(xs[None, :], ys[None, :])[0])
    if math.comb(n, nx) <= EXACT_LIMIT:
        idx = np.array(list(itertools.combinations(range(n), nx)))
        mask = np.zeros((len(idx), n), bool)
        mask[np.arange(len(idx))[:, None], idx] = True
        extra = 0
    else:
        rng = np.random.default_rng(seed)
        order = np.argsort(rng.random((RESAMPLES, n)), axis=1)
        mask = np.zeros((RESAMPLES, n), bool)
        mask[np.arange(RESAMPLES)[:, None], order[:, :nx]] = True
        extra = 1  # the observed split, counted once (a valid p-value: Phipson & Smyth 2010)
    a = np.where(mask, pooled[None, :], np.nan)
    b = np.where(~mask, pooled[None, :], np.nan)
    a = np.sort(a, axis=1)[:, :nx]  # the non-NaN values first (NaN sorts last)
    b = np.sort(b, axis=1)[:, :ny]
    t = sign * _welch_t(a, b)
    hits = int(np.sum(t >= t_obs - 1e-12 * max(1.0, abs(t_obs)))) if math.isfinite(t_obs) else \
        int(np.sum(t >= t_obs))
    return float((hits + extra) / (len(t) + extra))
