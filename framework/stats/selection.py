"""The selection-corrected estimate of a search's winner (the winner's curse).

Why: the candidate that looked best in exploration is, on average, one whose noise happened to be
favourable, so its exploration estimate against the reference is biased upward (with 8 equal
candidates the naive estimate of a null effect is about +1.4 standard errors of a candidate's
mean). The confirmation on fresh launches is unbiased; this module says what the exploration data
alone support once the selection is accounted for.

Method: conditional inference on the winner (Andrews, Kitagawa & McCloskey, "Inference on winners",
QJE 2024; NBER working paper 2019). With X ~ N(mu, Sigma) the candidates' effect estimates (log ratio
against the reference, oriented so that larger is better) and the winner k = argmax X, write
X_j = Z_j + c_j X_k with c_j = Sigma_jk / Sigma_kk; the selection event {X_k >= X_j for all j} is
then X_k in [L, U], L = max_{c_j < 1} Z_j / (1 - c_j), U = min_{c_j > 1} Z_j / (1 - c_j), and
conditionally on Z, X_k ~ N(mu_k, Sigma_kk) truncated to [L, U]. The **median-unbiased** estimate
solves F_TN(X_k; mu, L, U) = 1/2, and the equal-tailed (1 - 2 alpha) conditional interval solves
F_TN = 1 - alpha and alpha (F_TN is decreasing in mu). Sigma is the plug-in Welch variance: each
contrast's s_k^2/n_k + s_R^2/n_R, their covariance s_R^2/n_R through the shared reference (or one
pooled launch variance, `variance="pooled"`). The theory treats Sigma as known; with 3-5 launches
its plug-in makes the correction approximate (benchmarks/calibration_search.py measures it). The
purely conditional estimate and interval run off towards -inf when the winner barely beat the
runner-up, so the default is AKM's **hybrid**: also condition on mu_k lying in the projection
interval X_k +/- c_beta sd (simultaneous over the candidates at level 1 - beta), which bounds both;
its interval covers at least 1 - 2 alpha and its estimate is median-unbiased up to beta.

It assumes the winner is the argmax of the launch-level means over the candidates passed (the
explored ones). Inputs are launch-level values. Pure functions over plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Mapping, Sequence

import numpy as np
from scipy import optimize, special, stats

from framework.stats import effects

Direction = Literal["max", "min"]
Method = Literal["hybrid", "conditional"]
VarianceModel = Literal["separate", "pooled"]


@dataclass(frozen=True)
class Conditional:
    """Conditional inference on the selected component of a normal vector (log scale, larger is better)."""

    winner: int  # index of the argmax
    method: str  # "conditional" or "hybrid"
    observed: float  # X_k
    sd: float  # sqrt(Sigma_kk)
    truncation: tuple[float, float]  # [L, U]: where the selection confines X_k given Z
    median_unbiased: float
    ci: tuple[float, float]  # equal-tailed (1 - 2 alpha) interval (conditional: may be infinite; hybrid: finite)
    projection: float | None = None  # hybrid: c_beta, the half-width of the projection interval in sds of X_k


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
    method: str = "hybrid"  # AKM's "hybrid" or "conditional"
    variance: str = "separate"  # "separate" (per group) or "pooled" launch-level variance


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


def _selection(estimates: Sequence[float], cov: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, int, float,
                                                                                   tuple[float, float]]:
    """(X, Sigma, k = argmax X, sd of X_k, the truncation [L, U] of X_k given Z)."""
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
    return x, s, k, math.sqrt(skk), (lo, hi)


def conditional_winner(estimates: Sequence[float], cov: Sequence[Sequence[float]], alpha: float = 0.05) -> Conditional:
    """AKM conditional inference on mu_k for k = argmax(estimates), X ~ N(mu, cov) with cov known."""
    x, _, k, sd, (lo, hi) = _selection(estimates, cov)
    xk = float(x[k])
    med = _solve(xk, sd, lo, hi, 0.5)
    return Conditional(k, "conditional", xk, sd, (lo, hi), med,
                       (_solve(xk, sd, lo, hi, 1 - alpha), _solve(xk, sd, lo, hi, alpha)))


def projection_quantile(cov: Sequence[Sequence[float]], level: float, draws: int = 20000, seed: int = 0) -> float:
    """c with P(max_j |xi_j| / sd_j <= c) = level, xi ~ N(0, cov): the simultaneous (projection) critical value.

    Monte Carlo with a fixed seed, so the result is a deterministic function of its inputs (cached on them).
    """
    s = np.asarray(cov, float)
    return _projection(s.tobytes(), s.shape[0], float(level), int(draws), int(seed))


@lru_cache(maxsize=256)
def _projection(cov_bytes: bytes, k: int, level: float, draws: int, seed: int) -> float:
    s = np.frombuffer(cov_bytes, dtype=float).reshape(k, k)
    sd = np.sqrt(np.diag(s))
    z = np.random.default_rng(seed).standard_normal((draws, k))
    xi = np.einsum("dj,kj->dk", z, np.linalg.cholesky(s))  # not `@`: BLAS threads thrash on a loaded machine
    return float(np.quantile(np.max(np.abs(xi) / sd, axis=1), level))


def hybrid_winner(estimates: Sequence[float], cov: Sequence[Sequence[float]], alpha: float = 0.05,
                  beta: float | None = None) -> Conditional:
    """AKM hybrid inference on the winner: conditional on the selection and on mu_k in the projection interval.

    The projection interval X_k +/- c_beta sd (c_beta: `projection_quantile` at 1 - beta) covers every
    mu_j at once with probability 1 - beta. Conditioning also on it truncates X_k to
    [max(L, mu - c sd), min(U, mu + c sd)], which keeps the estimate and the interval inside the
    projection interval where the purely conditional ones run off when the winner barely won. The
    interval's total size is 2 alpha (equal tails); beta = 2 alpha / 10 as AKM recommend, and the
    conditional part runs at (2 alpha - beta) / (1 - beta). The estimate (F_H = 1/2) is median-unbiased up to beta.
    """
    size = 2 * alpha
    beta = size / 10 if beta is None else float(beta)
    if not 0 < beta < size:
        raise ValueError("beta must be in (0, 2 alpha)")
    x, s, k, sd, (lo, hi) = _selection(estimates, cov)
    xk = float(x[k])
    c = projection_quantile(s, 1 - beta)
    a_h = (size - beta) / (1 - beta)

    def root(level: float) -> float:
        def f(mu: float) -> float:
            return truncnorm_cdf(xk, mu, sd, max(lo, mu - c * sd), min(hi, mu + c * sd)) - level

        a, b = xk - c * sd, xk + c * sd  # F_H is 1 at a (x_k at the window's top) and 0 at b
        fa, fb = f(a), f(b)
        if fa <= 0:
            return a
        if fb >= 0:
            return b
        return float(optimize.brentq(f, a, b, xtol=1e-10 * sd, rtol=1e-12))

    return Conditional(k, "hybrid", xk, sd, (lo, hi), root(0.5), (root(1 - a_h / 2), root(a_h / 2)), c)


def _exp(v: float) -> float:
    return math.inf if v > 700 else (0.0 if v < -700 else math.exp(v))


def winner_estimate(candidates: Mapping[str, Sequence[float]], reference: Sequence[float], direction: Direction = "max",
                    alpha: float = 0.05, method: Method = "hybrid", variance: VarianceModel = "separate"
                    ) -> WinnerEstimate:
    """The exploration winner's naive and selection-corrected effect against the reference.

    `candidates`: each explored candidate's per-launch values of the goal metric (the reference not
    among them); `reference`: the reference's per-launch values. Every group needs 2+ launches.
    `method`: AKM's `hybrid` (the default, as they recommend: bounded estimate and interval) or
    `conditional`. `variance`: `separate` (each group its own launch variance, as Welch) or `pooled`
    (one launch-level variance for every group, df = sum(n_i - 1): far steadier with 3 launches a
    candidate, and right when the explored configurations share one noise level).
    """
    if direction not in ("max", "min"):
        raise ValueError(f"direction must be 'max' or 'min', not {direction!r}")
    if method not in ("hybrid", "conditional"):
        raise ValueError(f"method must be 'hybrid' or 'conditional', not {method!r}")
    if variance not in ("separate", "pooled"):
        raise ValueError(f"variance must be 'separate' or 'pooled', not {variance!r}")
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
    groups = [*logs, ref]
    if variance == "pooled":
        s2 = sum(float(np.var(v, ddof=1)) * (len(v) - 1) for v in groups) / sum(len(v) - 1 for v in groups)
        per = [s2] * len(groups)
    else:
        per = [float(np.var(v, ddof=1)) for v in groups]
    vr = per[-1] / len(ref)
    var = np.array([p / len(v) for p, v in zip(per[:-1], logs, strict=True)])
    d = np.array([float(v.mean() - ref.mean()) for v in logs])
    cov = np.full((len(names), len(names)), vr) + np.diag(var)
    if np.any(np.diag(cov) == 0):
        raise ValueError("zero observed spread: the selection cannot be corrected without a variance")
    cond = (hybrid_winner if method == "hybrid" else conditional_winner)(sign * d, cov, alpha)
    k = cond.winner
    w = effects.welch(logs[k], ref)
    lo, hi = w.bounds(alpha)
    c_lo, c_hi = cond.ci
    ci = (sign * c_lo, sign * c_hi) if sign > 0 else (sign * c_hi, sign * c_lo)
    return WinnerEstimate(names[k], direction, alpha, len(names), _exp(w.estimate), (_exp(lo), _exp(hi)),
                          _exp(sign * cond.median_unbiased), (_exp(ci[0]), _exp(ci[1])), cond.truncation,
                          method, variance)


def expected_max_bias(k: int) -> float:
    """E[max of k iid N(0, 1)]: the naive winner's bias, in units of one candidate mean's SE, when all k
    candidates are equal and equally noisy (the shared reference adds noise but no bias). For the docs and tests."""
    if k < 1:
        raise ValueError("k >= 1")
    grid = np.linspace(-10, 10, 20001)
    pdf = k * stats.norm.pdf(grid) * special.ndtr(grid) ** (k - 1)
    return float(np.trapezoid(grid * pdf, grid))
