"""Anytime-valid inference: a t-test e-process on block contrasts and its confidence sequence.

Why: a user looks after every block, stops when they like, or extends a finished run with more
launches. A fixed-sample test read that way inflates its error (the audit measured 0.049 -> 0.078
for "run 5, extend to 10 if undecided"); an e-process keeps it at alpha under any such behaviour
(Ville's inequality: P(sup_n E_n >= 1/alpha) <= alpha for a nonnegative supermartingale with
E_0 = 1; Ramdas, Grunwald, Vovk & Shafer 2023).

What: the run's randomized complete blocks give one contrast per block, c_r = sum_cell w_cell x_cell,r
(x = log launch mean; w = (+1, -1) for a ratio, (+1, -1, -1, +1) for an interaction), i.i.d. across
blocks. Under the model c_r ~ N(mu, sigma^2) with sigma unknown, the one-sided e-process for
H0: mu <= theta against mu > theta is the Bayes factor of the scale-invariant (maximal invariant)
data, which depends on the data only through the t statistic of the shifted contrasts
t_n = sqrt(n) (mean(c) - theta) / sd(c), nu = n - 1:

    E_n(theta) = integral_0^inf  f_{nu, delta sqrt(n)}(t_n) / f_{nu, 0}(t_n)  pi(delta) d delta,

f_{nu, lambda} the noncentral t density and pi the half-normal density of scale r = 1 on the
standardized effect delta = (mu - theta) / sigma. With the right-Haar prior on sigma implicit in
the invariance reduction, E_n is a test martingale under mu = theta (Lai 1976; Perez-Ortiz, Lardy,
de Heide & Grunwald 2024, "E-statistics, group invariance and anytime-valid testing"). For
mu < theta no supermartingale is needed: shifting the contrasts up to mean theta raises every t_n
on the same path and E_n increases in t_n (monotone likelihood ratio), so the crossing probability
is at most the boundary's (a coupling; docs/statistics.md, section 10).
Sigma is never estimated and plugged in: the scale is integrated out exactly, so the guarantee holds
from the second block on, not asymptotically.

Because E_n(theta) is an increasing function g_n(t) of t_n alone, "E_n >= 1/a" is "t_n >= t*_n(a)"
with a critical value t*_n(a) = g_n^{-1}(1/a) that depends only on n and a (cached). The lower
confidence-sequence bound at n is then L_n = mean - t*_n sd / sqrt(n), and the running intersection
max_{m <= n} L_m is a (1 - a) lower confidence sequence valid at every n at once; the same for the
upper bound with the mirrored e-process. The p-value is the anytime p-value min(1, 1 / sup_m E_m).
The mixing scale r = 1 (a standardized effect of one contrast sd, the size a handful of blocks can
decide) was fixed before any calibration and is not tuned. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from scipy import optimize, special

PRIOR_SCALE = 1.0
_NODES = 400  # trapezoid nodes of the one-dimensional integral over the scale (see log_e_values)


def log_e_values(ts: np.ndarray, ns: np.ndarray, scale: float = PRIOR_SCALE) -> np.ndarray:
    """log E_n at t statistics `ts` of `ns` observations each (vectorized over pairs; n >= 2, t finite).

    The noncentral-t likelihood ratio is the likelihood ratio of the scale-invariant data (Wijsman's
    representation): LR(delta) = exp(-n delta^2 / 2) H(delta s) / H(0), H(z) = int_0^inf u^(n-1)
    exp(-u^2/2 + z u) du, s = sqrt(n) t / sqrt(n - 1 + t^2). Mixing over the half-normal prior of
    scale r is a Gaussian integral in delta, A = 1/r^2 + n:

        E_n = int_0^inf u^(n-1) exp(-u^2/2 (1 - s^2/A)) (2 / (r sqrt(A))) Phi(s u / sqrt(A)) du
              / (2^((n-2)/2) Gamma(n/2)),

    a smooth one-dimensional integral, done in log space by the trapezoid rule on 400 nodes up to
    (sqrt(n-1) + 12) / sqrt(1 - s^2/A), past which the integrand is below e^-72 of its peak. Tests
    cross-check it against scipy's noncentral t and adaptive quadrature over delta.
    """
    ts, ns = np.asarray(ts, float), np.asarray(ns, float)
    s = np.sqrt(ns) * ts / np.sqrt(ns - 1 + ts * ts)
    big_a = 1.0 / scale ** 2 + ns
    b = 1.0 - s * s / big_a
    umax = (np.sqrt(ns - 1) + 12.0) / np.sqrt(b)
    x = np.linspace(0.0, 1.0, _NODES)[1:]  # the integrand is 0 at u = 0 (n >= 2)
    u = x[None, :] * umax[:, None]
    logf = ((ns[:, None] - 1) * np.log(u) - b[:, None] * u * u / 2
            + special.log_ndtr(s[:, None] * u / np.sqrt(big_a)[:, None]))
    logw = np.zeros(_NODES - 1)
    logw[-1] = math.log(0.5)
    lognum = (special.logsumexp(logf + logw[None, :], axis=1) + np.log(umax / (_NODES - 1))
              + math.log(2.0) - np.log(scale * np.sqrt(big_a)))
    logden = (ns - 2) / 2 * math.log(2.0) + special.gammaln(ns / 2)
    return lognum - logden


def log_e_value(t: float, n: int, scale: float = PRIOR_SCALE) -> float:
    """log E_n for a t statistic `t` of n observations (nu = n - 1): the half-normal mixture of noncentral-t LRs."""
    if n < 2:
        return 0.0
    if not math.isfinite(t):
        return math.inf if t > 0 else -math.inf
    return float(log_e_values(np.array([t]), np.array([n]), scale)[0])


@lru_cache(maxsize=4096)
def critical_t(n: int, a: float, scale: float = PRIOR_SCALE) -> float:
    """t*_n(a): the t statistic at which E_n reaches 1/a (E_n increases with t)."""
    target = math.log(1.0 / a)
    f = lambda t: log_e_value(t, n, scale) - target  # noqa: E731
    hi = 10.0
    while f(hi) < 0:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-10))


@dataclass
class AnytimeEffect:
    """The log effect from block contrasts, with anytime-valid bounds and p-values (decisions' interface)."""

    contrasts: list[float]  # one per complete block, in block order
    method: str = "anytime"
    scale: float = PRIOR_SCALE
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = np.asarray(self.contrasts, float)
        if len(c) < 2:
            raise ValueError("the anytime analysis needs at least 2 complete blocks")
        n = np.arange(1, len(c) + 1)
        self._means = np.cumsum(c) / n
        # running sample sd (ddof 1), from the second block on
        sq = np.cumsum(c * c)
        var = np.where(n > 1, (sq - n * self._means ** 2) / np.maximum(n - 1, 1), np.nan)
        self._sds = np.sqrt(np.maximum(var, 0.0))
        self.estimate = float(self._means[-1])
        self.extra = {"blocks": int(len(c)), "prior_scale": self.scale, **self.extra}

    def _ns(self) -> range:
        return range(2, len(self.contrasts) + 1)

    def bounds(self, a: float) -> tuple[float, float]:
        """Running intersection of the one-sided (1 - a) confidence sequences over every block count."""
        lo, hi = -math.inf, math.inf
        for n in self._ns():
            m, s = self._means[n - 1], self._sds[n - 1]
            if s == 0:  # no spread seen yet: no evidence at this n (never a zero-width interval)
                continue
            half = critical_t(n, float(a), self.scale) * s / math.sqrt(n)
            lo, hi = max(lo, m - half), min(hi, m + half)
        return float(lo), float(hi)

    def _sup_log_e(self, theta: float, sign: float) -> float:
        ns = np.arange(2, len(self.contrasts) + 1)
        means, sds = self._means[1:], self._sds[1:]
        keep = sds > 0  # no spread seen yet: no evidence at that n
        if not keep.any():
            return 0.0
        ts = np.sqrt(ns[keep]) * sign * (means[keep] - theta) / sds[keep]
        return float(max(0.0, np.max(log_e_values(ts, ns[keep], self.scale))))  # E_0 = 1

    def p_above(self, theta: float) -> float:
        """Anytime p-value of H0: effect <= theta: min(1, 1 / sup_n E_n)."""
        return float(min(1.0, math.exp(-self._sup_log_e(theta, +1.0))))

    def p_below(self, theta: float) -> float:
        """Anytime p-value of H0: effect >= theta."""
        return float(min(1.0, math.exp(-self._sup_log_e(theta, -1.0))))


def block_contrasts(cells: Sequence[dict[Any, float]], weights: Sequence[float]) -> tuple[list[float], list[Any]]:
    """Contrasts of the blocks every cell has a value in: cells[i] maps a block (replicate) to a log value."""
    common = sorted(set.intersection(*(set(c) for c in cells)), key=lambda b: (str(type(b)), b))
    return [float(sum(w * c[b] for w, c in zip(weights, cells, strict=False))) for b in common], common


# --------------------------------------------------------------------------- launch outcomes (Bernoulli)

# Beta(1, 1): every launch-outcome rate equally likely a priori; fixed before any calibration, not tuned.
BETA_PRIOR = (1.0, 1.0)


def log_e_rate(k: int, n: int, rate: float, side: str, prior: tuple[float, float] = BETA_PRIOR) -> float:
    """log E_n of k expected outcomes in n launches against H0: q <= rate (side "above") or q >= rate ("below").

    The conjugate beta-binomial mixture of likelihood ratios (Robbins 1970; Howard et al. 2021), with
    the Beta prior truncated to the alternative, (rate, 1) or (0, rate):

        E_n = [int_alt p^k (1-p)^(n-k) beta(p) dp / Pi(alt)] / (rate^k (1-rate)^(n-k))
            = B(k+a0, n-k+b0) I_alt(k+a0, n-k+b0) / (B(a0, b0) I_alt(a0, b0) rate^k (1-rate)^(n-k)),

    I_alt the regularized incomplete beta of the alternative's interval. Each component p of the
    alternative multiplies E by p/rate per expected outcome and (1-p)/(1-rate) per other, whose mean
    under any q on the null side is <= 1, so E_n is a nonnegative supermartingale under the whole
    composite null (a martingale at q = rate), E_0 = 1.
    """
    if not 0.0 < rate < 1.0 or not 0 <= k <= n:
        raise ValueError(f"need 0 < rate < 1 and 0 <= k <= n, got rate={rate}, k={k}, n={n}")
    if n == 0:
        return 0.0
    if side not in ("above", "below"):
        raise ValueError(f"side must be 'above' or 'below', got {side!r}")
    a0, b0 = prior
    tail = special.betaincc if side == "above" else special.betainc
    num = special.betaln(k + a0, n - k + b0) + math.log(max(float(tail(k + a0, n - k + b0, rate)), 1e-320))
    den = special.betaln(a0, b0) + math.log(float(tail(a0, b0, rate))) + k * math.log(rate) \
        + (n - k) * math.log1p(-rate)
    return float(num - den)


def _rate_bound(k: int, n: int, a: float, side: str) -> float:
    """The one-sided (1 - a) bound at (k, n): the rates r whose e-process against `side` stays below 1/a.

    E_n(r) falls as r moves from 0 (side "above") or 1 ("below") towards k/n, and is below 1 from
    k/n on (the likelihood is unimodal there), so the bound is the one root of log E_n(r) = log(1/a).
    """
    target, eps = math.log(1.0 / a), 1e-12

    def f(r: float) -> float:
        return log_e_rate(k, n, r, side) - target

    if side == "above":
        hi = k / n if k < n else 1.0 - eps
        return 0.0 if k == 0 or f(eps) <= 0 else float(optimize.brentq(f, eps, hi, xtol=1e-12))
    lo = k / n if k > 0 else eps
    return 1.0 if k == n or f(1.0 - eps) <= 0 else float(optimize.brentq(f, lo, 1.0 - eps, xtol=1e-12))


@dataclass
class RateSequence:
    """The rate q of an expected launch outcome, from counts at each look, with anytime-valid bounds and p-values.

    `looks` are cumulative (matched k, launches n) at the moments the run could have been looked at
    (the end of each block, in block order): every one is a prefix of the run's own sequence of
    launches, so the supremum over them is covered by Ville's inequality.
    """

    looks: list[tuple[int, int]]

    def __post_init__(self) -> None:
        self.looks = [(int(k), int(n)) for k, n in self.looks if n > 0]
        k, n = self.looks[-1] if self.looks else (0, 0)
        self.matched, self.launches = k, n
        self.estimate = k / n if n else math.nan

    def _sup_log_e(self, rate: float, side: str) -> float:
        return max([0.0] + [log_e_rate(k, n, rate, side) for k, n in self.looks])  # E_0 = 1

    def p_above(self, rate: float) -> float:
        """Anytime p-value of H0: q <= rate: min(1, 1 / sup_n E_n)."""
        return float(min(1.0, math.exp(-self._sup_log_e(rate, "above"))))

    def p_below(self, rate: float) -> float:
        """Anytime p-value of H0: q >= rate."""
        return float(min(1.0, math.exp(-self._sup_log_e(rate, "below"))))

    def bounds(self, a: float) -> tuple[float, float]:
        """Running intersection of the one-sided (1 - a) confidence sequences over the looks."""
        lo = max([0.0] + [_rate_bound(k, n, a, "above") for k, n in self.looks])
        hi = min([1.0] + [_rate_bound(k, n, a, "below") for k, n in self.looks])
        return float(lo), float(hi)


def launches_to_support(rate: float, a: float, limit: int = 10_000) -> int:
    """The fewest launches that, all with the expected outcome, reach 1/a against q <= rate."""
    n = 1
    while log_e_rate(n, n, rate, "above") < math.log(1.0 / a):
        n += 1
        if n > limit:
            raise ValueError(f"no launch count up to {limit} supports rate {rate} at level {a}")
    return n
