"""Alpha-spending boundaries: published values and the error they control."""

from __future__ import annotations

import math

import numpy as np
import pytest

from framework.stats import sequential


def test_obrien_fleming_type_matches_published_boundaries():
    # Lan-DeMets O'Brien-Fleming-type, one-sided 0.025, 5 equally spaced looks (gsDesign / ldbounds)
    assert sequential.boundaries(0.025, 5) == pytest.approx((4.877, 3.357, 2.680, 2.290, 2.031), abs=2e-3)


def test_pocock_type_matches_published_boundaries():
    assert sequential.boundaries(0.025, 5, "pocock") == pytest.approx((2.438, 2.427, 2.410, 2.397, 2.386), abs=2e-3)


def test_single_look_is_the_fixed_design():
    assert sequential.nominal_alpha(1, 1, 0.05) == pytest.approx(0.05)


@pytest.mark.parametrize("kind", ["obf", "pocock"])
def test_boundaries_control_the_error_over_all_looks(kind):
    k, alpha = 10, 0.05
    z = np.array(sequential.boundaries(alpha, k, kind))
    rng = np.random.default_rng(0)
    w = np.cumsum(rng.normal(0, math.sqrt(1 / k), (200_000, k)), axis=1)
    zstat = w / np.sqrt(np.arange(1, k + 1) / k)
    crossed = (zstat >= z).any(axis=1).mean()
    assert crossed == pytest.approx(alpha, abs=0.0025)


def test_nominal_levels_grow_and_stay_below_alpha():
    a = [sequential.nominal_alpha(k, 10, 0.05) for k in range(1, 11)]
    assert all(x < y for x, y in zip(a, a[1:], strict=False))
    assert a[-1] < 0.05 and a[0] < 1e-6
    assert sequential.nominal_alpha(12, 10, 0.05) == a[-1]  # past the plan: the last boundary
    assert sequential.spend(1.0, 0.05) == pytest.approx(0.05)


def _simulated_crossing(alpha: float, k: int, drift: float, kind: str = "obf", paths: int = 200_000) -> float:
    """Direct Monte Carlo of the one-sided group-sequential test: Brownian motion with drift at k looks."""
    z = np.array(sequential.boundaries(alpha, k, kind))
    t = np.arange(1, k + 1) / k
    rng = np.random.default_rng(1)
    s = np.cumsum(rng.normal(drift / k, math.sqrt(1 / k), (paths, k)), axis=1)
    return float((s / np.sqrt(t) >= z).any(axis=1).mean())


def test_crossing_probability_without_drift_is_alpha():
    assert sequential.crossing_probability(0.05, 5, 0.0) == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize("kind,drift", [("obf", 2.0), ("obf", 3.0), ("pocock", 2.5)])
def test_crossing_probability_matches_a_direct_simulation(kind, drift):
    assert sequential.crossing_probability(0.05, 5, drift, kind) == pytest.approx(
        _simulated_crossing(0.05, 5, drift, kind), abs=0.004)  # MC SE <= 0.0012


def test_inflation_factor_restores_the_fixed_designs_power():
    alpha, power, k = 0.05, 0.9, 5
    r = sequential.inflation_factor(alpha, k, power)
    d_fixed = float(sequential.stats.norm.isf(alpha) + sequential.stats.norm.ppf(power))
    assert _simulated_crossing(alpha, k, d_fixed) < power - 0.005  # looks cost power at the fixed n ...
    # ... R buys it back
    assert _simulated_crossing(alpha, k, d_fixed * math.sqrt(r)) == pytest.approx(power, abs=0.004)


def test_inflation_grows_with_looks_and_is_larger_for_pocock():
    obf = [sequential.inflation_factor(0.05, k) for k in (1, 2, 3, 5, 10)]
    assert obf[0] == 1.0 and all(a < b for a, b in zip(obf, obf[1:], strict=False))
    assert 1.0 < obf[-1] < 1.06  # O'Brien-Fleming type: a few percent
    assert sequential.inflation_factor(0.05, 5, kind="pocock") > 1.15


@pytest.mark.parametrize("fixed,block", [(1, 2), (5, 2), (9, 2), (10, 2), (9, 3), (20, 4)])
def test_sequential_cap_is_the_smallest_whole_block_count_with_the_fixed_power(fixed, block):
    cap = sequential.sequential_cap(fixed, block, 0.05)
    assert cap % block == 0 and cap >= fixed
    assert cap >= sequential.inflation_factor(0.05, cap // block) * fixed
    smaller = cap - block
    assert smaller < fixed or smaller < sequential.inflation_factor(0.05, smaller // block) * fixed
