"""The selection-corrected winner: the truncation set, the conditional estimate's median-unbiasedness and coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from framework.stats.selection import (
    conditional_winner,
    expected_max_bias,
    hybrid_winner,
    projection_quantile,
    truncnorm_cdf,
    winner_estimate,
)


def _still_winner(x: np.ndarray, cov: np.ndarray, k: int, xk: float) -> bool:
    c = cov[:, k] / cov[k, k]
    z = x - c * x[k]
    y = z + c * xk
    return int(np.argmax(y)) == k


@pytest.mark.parametrize("seed", range(5))
def test_the_truncation_interval_is_the_selection_event(seed):
    # holding Z fixed, the winner stays the winner exactly while its estimate is inside [L, U]
    rng = np.random.default_rng(seed)
    k = 4
    a = rng.normal(size=(k, k))
    cov = a @ a.T + 0.2 * np.eye(k)  # arbitrary correlations, some c_j > 1
    x = rng.multivariate_normal(np.zeros(k), cov)
    res = conditional_winner(x, cov)
    lo, hi = res.truncation
    assert lo <= res.observed <= hi
    for xk in np.linspace(res.observed - 20, res.observed + 20, 801):
        inside = lo < xk < hi
        if min(abs(xk - lo), abs(xk - hi)) > 1e-9:
            assert _still_winner(x, cov, res.winner, xk) == inside


def test_independent_candidates_truncate_at_the_runner_up():
    x = [0.3, 1.2, -0.5, 0.9]
    res = conditional_winner(x, np.eye(4) * 0.25)
    assert res.winner == 1 and res.truncation == (0.9, math.inf)
    lo, hi = res.ci
    assert lo < res.median_unbiased < res.observed < hi


def test_truncated_normal_cdf():
    cases = ((0.5, 0.0, 1.0, 0.2, 3.0), (1.0, 2.0, 0.5, 0.9, math.inf), (0.0, -1.0, 2.0, -math.inf, 1.0))
    for x, mu, sd, lo, hi in cases:
        cdf = stats.norm(mu, sd).cdf
        ref = (cdf(x) - cdf(lo)) / (cdf(hi) - cdf(lo))
        assert math.isclose(truncnorm_cdf(x, mu, sd, lo, hi), ref, rel_tol=1e-9)
    # far in the tails, where the plain formula cancels to 0/0, against scipy's truncnorm
    for x, mu, sd, lo, hi in ((41.0, 0.0, 1.0, 40.0, math.inf), (41.0, 0.0, 1.0, 40.0, 43.0),
                              (-41.0, 0.0, 1.0, -43.0, -40.0), (-41.0, 0.0, 1.0, -math.inf, -40.0),
                              (0.05, 3.0, 0.1, 0.0, 0.1), (1.0, -30.0, 1.0, 0.9, 5.0)):
        ref = stats.truncnorm.cdf(x, (lo - mu) / sd, (hi - mu) / sd, loc=mu, scale=sd)
        assert math.isclose(truncnorm_cdf(x, mu, sd, lo, hi), ref, rel_tol=1e-7, abs_tol=1e-12), (x, mu, lo, hi)


def test_no_selection_means_no_correction():
    res = conditional_winner([0.7], [[0.04]], alpha=0.05)
    assert res.truncation == (-math.inf, math.inf)
    assert math.isclose(res.median_unbiased, 0.7, abs_tol=1e-9)
    assert np.allclose(res.ci, (0.7 - 0.2 * stats.norm.ppf(0.95), 0.7 + 0.2 * stats.norm.ppf(0.95)))


def test_expected_max_bias():
    assert math.isclose(expected_max_bias(1), 0.0, abs_tol=1e-9)
    assert math.isclose(expected_max_bias(2), 1 / math.sqrt(math.pi), rel_tol=1e-6)
    rng = np.random.default_rng(0)
    assert abs(expected_max_bias(8) - rng.normal(size=(200000, 8)).max(axis=1).mean()) < 0.01


def test_known_variance_equal_candidates_median_unbiased_and_covered():
    # the AKM guarantees under their model (normal estimates, known covariance): seeded, binomial tolerances
    rng = np.random.default_rng(20261201)
    k, sd_c, sd_r, runs = 6, 0.02, 0.015, 1000
    cov = np.full((k, k), sd_r ** 2) + np.eye(k) * sd_c ** 2
    above = covered = naive_covered = 0
    naive = []
    for _ in range(runs):
        x = sd_c * rng.normal(size=k) + sd_r * rng.normal()  # true effects all 0
        res = conditional_winner(x, cov, alpha=0.05)
        above += res.median_unbiased > 0
        covered += res.ci[0] <= 0 <= res.ci[1]
        naive.append(res.observed)
        naive_covered += abs(res.observed) <= stats.norm.ppf(0.95) * math.sqrt(cov[0, 0])
    half = stats.binomtest(above, runs).proportion_ci(0.999)
    assert half.low <= 0.5 <= half.high, above
    ci = stats.binomtest(covered, runs).proportion_ci(0.999)
    assert ci.low <= 0.90 <= ci.high, covered
    # the naive estimate is biased by E[max] of the candidates' own noise, and its interval under-covers
    mc_se = np.std(naive, ddof=1) / math.sqrt(runs)
    assert abs(np.mean(naive) - expected_max_bias(k) * sd_c) < 4 * mc_se
    assert stats.binomtest(naive_covered, runs).proportion_ci(0.999).high < 0.90


def test_hybrid_is_bounded_by_the_projection_interval_and_keeps_its_coverage():
    rng = np.random.default_rng(20261202)
    k, sd_c, sd_r, runs = 6, 0.02, 0.015, 1000
    cov = np.full((k, k), sd_r ** 2) + np.eye(k) * sd_c ** 2
    c = projection_quantile(cov, 0.99)
    above = covered = 0
    for _ in range(runs):
        x = sd_c * rng.normal(size=k) + sd_r * rng.normal()
        res = hybrid_winner(x, cov, alpha=0.05)  # beta = 0.01
        half = res.projection * res.sd
        assert res.projection == c
        lo, hi = res.observed - half - 1e-12, res.observed + half + 1e-12
        assert lo <= res.ci[0] <= res.median_unbiased <= res.ci[1] <= hi
        above += res.median_unbiased > 0
        covered += res.ci[0] <= 0 <= res.ci[1]
    cov_ci = stats.binomtest(covered, runs).proportion_ci(0.999)
    assert cov_ci.high >= 0.90, covered  # at least 1 - 2 alpha (AKM), up to Monte Carlo error
    half = stats.binomtest(above, runs).proportion_ci(0.999)
    assert half.low <= 0.5 + 0.01 and half.high >= 0.5 - 0.01, above  # median-unbiased up to beta


def test_projection_quantile_of_independent_candidates():
    # max of k independent |N(0,1)|: P(max <= c) = (2 Phi(c) - 1)^k
    c = projection_quantile(np.eye(3), 0.95, draws=200000)
    assert abs((2 * stats.norm.cdf(c) - 1) ** 3 - 0.95) < 0.003


def test_a_clear_winner_needs_no_correction():
    x, cov = [1.0, 0.0, 0.1], np.eye(3) * 0.01  # 10 sds ahead of the runner-up
    for res in (conditional_winner(x, cov), hybrid_winner(x, cov)):
        assert math.isclose(res.median_unbiased, 1.0, abs_tol=1e-6)
    assert np.allclose(conditional_winner(x, cov).ci, (1 - 0.1 * stats.norm.ppf(0.95), 1 + 0.1 * stats.norm.ppf(0.95)))


def test_pooled_variance_uses_every_group():
    ref = [1.0, 1.02, 0.98]
    cands = {"a": [1.0, 1.001, 0.999], "b": [0.99, 1.03, 0.97]}
    sep = winner_estimate(cands, ref, variance="separate", method="conditional")
    pool = winner_estimate(cands, ref, variance="pooled", method="conditional")
    assert sep.winner == pool.winner and sep.naive == pool.naive
    assert sep.corrected_ci != pool.corrected_ci and pool.variance == "pooled"


def test_winner_estimate_from_launch_values():
    rng = np.random.default_rng(5)
    ref = list(np.exp(rng.normal(0, 0.01, 4)))
    cands = {f"k{i}": list(np.exp(rng.normal(0.001 * i, 0.01, 3))) for i in range(6)}
    w = winner_estimate(cands, ref, "max")
    means = {n: np.mean(np.log(v)) for n, v in cands.items()}
    assert w.winner == max(means, key=means.get)
    assert math.isclose(w.naive, math.exp(means[w.winner] - np.mean(np.log(ref))))
    assert w.corrected < w.naive and w.corrected_ci[0] < w.corrected < w.corrected_ci[1]
    welch = stats.ttest_ind(np.log(cands[w.winner]), np.log(ref), equal_var=False)
    lo, hi = welch.confidence_interval(0.90)
    assert np.allclose(w.naive_ci, (math.exp(lo), math.exp(hi)))
    # latency: the winner is the smallest, and the correction moves the estimate up (towards no effect)
    lat = winner_estimate(cands, ref, "min")
    assert lat.winner == min(means, key=means.get)
    assert lat.corrected > lat.naive and lat.corrected_ci[0] < lat.corrected < lat.corrected_ci[1]


def test_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        winner_estimate({"a": [1.0]}, [1.0, 1.1])
    with pytest.raises(ValueError, match="direction"):
        winner_estimate({"a": [1.0, 1.1]}, [1.0, 1.1], "up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no candidates"):
        winner_estimate({}, [1.0, 1.1])
    with pytest.raises(ValueError, match="method"):
        winner_estimate({"a": [1.0, 1.1]}, [1.0, 1.1], method="bootstrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="square"):
        conditional_winner([1.0, 2.0], [[1.0]])
