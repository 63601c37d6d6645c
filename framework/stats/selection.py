"""The selection-corrected estimate of a search's winner (the winner's curse).

Why: the candidate that looked best in exploration is, on average, one whose noise happened to be
favourable, so its exploration estimate against the reference is biased upward (with 8 equal
candidates the naive estimate of a null effect is about +1.4 standard errors of a candidate's
mean). The confirmation on fresh launches is unbiased; this module says what the exploration data
alone support once the selection is accounted for.

Method: conditional inference on the winner (Andrews, Kitagawa & McCloskey 2019/2024, "Inference on
winners", section 3). With X ~ N(mu, Sigma) the candidates' effect estimates (log ratio against the
reference, oriented so that larger is better) and the winner k = argmax X, write
X_j = Z_j + c_j X_k with c_j = Sigma_jk / Sigma_kk; the selection event {X_k >= X_j for all j} is
then X_k in [L, U], L = max_{c_j < 1} Z_j / (1 - c_j), U = min_{c_j > 1} Z_j / (1 - c_j), and
conditionally on Z, X_k ~ N(mu_k, Sigma_kk) truncated to [L, U]. The **median-unbiased** estimate
solves F_TN(X_k; mu, L, U) = 1/2, and the equal-tailed (1 - 2 alpha) conditional interval solves
F_TN = 1 - alpha and alpha (F_TN is decreasing in mu). Sigma is the plug-in Welch variance: each
contrast's s_k^2/n_k + s_R^2/n_R, their covariance s_R^2/n_R through the shared reference. The
theory treats Sigma as known; with 3-5 launches its plug-in makes the correction approximate
(benchmarks/calibration_search.py measures it). The conditional interval is the AKM "conditional"
one, not their hybrid; it widens when the winner barely beat the runner-up, as it should.

It assumes the winner is the argmax of the launch-level means over the candidates passed (the
explored ones). Inputs are launch-level values. Pure functions over plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np
from scipy import optimize, special, stats

from framework.stats import effects

Direction = Literal["max", "min"]


@dataclass(frozen=True)
class Conditional:
    """Conditional inference on the selected component of a normal vector (log scale, larger is better)."""

    winner: int  # index of the argmax
    observed: float  # X_k
    sd: float  # sqrt(Sigma_kk)
    truncation: tuple[float, float]  # [L, U]: where the selection confines X_k given Z
    median_unbiased: float
    ci: tuple[float, float]  # equal-tailed (1 - 2 alpha) conditional interval (may be infinite)


@dataclass(frozen=True)
class WinnerEstimate:
    """A search winner's effect against the reference, naive and selection-corrected, as ratios winner/reference."""

    winner: str
    direction: Direction  # which way "better" goes for the metric (max: throughput, min: latency)
    alpha: float  # one-sided; intervals are (1 - 2 alpha)
    n_candidates: int
    naive: float  # exp(mean log winner - mean log reference) on the exploration launches
    naive_ci: tuple[float, float]  # Welch (1 - 2 alpha) interval, ignoring the selection
    corrected: float  # median-unbiased conditional estimate (AKM 2019)
    corrected_ci: tuple[float, float]  # conditional (1 - 2 alpha) interval (0 or inf where unbounded)
    truncation: tuple[float, float]  # the selection's interval for the winner's log effect (oriented: larger is better)


def truncnorm_cdf(x: float, mu: float, sd: float, lo: float, hi: float) -> float:
    """P(X <= x) for N(mu, sd^2) truncated to [lo, hi], stable far in either tail.

    Equal to scipy's `truncnorm.cdf` (the tests cross-check it) at a fraction of its cost: the root
    finder calls it a hundred times per estimate. Far in the upper tail it works with log survival
    functions, far in the lower tail with log CDFs (`special.log_ndtr`), so neither side cancels.
    """
    a, b, z = (lo - mu) / sd, (hi - mu) / sd, (x - mu) / sd
    if z <= a:
        return 0.0
    if z >= b:
        return 1.0
    if a > 0:  # all the mass in the upper tail: 1 - F = (S(z) - S(b)) / (S(a) - S(b)), S(t) = Phi(-t)
        la, lb, lz = special.log_ndtr(-a), special.log_ndtr(-b), special.log_ndtr(-z)
        return float(-math.expm1(lz - la) / -math.expm1(lb - la)) if b < math.inf else float(-math.expm1(lz - la))
    if b < 0:  # all the mass in the lower tail
        la, lb, lz = special.log_ndtr(a), special.log_ndtr(b), special.log_ndtr(z)
        return float((math.exp(lz - lb) - math.exp(la - lb)) / -math.expm1(la - lb))
    pa, pb = float(special.ndtr(a)), float(special.ndtr(b))
    return (float(special.ndtr(z)) - pa) / (pb - pa)


