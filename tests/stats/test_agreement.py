"""Bounds on an agreement rate over blocked requests, cross-checked against statsmodels and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from framework.stats.agreement import agreement, clopper_pearson, cluster_variance, identical_needed


@pytest.mark.parametrize("x,n", [(0, 5), (3, 10), (29, 30), (30, 30), (59, 59), (140, 200)])
@pytest.mark.parametrize("a", [0.05, 0.025])
def test_clopper_pearson_is_statsmodels_beta_interval(x, n, a):
    lo, hi = proportion_confint(x, n, alpha=2 * a, method="beta")  # two-sided 1 - 2a: one-sided a at each end
    assert clopper_pearson(x, n, a) == pytest.approx((lo, hi), abs=1e-12)


def test_the_cluster_variance_is_statsmodels_cluster_robust_variance_of_a_mean():
    matched, compared = [10, 7, 9, 4], [10, 9, 12, 8]
    y = np.concatenate([[1] * x + [0] * (n - x) for x, n in zip(matched, compared, strict=True)])
    groups = np.repeat(np.arange(len(compared)), compared)
    fit = sm.OLS(y, np.ones(len(y))).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert cluster_variance(matched, compared) == pytest.approx(float(fit.bse[0]) ** 2, rel=1e-10)


def test_korn_graubard_effective_size_and_degrees_of_freedom():
    matched, compared, a = [10, 7, 9, 4], [10, 9, 12, 8], 0.05
    agr = agreement(matched, compared, a)
    n, p = 39, 30 / 39
    v = cluster_variance(matched, compared)
    n_star = min(n, p * (1 - p) / v) * (stats.t.ppf(1 - a, n - 1) / stats.t.ppf(1 - a, 3)) ** 2
    assert agr.n_effective == pytest.approx(n_star, rel=1e-12)
    assert agr.lower == pytest.approx(stats.beta.ppf(a, p * n_star, n_star - p * n_star + 1), rel=1e-12)
    assert agr.upper == pytest.approx(stats.beta.ppf(1 - a, p * n_star + 1, n_star - p * n_star), rel=1e-12)
    # blocking widens the interval against requests taken as independent (the design effect here is > 1)
    lo, hi = clopper_pearson(30, 39, a)
    assert agr.lower < lo and agr.upper > hi


def test_one_block_takes_the_requests_as_independent():
    agr = agreement([30], [30], 0.05)
    assert agr.variance is None and agr.n_effective == 30 and agr.lower == pytest.approx(0.05 ** (1 / 30))


def test_every_request_identical_is_bounded_by_the_requests_shrunk_for_few_blocks():
    agr = agreement([20, 20, 20], [20, 20, 20], 0.05)
    assert agr.estimate == 1.0 and agr.upper == 1.0
    shrink = (stats.t.ppf(0.95, 59) / stats.t.ppf(0.95, 2)) ** 2
    assert agr.n_effective == pytest.approx(60 * shrink) and agr.lower == pytest.approx(0.05 ** (1 / (60 * shrink)))


def test_any_difference_puts_the_upper_bound_below_one():
    assert agreement([20, 19, 20], [20, 20, 20], 0.05).upper < 1.0


def test_nothing_compared():
    agr = agreement([0, 0], [0, 0], 0.05)
    assert agr.compared == 0 and math.isnan(agr.estimate) and (agr.lower, agr.upper) == (0.0, 1.0)


def test_identical_needed_is_the_exact_rule_of_three():
    assert identical_needed(0.95, 0.05) == 59
    assert clopper_pearson(59, 59, 0.05)[0] >= 0.95 > clopper_pearson(58, 58, 0.05)[0]
    assert identical_needed(0.99, 0.05) == 299  # ~ 3 / (1 - 0.99)
    with pytest.raises(ValueError):
        identical_needed(1.0, 0.05)
