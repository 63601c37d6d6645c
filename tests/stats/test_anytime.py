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
    assert all(b <= a + 1e-15 for a, b in zip(widths, widths[1:], strict=False))


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


# --------------------------------------------------------------------------- launch outcomes: beta-binomial


def _truncated_mixture_by_quad(k: int, n: int, rate: float, side: str) -> float:
    def lr(p: float) -> float:
        return (p / rate) ** k * ((1 - p) / (1 - rate)) ** (n - k)

    lo, hi = (rate, 1.0) if side == "above" else (0.0, rate)
    mass = stats.beta.cdf(hi, 1, 1) - stats.beta.cdf(lo, 1, 1)
    return integrate.quad(lambda p: lr(p) * stats.beta.pdf(p, 1, 1), lo, hi, epsabs=0, epsrel=1e-11)[0] / mass


@pytest.mark.parametrize("k,n,rate", [(0, 1, 0.5), (3, 3, 0.5), (5, 9, 0.3), (12, 20, 0.9), (1, 40, 0.1),
                                      (38, 40, 0.8)])
def test_rate_e_value_is_the_truncated_beta_mixture_of_likelihood_ratios(k, n, rate):
    for side in ("above", "below"):
        assert math.exp(at.log_e_rate(k, n, rate, side)) == pytest.approx(
            _truncated_mixture_by_quad(k, n, rate, side), rel=1e-8)


@pytest.mark.parametrize("k,n,rate", [(2, 7, 0.5), (10, 10, 0.7), (0, 25, 0.2)])
def test_the_two_truncated_mixtures_make_robbins_full_mixture_which_is_scipys_betabinom(k, n, rate):
    """Pi(above) E+ + Pi(below) E- is the untruncated Beta(1, 1) mixture: betabinom.pmf / C(n, k) / L(rate)."""
    full = math.exp(stats.betabinom.logpmf(k, n, 1, 1) - math.log(math.comb(n, k))
                    - k * math.log(rate) - (n - k) * math.log1p(-rate))
    above, below = at.log_e_rate(k, n, rate, "above"), at.log_e_rate(k, n, rate, "below")
    mixed = (1 - rate) * math.exp(above) + rate * math.exp(below)
    assert mixed == pytest.approx(full, rel=1e-10)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_rate_e_process_is_a_test_supermartingale_under_its_null_by_exact_summation(rate):
    """E[E_n] = 1 at q = rate and <= 1 for q on the null side, by summation over the binomial; and each step
    E[E_{n+1} | k of n] <= E_n (= at q = rate), so it is a supermartingale, not only a per-n e-value."""
    def e(k: int, n: int, side: str = "above") -> float:
        return math.exp(at.log_e_rate(k, n, rate, side))

    for n in (1, 5, 20, 40):
        ks = np.arange(n + 1)
        at_null = sum(stats.binom.pmf(ks, n, rate) * [e(k, n) for k in ks])
        assert at_null == pytest.approx(1.0, abs=1e-9)
        assert sum(stats.binom.pmf(ks, n, rate * 0.8) * [e(k, n) for k in ks]) < 1.0
        below = sum(stats.binom.pmf(ks, n, rate) * [e(k, n, "below") for k in ks])
        assert below == pytest.approx(1.0, abs=1e-9)
    for n in (1, 7, 30):
        for k in range(n + 1):
            for q, eq in ((rate, True), (rate * 0.7, False)):
                step = q * e(k + 1, n + 1) + (1 - q) * e(k, n + 1)
                assert step == pytest.approx(e(k, n), rel=1e-9) if eq else step <= e(k, n) * (1 + 1e-12)


@pytest.mark.parametrize("rate", [0.2, 0.5, 0.8])
def test_rate_e_process_crosses_one_over_a_with_probability_at_most_a_over_40_looks(rate):
    """Ville's inequality, checked exactly: P(sup_{n <= 40} E_n >= 1/a) at q = rate by dynamic programming."""
    a, horizon = 0.05, 40
    alive = np.array([1.0])  # P(k successes so far and not yet crossed), k = 0..n
    crossed = 0.0
    for n in range(1, horizon + 1):
        nxt = np.zeros(n + 1)
        nxt[1:] += alive * rate
        nxt[:-1] += alive * (1 - rate)
        hit = np.array([at.log_e_rate(k, n, rate, "above") >= math.log(1 / a) for k in range(n + 1)])
        crossed += nxt[hit].sum()
        alive = np.where(hit, 0.0, nxt)
    assert 0.0 < crossed <= a


def test_rate_bounds_agree_with_the_anytime_p_values_and_only_narrow():
    seq = at.RateSequence([(4, 5), (9, 10), (17, 20), (33, 40)])
    lo, hi = seq.bounds(0.05)
    assert 0 < lo < 33 / 40 < hi < 1
    for r in np.linspace(0.02, 0.98, 49):
        if abs(r - lo) > 1e-6:
            assert (r < lo) == (seq.p_above(r) <= 0.05)
        if abs(r - hi) > 1e-6:
            assert (r > hi) == (seq.p_below(r) <= 0.05)
    looks = [(4, 5), (9, 10), (17, 20), (33, 40)]
    widths = [np.subtract(*at.RateSequence(looks[:i]).bounds(0.05)[::-1]) for i in range(1, 5)]
    assert all(b <= w + 1e-15 for w, b in zip(widths, widths[1:], strict=False))
    assert at.RateSequence([(0, 3)]).bounds(0.05)[0] == 0.0 and at.RateSequence([(3, 3)]).bounds(0.05)[1] == 1.0


def test_launches_to_support_is_the_first_all_matching_count_that_reaches_one_over_a():
    assert at.launches_to_support(0.5, 0.05) == 7  # E_n(n of n) = (2^(n+1) - 1) / (n + 1): 18.1 at 6, 31.9 at 7
    assert math.exp(at.log_e_rate(7, 7, 0.5, "above")) == pytest.approx(255 / 8)
    with pytest.raises(ValueError):
        at.log_e_rate(1, 2, 1.0, "above")
