"""KN's fully sequential selection (framework.stats.ranking): eta against the integral it solves, the procedure's
mechanics, and its probability of correct selection on normal data in the least favourable configuration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from framework.stats import ranking


def _eta_numeric(alpha: float, k: int, n0: int) -> float:
    """eta solving (k - 1) / 2 * E[exp(-eta chi2_{n0-1})] = alpha, the expectation integrated numerically."""
    f = n0 - 1

    def bound(eta: float) -> float:
        val, _ = integrate.quad(lambda x: math.exp(-eta * x) * stats.chi2.pdf(x, f), 0, math.inf, limit=200)
        return (k - 1) / 2 * val - alpha

    return optimize.brentq(bound, 1e-9, 1e6, xtol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("alpha,k,n0", [(0.05, 2, 5), (0.05, 3, 4), (0.1, 4, 6), (0.01, 10, 10), (0.05, 5, 20)])
def test_eta_matches_the_integral_it_solves(alpha, k, n0):
    assert ranking.kn_eta(alpha, k, n0) == pytest.approx(_eta_numeric(alpha, k, n0), rel=1e-6)


def test_eta_refuses_what_the_procedure_cannot_do():
    for bad in ((0.0, 3, 4), (0.05, 1, 4), (0.05, 3, 1)):
        with pytest.raises(ValueError):
            ranking.kn_eta(*bad)


def test_a_clear_best_is_selected_and_the_others_eliminated_early():
    rng = np.random.default_rng(1)
    vals = {"a": np.exp(rng.normal(0.10, 0.01, 40)), "b": np.exp(rng.normal(0.0, 0.01, 40)),
            "c": np.exp(rng.normal(-0.05, 0.01, 40))}
    st = ranking.kn_select(vals, alpha=0.05, delta=math.log(1.01), n0=4)
    assert st.done and st.best == "a"
    assert set(st.eliminated) == {"b", "c"} and st.stage < 10


def test_direction_min_selects_the_smallest():
    rng = np.random.default_rng(2)
    vals = {"a": np.exp(rng.normal(0.10, 0.01, 40)), "b": np.exp(rng.normal(0.0, 0.01, 40))}
    assert ranking.kn_select(vals, 0.05, math.log(1.01), 4, direction="min").best == "b"


def test_first_stage_and_next_round_needs():
    st = ranking.kn_select({"a": [1.0, 1.1], "b": [1.0, 1.02, 0.99, 1.01]}, 0.05, 0.01, n0=4)
    assert not st.done and st.stage == 0 and st.needs == ["a"]
    rng = np.random.default_rng(3)
    close = {"a": np.exp(rng.normal(0.0, 0.01, 5)), "b": np.exp(rng.normal(0.001, 0.01, 5))}
    st = ranking.kn_select(close, 0.05, math.log(1.01), n0=5)
    assert not st.done and st.stage == 5 and sorted(st.needs) == ["a", "b"]


def test_equal_finalists_end_at_the_last_stage_with_a_survivor_set():
    """Two equal finalists are never separated: KN runs to max N_il + 1 and says both are within delta."""
    rng = np.random.default_rng(4)
    vals = {"a": np.exp(rng.normal(0.0, 0.005, 400)), "b": np.exp(rng.normal(0.0, 0.005, 400))}
    st = ranking.kn_select(vals, 0.05, math.log(1.01), n0=5)
    assert st.done and st.stage <= st.max_stage
    capped = ranking.kn_select(vals, 0.05, math.log(1.001), n0=5, max_stage_cap=8)
    assert capped.done and capped.stage == 8 and "WITHOUT" in capped.why


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="> 0"):
        ranking.kn_select({"a": [1.0, 0.0], "b": [1.0, 1.0]}, 0.05, 0.01, 2)
    with pytest.raises(ValueError, match="2 finalists"):
        ranking.kn_select({"a": [1.0, 2.0]}, 0.05, 0.01, 2)


def test_pcs_at_least_one_minus_alpha_in_the_slippage_configuration():
    """The least favourable configuration: the best leads every other by exactly delta, unequal variances.
    PCS over 600 seeded replications must not be below 1 - alpha beyond binomial noise (99.9% lower bound)."""
    alpha, delta, n0, k = 0.05, 0.01, 5, 4
    sds = [0.012, 0.008, 0.01, 0.006]
    reps, correct = 600, 0
    for rep in range(reps):
        rng = np.random.default_rng([35, rep])
        mus = [delta, 0.0, 0.0, 0.0]
        vals = {f"s{i}": np.exp(rng.normal(mus[i], sds[i], 300)) for i in range(k)}
        st = ranking.kn_select(vals, alpha, delta, n0)
        assert st.done
        correct += st.best == "s0"
    # KN is conservative (PCS well above 1 - alpha here); the check is that 1 - alpha is not above the 99.9%
    # Clopper-Pearson upper bound of the observed PCS
    assert stats.binomtest(correct, reps).proportion_ci(0.999).high >= 1 - alpha, correct / reps
