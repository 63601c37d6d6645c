"""Variance components against a direct computation, known truth, and statsmodels MixedLM."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from framework.stats import variance


def _direct(groups):
    """Textbook one-way random-effects ANOVA, written out loop by loop."""
    k = len(groups)
    N = sum(len(g) for g in groups)
    grand = sum(sum(g) for g in groups) / N
    means = [sum(g) / len(g) for g in groups]
    ssb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True))
    ssw = sum((v - m) ** 2 for g, m in zip(groups, means, strict=True) for v in g)
    msb, msw = ssb / (k - 1), ssw / (N - k)
    n0 = (N - sum(len(g) ** 2 for g in groups) / N) / (k - 1)
    vb = max(0.0, (msb - msw) / n0)
    return vb, msw


def _simulate(rng, k, m, sb, sw):
    return [list(rng.normal(rng.normal(0, sb), sw, size=m)) for _ in range(k)]


def test_matches_direct_computation_unbalanced():
    rng = np.random.default_rng(1)
    groups = [list(rng.normal(rng.normal(0, 0.01), 0.02, size=int(n))) for n in rng.integers(1, 7, 12)]
    c = variance.components(groups)
    vb, vw = _direct(groups)
    assert c.var_between == pytest.approx(vb, rel=1e-9, abs=1e-15)
    assert c.var_within == pytest.approx(vw, rel=1e-9)
    assert c.icc == pytest.approx(vb / (vb + vw))
    assert c.design_effect == pytest.approx(1 + (c.mean_requests - 1) * c.icc)


def test_recovers_known_components():
    rng = np.random.default_rng(2)
    sb, sw = 0.006, 0.02
    c = variance.components(_simulate(rng, 2000, 3, sb, sw))
    assert c.sd_between == pytest.approx(sb, rel=0.1)
    assert c.sd_within == pytest.approx(sw, rel=0.03)
    true_icc = sb ** 2 / (sb ** 2 + sw ** 2)
    assert c.icc == pytest.approx(true_icc, abs=0.03)


def test_agrees_with_mixedlm_reml_on_balanced_data():
    import pandas as pd
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(3)
    groups = _simulate(rng, 30, 4, 0.02, 0.01)
    c = variance.components(groups)
    frame = pd.DataFrame([{"launch": i, "y": v} for i, g in enumerate(groups) for v in g])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("y ~ 1", frame, groups=frame["launch"]).fit(reml=True)
    # balanced data, positive estimate: ANOVA and REML estimates coincide
    assert c.var_between == pytest.approx(float(fit.cov_re.iloc[0, 0]), rel=1e-3)
    assert c.var_within == pytest.approx(float(fit.scale), rel=1e-3)


def test_pooled_ignores_differences_between_conditions():
    rng = np.random.default_rng(4)
    a = _simulate(rng, 200, 3, 0.01, 0.02)
    b = [[v + 5.0 for v in g] for g in _simulate(rng, 200, 3, 0.01, 0.02)]
    p = variance.pooled_components([a, b])
    assert p.sd_between == pytest.approx(0.01, rel=0.15)
    assert p.launches == 400 and p.requests == 1200


def test_truncation_and_edge_cases():
    c = variance.components([[1.0, 1.1], [1.05, 1.0], [1.0, 1.1]])  # within > between: s_b^2 = 0
    assert c.var_between == 0.0 and c.icc == 0.0 and c.design_effect == 1.0
    assert variance.components([]).var_within is None
    assert variance.components([[1.0, 2.0]]).var_between is None  # one launch: no between estimate


def test_optimal_requests():
    assert variance.optimal_requests(0.006 ** 2, 0.04 ** 2, 120.0, 3.0) == pytest.approx(
        math.sqrt(40 * (0.04 / 0.006) ** 2))
    assert variance.optimal_requests(0.0, 1.0, 1.0, 1.0) == math.inf
    assert variance.design_effect(3, 0.5) == 2.0
