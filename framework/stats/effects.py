"""Effects as ratios, estimated on the log scale: per-launch summaries and interval estimators.

Why the log scale: throughput and latency noise is multiplicative (a slow launch is "8% slower",
not "7 tok/s slower"), so log values are close to normal with a variance that does not depend on
the level, and a difference of log means is the log of a ratio - the quantity every prediction is
stated in. Why per-launch values: requests of one launch share that launch's offset (memory
layout, CUDA graph capture, NCCL set-up), so they are not independent replicates; the launch is.

Every estimator here returns an object with the same small interface, so the decision rules in
`decisions.py` do not care how an interval was obtained:

- ``estimate``: the log-effect point estimate;
- ``bounds(a)``: the one-sided (1 - a) lower and upper confidence bounds (log scale), i.e. together
  the two-sided (1 - 2a) interval;
- ``p_above(theta)``: the one-sided p-value of H0: effect <= theta (small => effect > theta);
- ``p_below(theta)``: the one-sided p-value of H0: effect >= theta (small => effect < theta).

Estimators: `welch` (Welch 1947), `hodges_lehmann` (rank; Hodges & Lehmann 1963 with the exact
Mann-Whitney distribution), `bootstrap_t` (studentized bootstrap, deterministic seed), and
`interaction_ols` (statsmodels OLS on the 2x2 cells, HC2 covariance with Satterthwaite df).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, Sequence

import numpy as np
from scipy import special, stats


class LogEffect(Protocol):
    estimate: float
    method: str

    def bounds(self, a: float) -> tuple[float, float]: ...

    def p_above(self, theta: float) -> float: ...

    def p_below(self, theta: float) -> float: ...


# --------------------------------------------------------------------------- per-launch summaries


def launch_means(values_by_launch: dict[str, Sequence[float]]) -> dict[str, float]:
    """Per-launch metric: the mean over a launch's measured (non-warm-up, ok) requests, metric units.

    Launches without a measured request are left out (they carry no information on the metric).
    """
    return {lid: float(np.mean(v)) for lid, v in values_by_launch.items() if len(v) > 0}


def log_values(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("metric values must be finite and > 0 for a log-scale analysis")
    return np.log(arr)


# --------------------------------------------------------------------------- Welch


def satterthwaite_df(variances: Sequence[float], ns: Sequence[int]) -> float:
    """Welch-Satterthwaite degrees of freedom of sum(v_i / n_i)."""
    terms = [v / n for v, n in zip(variances, ns, strict=False)]
    num = sum(terms) ** 2
    den = sum(t * t / (n - 1) for t, n in zip(terms, ns, strict=False) if n > 1)
    if num == 0 or den == 0:
        return float(sum(n - 1 for n in ns))  # no spread at all: fall back to the pooled df
    return num / den


@dataclass(frozen=True)
class TEffect:
    """A log effect with a t-distributed pivot: (estimate - effect) / se ~ t(df)."""

    estimate: float
    se: float
    df: float
    method: str = "welch"
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    def bounds(self, a: float) -> tuple[float, float]:
        q = float(special.stdtrit(self.df, 1.0 - a)) if self.se > 0 else 0.0
        return self.estimate - q * self.se, self.estimate + q * self.se

    def _t(self, theta: float) -> float:
        if self.se > 0:
            return (self.estimate - theta) / self.se
        return math.copysign(math.inf, self.estimate - theta) if self.estimate != theta else 0.0

    def p_above(self, theta: float) -> float:
        return float(special.stdtr(self.df, -self._t(theta)))

    def p_below(self, theta: float) -> float:
        return float(special.stdtr(self.df, self._t(theta)))


def welch(x_log: Sequence[float], y_log: Sequence[float]) -> TEffect:
    """Difference of mean log values (x - y), Welch standard error and Welch-Satterthwaite df.

    exp(estimate) is the ratio of geometric means of the per-launch metric (x over y).
    """
    x, y = np.asarray(x_log, float), np.asarray(y_log, float)
    nx, ny = len(x), len(y)
    if nx < 2 or ny < 2:
        raise ValueError("Welch needs at least 2 values per group")
    vx, vy = float(np.var(x, ddof=1)), float(np.var(y, ddof=1))
    se = math.sqrt(vx / nx + vy / ny)
    return TEffect(float(x.mean() - y.mean()), se, satterthwaite_df([vx, vy], [nx, ny]), "welch")


# --------------------------------------------------------------------------- Hodges-Lehmann


@lru_cache(maxsize=64)
def mann_whitney_pmf(m: int, n: int) -> np.ndarray:
    """Exact null distribution of the Mann-Whitney U (pairs x > y) for sample sizes m, n (no ties).

    Recurrence on the largest observation: p(m, n, u) = m/(m+n) p(m-1, n, u-n) + n/(m+n) p(m, n-1, u),
    in probabilities (numerically stable). Used for m*n up to 2500; beyond, a normal approximation.
    """
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0: U = 0 for every j
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, n + 1):
            out = np.zeros(i * j + 1)
            a, b = prev[j], cur[j - 1]
            out[j:j + len(a)] += i / (i + j) * a
            out[: len(b)] += j / (i + j) * b
            cur.append(out)
        prev = cur
    return prev[n]


def _u_cdf(m: int, n: int) -> np.ndarray | None:
    if m * n > 2500:
        return None
    return np.cumsum(mann_whitney_pmf(min(m, n), max(m, n)))


@dataclass(frozen=True)
class RankEffect:
    """Hodges-Lehmann shift of log values with distribution-free bounds from Mann-Whitney."""

    estimate: float
    diffs: np.ndarray = field(repr=False, compare=False)  # sorted pairwise differences x_i - y_j
    m: int = 0
    n: int = 0
    method: str = "rank"

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    def _c(self, a: float) -> int:
        """Largest c with P(U <= c - 1) <= a (so D_(c) is a (1 - a) lower bound); 0 if none."""
        cdf = _u_cdf(self.m, self.n)
        if cdf is None:
            mu, sd = self.m * self.n / 2, math.sqrt(self.m * self.n * (self.m + self.n + 1) / 12)
            c = int(math.floor(mu - stats.norm.ppf(1 - a) * sd + 0.5))  # continuity-corrected
            return max(c, 0)
        ok = np.nonzero(cdf <= a + 1e-12)[0]  # u values with P(U <= u) <= a
        return int(ok[-1]) + 1 if len(ok) else 0

    def bounds(self, a: float) -> tuple[float, float]:
        c = self._c(a)
        if c < 1:
            return -math.inf, math.inf
        return float(self.diffs[c - 1]), float(self.diffs[len(self.diffs) - c])

    def _p_greater(self, count: float) -> float:
        """P(U >= count) under the null."""
        cdf = _u_cdf(self.m, self.n)
        if cdf is None:
            mu, sd = self.m * self.n / 2, math.sqrt(self.m * self.n * (self.m + self.n + 1) / 12)
            return float(stats.norm.sf((count - 0.5 - mu) / sd))
        k = int(math.ceil(count - 1e-9))
        return float(1.0 - cdf[k - 1]) if k >= 1 else 1.0

    def p_above(self, theta: float) -> float:
        above = float(np.sum(self.diffs > theta) + 0.5 * np.sum(self.diffs == theta))
        return self._p_greater(above)

    def p_below(self, theta: float) -> float:
        below = float(np.sum(self.diffs < theta) + 0.5 * np.sum(self.diffs == theta))
        return self._p_greater(below)


def hodges_lehmann(x_log: Sequence[float], y_log: Sequence[float]) -> RankEffect:
    """Median of all pairwise differences x_i - y_j (log scale); exp() is a ratio."""
    x, y = np.asarray(x_log, float), np.asarray(y_log, float)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("the rank method needs at least 2 values per group")
    diffs = np.sort((x[:, None] - y[None, :]).ravel())
    return RankEffect(float(np.median(diffs)), diffs, len(x), len(y))


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class BootstrapEffect:
    """Studentized (bootstrap-t) interval for a contrast of group means of log values.

    Why bootstrap-t rather than percentile/BCa: with 3-10 launches per condition the percentile and
    BCa intervals are too narrow (they use normal rather than t tails and the plug-in variance), so
    their one-sided error is well above alpha; the studentized bootstrap keeps the t pivot's
    small-sample correction while letting skewness and heavy tails of the launch means through
    (Efron & Tibshirani 1993, ch. 12; Hall 1988).
    """

    estimate: float
    se: float
    tstar: np.ndarray = field(repr=False, compare=False)  # sorted (est* - est) / se*
    resamples: int = 0
    method: str = "bootstrap"

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    def bounds(self, a: float) -> tuple[float, float]:
        if self.se == 0:
            return self.estimate, self.estimate
        hi_q = float(np.quantile(self.tstar, 1 - a, method="higher"))
        lo_q = float(np.quantile(self.tstar, a, method="lower"))
        return self.estimate - hi_q * self.se, self.estimate - lo_q * self.se

    def _tobs(self, theta: float) -> float:
        if self.se == 0:
            return math.copysign(math.inf, self.estimate - theta) if self.estimate != theta else 0.0
        return (self.estimate - theta) / self.se

    def p_above(self, theta: float) -> float:
        t = self._tobs(theta)
        return float((np.sum(self.tstar >= t) + 1) / (len(self.tstar) + 1))

    def p_below(self, theta: float) -> float:
        t = self._tobs(theta)
        return float((np.sum(self.tstar <= t) + 1) / (len(self.tstar) + 1))


def bootstrap_t(groups: Sequence[Sequence[float]], weights: Sequence[float], *, seed: Sequence[int],
                resamples: int = 4000) -> BootstrapEffect:
    """Bootstrap-t for the contrast sum_g w_g * mean(groups[g]) (log values).

    Each group is resampled with replacement on its own (launches are the units). The standard
    error is the Welch one, sum w_g^2 s_g^2 / n_g. `seed` feeds numpy's SeedSequence, so the same
    data and seed give the same interval on every machine (an audit recomputes it exactly).
    """
    arrs = [np.asarray(g, float) for g in groups]
    if any(len(g) < 2 for g in arrs):
        raise ValueError("the bootstrap needs at least 2 values per group")
    w = np.asarray(weights, float)
    rng = np.random.default_rng(np.random.SeedSequence(list(seed)))
    est = float(sum(wi * g.mean() for wi, g in zip(w, arrs, strict=False)))
    se = math.sqrt(sum(wi * wi * g.var(ddof=1) / len(g) for wi, g in zip(w, arrs, strict=False)))
    est_b = np.zeros(resamples)
    var_b = np.zeros(resamples)
    for wi, g in zip(w, arrs, strict=False):
        idx = rng.integers(0, len(g), size=(resamples, len(g)))
        s = g[idx]
        est_b += wi * s.mean(axis=1)
        var_b += wi * wi * s.var(axis=1, ddof=1) / len(g)
    se_b = np.sqrt(var_b)
    diff = est_b - est
    with np.errstate(divide="ignore", invalid="ignore"):
        tstar = np.where(se_b > 0, diff / np.where(se_b > 0, se_b, 1.0),
                         np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0)))
    return BootstrapEffect(est, se, np.sort(tstar), resamples)


# --------------------------------------------------------------------------- interaction


def interaction_ols(cells: dict[tuple[str, str], Sequence[float]], factor: str, ref: str, level: str,
                    by: str, by_ref: str, by_level: str) -> TEffect:
    """Ratio of ratios from OLS on log per-launch values: log y ~ C(a, Treatment(ref)) * C(b, ...).

    `cells` maps (factor level, by level) to the log per-launch values of that cell. The interaction
    coefficient of the saturated 2x2 model is (l,bl) - (r,bl) - (l,br) + (r,br) in cell means of
    log values, i.e. the log of (level/ref | by_level) / (level/ref | by_reference).

    Its interval uses the HC2 covariance (MacKinnon & White 1985) with Welch-Satterthwaite df
    instead of the OLS pooled variance: EAGLE cells are several times noisier than baseline cells,
    and in a saturated cell-means model HC2 equals the Welch variance sum s_c^2 / n_c of the
    contrast, so the test stays at its level when cell variances differ. The OLS (pooled) se is
    kept in `extra` for reference.
    """
    import statsmodels.api as sm

    order = [(level, by_level), (ref, by_level), (level, by_ref), (ref, by_ref)]
    ns = [len(cells[k]) for k in order]
    if any(n < 2 for n in ns):
        raise ValueError("the interaction needs at least 2 values per cell")
    X, names = _interaction_design(ref, level, by_ref, by_level, tuple(ns))
    ly = np.concatenate([np.asarray(cells[k], float) for k in order])
    fit = sm.OLS(ly, X).fit()
    name = f"C(a, Treatment({ref!r}))[T.{level}]:C(b, Treatment({by_ref!r}))[T.{by_level}]"
    j = names.index(name)
    est = float(fit.params[j])
    variances = [float(np.var(np.asarray(cells[k], float), ddof=1)) for k in order]
    se = math.sqrt(sum(v / n for v, n in zip(variances, ns, strict=False)))
    df = satterthwaite_df(variances, ns)
    return TEffect(est, se, df, "ols_interaction",
                   extra={"ols_se": float(fit.bse[j]), "ols_df": float(fit.df_resid), "term": name})


INTERACTION_FORMULA = "np.log(y) ~ C(a, Treatment({ref!r})) * C(b, Treatment({by_ref!r}))"


@lru_cache(maxsize=512)
def _interaction_design(ref: str, level: str, by_ref: str, by_level: str,
                        ns: tuple[int, ...]) -> tuple[np.ndarray, list[str]]:
    """The model matrix of INTERACTION_FORMULA for cells of sizes `ns`, built by the statsmodels
    formula machinery (patsy) and cached: it depends only on the levels and the cell sizes, and
    building it is 30x slower than the fit (the calibration benchmark fits it millions of times).
    """
    import pandas as pd
    from patsy import dmatrices

    order = [(level, by_level), (ref, by_level), (level, by_ref), (ref, by_ref)]
    frame = pd.DataFrame([{"a": a, "b": b, "y": 1.0} for (a, b), n in zip(order, ns, strict=False) for _ in range(n)])
    _, X = dmatrices(INTERACTION_FORMULA.format(ref=ref, by_ref=by_ref), frame, return_type="dataframe")
    return X.to_numpy(), list(X.columns)
