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
    assert all(x < y for x, y in zip(a, a[1:]))
    assert a[-1] < 0.05 and a[0] < 1e-6
    assert sequential.nominal_alpha(12, 10, 0.05) == a[-1]  # past the plan: the last boundary
    assert sequential.spend(1.0, 0.05) == pytest.approx(0.05)
