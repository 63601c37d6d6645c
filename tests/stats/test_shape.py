"""What n launches cannot see, and the Brown-Forsythe check, against scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from framework.stats.shape import brown_forsythe, unseen_rate


@pytest.mark.parametrize("n", [1, 5, 10, 20, 100])
def test_unseen_rate_is_the_clopper_pearson_bound_for_zero_events(n):
    r = unseen_rate(n)
    assert (1 - r) ** n == pytest.approx(0.05, rel=1e-12)
    # scipy's exact binomial interval for 0 of n: the one-sided 95% upper bound is the two-sided 90% one
    ci = stats.binomtest(0, n).proportion_ci(confidence_level=0.90, method="exact")
    assert r == pytest.approx(ci.high, rel=1e-9)


def test_rule_of_three_figures_in_the_docs():
    assert [round(unseen_rate(n), 2) for n in (5, 10, 20)] == [0.45, 0.26, 0.14]


def test_brown_forsythe_is_scipys_median_centred_levene_and_sees_a_tenfold_spread():
    a = [0.0, 0.004, -0.003, 0.002, -0.005, 0.001]
    b = [0.03, -0.04, 0.05, -0.02, 0.045, -0.035]
    assert brown_forsythe([a, b]) == pytest.approx(stats.levene(a, b, center="median").pvalue, rel=1e-12)
    assert brown_forsythe([a, b]) < 0.05
    assert brown_forsythe([a, a[:2]]) is None  # fewer than 3 values: degenerate
    assert brown_forsythe([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]) is None  # no spread: undefined


def test_brown_forsythe_level_on_normal_data():
    rng = np.random.default_rng(3)
    ps = [brown_forsythe([rng.normal(size=10), rng.normal(size=10)]) for _ in range(400)]
    assert np.mean(np.array(ps) < 0.05) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)
