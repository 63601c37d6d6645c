"""Confidence bounds on an agreement rate when requests are the unit and launches the block.

The share of paired requests whose generated tokens are identical (framework.analysis.outputs) is a
proportion over clustered Bernoulli outcomes: requests of one block share a launch pair (a server's
numerics, its batch composition), so they are not independent. The bound is Korn and Graubard's (1998)
Clopper-Pearson interval for clustered data: the exact binomial (Clopper-Pearson 1934) interval at an
effective sample size n* = p(1 - p) / v, where v is the cluster-robust (between-block) variance of the
ratio estimate p = X / N, capped at N, and shrunk for the m - 1 degrees of freedom of v by
(t_{N-1} / t_{m-1})^2. At p = 0 or 1 (v = 0) n* = N before the shrink, as Korn and Graubard take it.
docs/statistics.md, "Outputs: an agreement rate over blocked requests". Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats


def clopper_pearson(x: float, n: float, a: float) -> tuple[float, float]:
    """One-sided (1 - a) lower and upper Clopper-Pearson bounds for x successes in n (both may be fractional)."""
    if n <= 0:
        return 0.0, 1.0
    lower = 0.0 if x <= 0 else float(stats.beta.ppf(a, x, n - x + 1))
    upper = 1.0 if x >= n else float(stats.beta.ppf(1 - a, x + 1, n - x))
    return lower, upper


def cluster_variance(matched: list[int], compared: list[int]) -> float:
    """The cluster-robust variance of p = sum(matched) / sum(compared) over m >= 2 blocks (the ratio estimator's
    linearization with the m / (m - 1) small-sample factor: statsmodels' cluster covariance of a mean)."""
    m, total = len(compared), sum(compared)
    p = sum(matched) / total
    return m / (m - 1) * sum((x - p * n) ** 2 for x, n in zip(matched, compared, strict=True)) / total ** 2


@dataclass(frozen=True)
class Agreement:
    """The agreement rate of N paired requests in m blocks, with its one-sided (1 - a) bounds."""

    identical: int
    compared: int
    blocks: int
    estimate: float
    lower: float
    upper: float
    n_effective: float  # Korn-Graubard's n* after the degrees-of-freedom shrink
    variance: float | None  # the cluster-robust variance of the estimate (None with one block)


def agreement(matched: list[int], compared: list[int], a: float) -> Agreement:
    """Korn-Graubard bounds for per-block counts (identical, compared); blocks with nothing compared are left out.

    With one block there is no between-block variance and the requests are taken as independent (n* = N).
    """
    pairs = [(x, n) for x, n in zip(matched, compared, strict=True) if n > 0]
    xs, ns = [x for x, _ in pairs], [n for _, n in pairs]
    total, ident, m = sum(ns), sum(xs), len(ns)
    if total == 0:
        return Agreement(0, 0, 0, math.nan, 0.0, 1.0, 0.0, None)
    p = ident / total
    var = cluster_variance(xs, ns) if m >= 2 else None
    n_star = float(total) if not var or p in (0.0, 1.0) else min(float(total), p * (1 - p) / var)
    if m >= 2 and total >= 2:
        n_star *= (stats.t.ppf(1 - a, total - 1) / stats.t.ppf(1 - a, m - 1)) ** 2
    lower, upper = clopper_pearson(p * n_star, n_star, a)
    return Agreement(ident, total, m, p, lower, upper, float(n_star), var)


def identical_needed(bound: float, a: float) -> int:
    """Independent identical requests whose one-sided (1 - a) Clopper-Pearson lower bound reaches `bound`:
    the smallest n with a^(1/n) >= bound (the rule of three's exact form; 59 for 0.95 at a = 0.05)."""
    if bound >= 1.0:
        raise ValueError("no finite number of requests bounds the agreement at 1")
    return math.ceil(math.log(a) / math.log(bound))