def _solve(x: float, sd: float, lo: float, hi: float, level: float) -> float:
    """The mu with F_TN(x; mu) = level (F_TN falls from 1 to 0 as mu rises); +/-inf if out of reach."""
    def f(mu: float) -> float:
        return truncnorm_cdf(x, mu, sd, lo, hi) - level

    a, b = x - 2 * sd, x + 2 * sd
    for _ in range(60):
        if f(a) > 0:
            break
        a -= 2 * (b - a)
    else:
        return -math.inf
    for _ in range(60):
        if f(b) < 0:
            break
        b += 2 * (b - a)
    else:
        return math.inf
    if not (f(a) > 0 > f(b)):  # the cdf lost precision far in a tail: the bound is unbounded that way
        return -math.inf if f(a) <= 0 else math.inf
    return float(optimize.brentq(f, a, b, xtol=1e-10 * sd, rtol=1e-12))


def conditional_winner(estimates: Sequence[float], cov: Sequence[Sequence[float]], alpha: float = 0.05) -> Conditional:
    """AKM conditional inference on mu_k for k = argmax(estimates), X ~ N(mu, cov) with cov known."""
    x = np.asarray(estimates, float)
    s = np.asarray(cov, float)
    if x.ndim != 1 or s.shape != (len(x), len(x)):
        raise ValueError("estimates must be a vector and cov a square matrix of its size")
    k = int(np.argmax(x))
    skk = float(s[k, k])
    if not skk > 0:
        raise ValueError("the winner's variance must be > 0")
    c = s[:, k] / skk
    z = x - c * x[k]
    lo, hi = -math.inf, math.inf
    for j in range(len(x)):
        if j == k:
            continue
        if c[j] < 1:
            lo = max(lo, float(z[j] / (1 - c[j])))
        elif c[j] > 1:
            hi = min(hi, float(z[j] / (1 - c[j])))
    sd = math.sqrt(skk)
    xk = float(x[k])
    med = _solve(xk, sd, lo, hi, 0.5)
    return Conditional(k, xk, sd, (lo, hi), med, (_solve(xk, sd, lo, hi, 1 - alpha), _solve(xk, sd, lo, hi, alpha)))


def _exp(v: float) -> float:
    return math.inf if v > 700 else (0.0 if v < -700 else math.exp(v))


def winner_estimate(candidates: Mapping[str, Sequence[float]], reference: Sequence[float], direction: Direction = "max",
                    alpha: float = 0.05) -> WinnerEstimate:
    """The exploration winner's naive and selection-corrected effect against the reference.

    `candidates`: each explored candidate's per-launch values of the goal metric (the reference not
    among them); `reference`: the reference's per-launch values. Every group needs 2+ launches.
    """
    if direction not in ("max", "min"):
        raise ValueError(f"direction must be 'max' or 'min', not {direction!r}")
    if not 0 < alpha < 0.5:
        raise ValueError("alpha must be in (0, 0.5)")
    if not candidates:
        raise ValueError("no candidates")
    names = list(candidates)
    logs = [effects.log_values(candidates[n]) for n in names]
    ref = effects.log_values(reference)
    if len(ref) < 2 or any(len(v) < 2 for v in logs):
        raise ValueError("every candidate and the reference need at least 2 launch values")
    sign = 1.0 if direction == "max" else -1.0
    vr = float(np.var(ref, ddof=1)) / len(ref)
    var = np.array([float(np.var(v, ddof=1)) / len(v) for v in logs])
    d = np.array([float(v.mean() - ref.mean()) for v in logs])
    cov = np.full((len(names), len(names)), vr) + np.diag(var)
    if vr == 0 and np.any(var == 0):
        raise ValueError("zero observed spread: the selection cannot be corrected without a variance")
    cond = conditional_winner(sign * d, cov, alpha)
    k = cond.winner
    w = effects.welch(logs[k], ref)
    lo, hi = w.bounds(alpha)
    c_lo, c_hi = cond.ci
    ci = (sign * c_lo, sign * c_hi) if sign > 0 else (sign * c_hi, sign * c_lo)
    return WinnerEstimate(names[k], direction, alpha, len(names), _exp(w.estimate), (_exp(lo), _exp(hi)),
                          _exp(sign * cond.median_unbiased), (_exp(ci[0]), _exp(ci[1])), cond.truncation)


def expected_max_bias(k: int) -> float:
    """E[max of k iid N(0, 1)]: the naive winner's bias, in units of one candidate mean's SE, when all k
    candidates are equal and equally noisy (the shared reference adds noise but no bias). For the docs and tests."""
    if k < 1:
        raise ValueError("k >= 1")
    grid = np.linspace(-10, 10, 20001)
    pdf = k * stats.norm.pdf(grid) * special.ndtr(grid) ** (k - 1)
    return float(np.trapezoid(grid * pdf, grid))
