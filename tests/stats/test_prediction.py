"""The next machine's prediction interval: the normal-sample formula against scipy, its coverage of a new
unit, and its words when it cannot be estimated usefully."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from framework.stats.prediction import new_unit, units_for_useful, width_factor


def test_the_interval_is_mean_plus_minus_t_s_sqrt_one_plus_one_over_m():
    d = [0.10, 0.14, 0.07, 0.12, 0.09]
    pi = new_unit(d, 0.05)
    x = np.asarray(d)
    half = stats.t.ppf(0.95, 4) * x.std(ddof=1) * math.sqrt(1 + 1 / 5)
    assert (pi.low, pi.high) == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-12)
    assert pi.df == 4 and pi.level == pytest.approx(0.9) and not pi.useful and "a useful one needs 8" in pi.note


def test_a_useful_interval_needs_eight_machines_at_alpha_five_percent():
    assert units_for_useful(0.05) == 8
    assert width_factor(8, 0.05) <= 1.25 * stats.norm.ppf(0.95) < width_factor(7, 0.05)
    assert width_factor(2, 0.05) == pytest.approx(stats.t.ppf(0.95, 1) * math.sqrt(1.5))


def test_two_machines_say_one_degree_of_freedom_and_how_many_are_needed():
    pi = new_unit([2.1959, 2.2026], 0.05)
    assert pi.low is not None and pi.df == 1 and not pi.useful
    assert "1 degree of freedom" in pi.note and "a useful one needs 8 machines" in pi.note
    same = new_unit([0.1, 0.1], 0.05)
    assert same.low is None and "agree exactly" in same.note
    one = new_unit([0.1], 0.05)
    assert one.low is None and "cannot be estimated from 1 machine" in one.note


def test_it_covers_a_new_machine_at_its_level():
    rng = np.random.default_rng(3)
    hits, sims = 0, 4000
    for _ in range(sims):
        d = rng.normal(0.2, 0.1, 4)
        pi = new_unit(d, 0.05)
        new = rng.normal(0.2, 0.1)
        hits += pi.low <= new <= pi.high
    se = math.sqrt(0.9 * 0.1 / sims)
    assert abs(hits / sims - 0.9) < 4 * se
