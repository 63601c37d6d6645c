"""Effect estimators against reference implementations (scipy, statsmodels) and direct formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from framework.stats import effects


@pytest.fixture
def xy():
    rng = np.random.default_rng(7)
    return rng.normal(4.5, 0.02, 6), rng.normal(4.4, 0.05, 5)


def test_welch_interval_matches_scipy(xy):
    x, y = xy
    eff = effects.welch(x, y)
    res = stats.ttest_ind(x, y, equal_var=False)
    for a in (0.05, 0.025, 0.001):
        ci = res.confidence_interval(1 - 2 * a)
        assert eff.bounds(a) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert eff.p_above(0.0) == pytest.approx(stats.ttest_ind(x, y, equal_var=False, alternative="greater").pvalue)
    assert eff.p_below(0.0) == pytest.approx(stats.ttest_ind(x, y, equal_var=False, alternative="less").pvalue)
    assert eff.df == pytest.approx(res.df)


def test_welch_zero_spread_is_degenerate_not_an_error():
    eff = effects.welch([1.0, 1.0], [0.5, 0.5])
    assert eff.bounds(0.05) == (0.5, 0.5)
    assert eff.p_above(0.4) == 0.0 and eff.p_above(0.6) == 1.0


@pytest.mark.parametrize("m,n", [(2, 2), (3, 5), (5, 5), (4, 7), (8, 6)])
def test_mann_whitney_pmf_matches_scipy_exact(m, n):
    rng = np.random.default_rng(m * 10 + n)
    x, y = rng.normal(size=m), rng.normal(size=n)
    eff = effects.hodges_lehmann(x, y)
    assert effects.mann_whitney_pmf(m, n).sum() == pytest.approx(1.0)
    for theta in (-0.5, 0.0, 0.3):
        ref = stats.mannwhitneyu(x - theta, y, alternative="greater", method="exact").pvalue
        assert eff.p_above(theta) == pytest.approx(ref, abs=1e-12)
        ref = stats.mannwhitneyu(x - theta, y, alternative="less", method="exact").pvalue
        assert eff.p_below(theta) == pytest.approx(ref, abs=1e-12)


def test_hodges_lehmann_estimate_and_bounds_invert_the_test():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.1, 1, 7), rng.normal(0, 1, 6)
    eff = effects.hodges_lehmann(x, y)
    assert eff.estimate == pytest.approx(np.median(np.subtract.outer(x, y)))
    lo, hi = eff.bounds(0.05)
    assert lo < eff.estimate < hi
    # just beyond a bound the one-sided test rejects at 0.05, just inside it does not
    assert eff.p_above(lo - 1e-9) <= 0.05 < eff.p_above(lo + 1e-9)
    assert eff.p_below(hi + 1e-9) <= 0.05 < eff.p_below(hi - 1e-9)


def test_hodges_lehmann_too_few_for_the_level_is_unbounded():
    eff = effects.hodges_lehmann([1.0, 2.0], [0.0, 0.5])  # P(U = 0) = 1/6 > 0.05
    assert eff.bounds(0.05) == (-math.inf, math.inf)


def test_bootstrap_is_deterministic_and_sensible():
    rng = np.random.default_rng(11)
    x, y = rng.normal(0.2, 0.05, 8), rng.normal(0.0, 0.05, 8)
    a = effects.bootstrap_t([x, y], [1, -1], seed=[5, 9], resamples=2000)
    b = effects.bootstrap_t([x, y], [1, -1], seed=[5, 9], resamples=2000)
    c = effects.bootstrap_t([x, y], [1, -1], seed=[5, 10], resamples=2000)
    assert a.bounds(0.05) == b.bounds(0.05) and a.bounds(0.05) != c.bounds(0.05)
    lo, hi = a.bounds(0.05)
    w = effects.welch(x, y).bounds(0.05)
    assert lo < a.estimate < hi
    assert a.estimate == pytest.approx(x.mean() - y.mean())
    assert (hi - lo) == pytest.approx(w[1] - w[0], rel=0.5)  # same scale as the t interval


def _cells(seed=0, ns=(5, 6, 4, 5), sds=(0.03, 0.03, 0.005, 0.006)):
    rng = np.random.default_rng(seed)
    keys = [("on", "eagle3"), ("off", "eagle3"), ("on", "baseline"), ("off", "baseline")]
    mus = [np.log(96.1), np.log(54.1), np.log(92.7), np.log(92.6)]
    return {k: rng.normal(mu, sd, n) for k, mu, sd, n in zip(keys, mus, sds, ns, strict=True)}


def test_interaction_ols_estimate_is_the_ratio_of_ratios():
    cells = _cells()
    eff = effects.interaction_ols(cells, "fusion", "off", "on", "decoding", "baseline", "eagle3")
    m = {k: v.mean() for k, v in cells.items()}
    direct = (m[("on", "eagle3")] - m[("off", "eagle3")]) - (m[("on", "baseline")] - m[("off", "baseline")])
    assert eff.estimate == pytest.approx(direct, abs=1e-12)
    assert math.exp(eff.estimate) == pytest.approx((96.1 / 54.1) / (92.7 / 92.6), rel=0.05)
    # the interval's se is the Welch contrast variance, which equals OLS with HC2 in the saturated model
    se = math.sqrt(sum(v.var(ddof=1) / len(v) for v in cells.values()))
    assert eff.se == pytest.approx(se)
    import pandas as pd
    import statsmodels.formula.api as smf

    frame = pd.DataFrame([{"a": a, "b": b, "y": math.exp(v)} for (a, b), vs in cells.items() for v in vs])
    fit = smf.ols("np.log(y) ~ C(a, Treatment('off')) * C(b, Treatment('baseline'))", frame).fit(cov_type="HC2")
    term = "C(a, Treatment('off'))[T.on]:C(b, Treatment('baseline'))[T.eagle3]"
    assert fit.params[term] == pytest.approx(eff.estimate)
    assert fit.bse[term] == pytest.approx(eff.se)
    # and the pooled-variance OLS se is kept for reference
    assert eff.extra["ols_se"] == pytest.approx(smf.ols(
        "np.log(y) ~ C(a, Treatment('off')) * C(b, Treatment('baseline'))", frame).fit().bse[term])
    assert sm is not None
