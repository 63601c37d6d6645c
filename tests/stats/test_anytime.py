"""The anytime-valid t e-process: cross-checked against direct integration (scipy) and its own guarantees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from framework.stats import anytime as at


def _half_normal_mixture_by_quad(t: float, n: int, r: float = 1.0) -> float:
    nu = n - 1
    f = lambda d: math.exp(stats.nct.logpdf(t, nu, d * math.sqrt(n)) - stats.t.logpdf(t, nu)) \
        * 2 * stats.norm.pdf(d / r) / r  # noqa: E731
    return integrate.quad(f, 0, 12 * r, limit=200)[0]


@pytest.mark.parametrize("t,n", [(-1.0, 3), (0.5, 4), (2.0, 5), (4.0, 8), (6.0, 12)])
def test_e_value_is_the_half_normal_mixture_of_noncentral_t_likelihood_ratios(t, n):
    assert math.exp(at.log_e_value(t, n)) == pytest.approx(_half_normal_mixture_by_quad(t, n), rel=2e-3)


def test_the_t_reduction_is_the_likelihood_ratio_of_the_scale_invariant_data():
    """Wijsman: LR of x / |x| under mean delta*sigma vs 0 = exp(-n d^2/2) H(d s) / H(0), s = sum x / |x|."""
    x = np.array([0.3, -0.1, 0.8, 0.5, 0.2])
    n, d = len(x), 0.7
    s = x.sum() / np.linalg.norm(x)
    h = lambda z: integrate.quad(lambda u: u ** (n - 1) * math.exp(-u * u / 2 + z * u), 0, 60)[0]  # noqa: E731
    direct = math.exp(-n * d * d / 2) * h(d * s) / h(0.0)
    t = math.sqrt(n) * x.mean() / x.std(ddof=1)
    via_t = math.exp(stats.nct.logpdf(t, n - 1, d * math.sqrt(n)) - stats.t.logpdf(t, n - 1))
    assert via_t == pytest.approx(direct, rel=1e-6)


@pytest.mark.parametrize("n", [4, 6, 10])
def test_e_value_has_mean_one_under_the_null(n):
    mean = integrate.quad(lambda t: math.exp(at.log_e_value(t, n)) * stats.t.pdf(t, n - 1), -60, 60, limit=400)[0]
    assert mean == pytest.approx(1.0, abs=2e-3)


def test_critical_values_exceed_the_fixed_t_and_need_enough_blocks():
    assert math.isinf(at.critical_t(2, 0.05)) and math.isinf(at.critical_t(3, 0.05))  # E_n is bounded at tiny n
    prev = math.inf
    for n in range(4, 30):
        c = at.critical_t(n, 0.05)
        assert c > stats.t.ppf(0.95, n - 1) and c < prev
        prev = c


def test_bounds_and_p_values_agree_and_the_sequence_only_narrows():
    rng = np.random.default_rng(3)
    c = list(0.05 + 0.02 * rng.standard_normal(12))
    eff = at.AnytimeEffect(c)
    lo, hi = eff.bounds(0.05)
    for theta in np.linspace(lo - 0.02, hi + 0.02, 41):
        if abs(theta - lo) > 1e-6:
            assert (theta < lo) == (eff.p_above(theta) <= 0.05)
        if abs(theta - hi) > 1e-6:
            assert (theta > hi) == (eff.p_below(theta) <= 0.05)
    widths = [np.subtract(*at.AnytimeEffect(c[:n]).bounds(0.05)[::-1]) for n in range(5, 13)]
    assert all(b <= a + 1e-15 for a, b in zip(widths, widths[1:]))


def test_no_spread_gives_no_evidence():
    eff = at.AnytimeEffect([0.1, 0.1, 0.1, 0.1, 0.1])
    assert eff.p_above(0.0) == 1.0 and eff.bounds(0.05) == (-math.inf, math.inf)


@pytest.mark.parametrize("t,n", [(1.5, 3), (3.0, 5), (-2.0, 8), (4.0, 12)])
def test_symmetric_mixture_matches_the_closed_form_fixed_g_bayes_factor(t, n):
    """(E(t) + E(-t)) / 2 mixes over a N(0, r^2) prior: Rouder et al. (2009)'s Bayes factor with g = r^2."""
    nu, g = n - 1, at.PRIOR_SCALE ** 2
    closed = (1 + n * g) ** -0.5 * ((1 + t * t / nu) / (1 + t * t / ((1 + n * g) * nu))) ** ((nu + 1) / 2)
    mixed = (math.exp(at.log_e_value(t, n)) + math.exp(at.log_e_value(-t, n))) / 2
    assert mixed == pytest.approx(closed, rel=1e-6)
