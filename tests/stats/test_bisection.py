"""The bisection's error control: the alpha split, each look's call, and the step's interval against scipy and
statsmodels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

from framework.stats import bisection as bs
from framework.stats.anytime import AnytimeEffect


def test_split_alpha_bonferroni() -> None:
    ends, probe = bs.split_alpha(0.05, 6)
    assert ends == pytest.approx(0.025) and probe == pytest.approx(0.05 / 12)
    assert ends + 6 * probe == pytest.approx(0.05)


def test_bounds_are_the_anytime_confidence_sequence() -> None:
    c = list(np.random.default_rng(1).normal(0.01, 0.01, 12))
    assert bs.bounds(c, 0.05) == AnytimeEffect(c).bounds(0.025)
    assert bs.bounds(c[:1], 0.05) == (-math.inf, math.inf)


def test_ends_calls() -> None:
    rng = np.random.default_rng(2)
    far = list(rng.normal(math.log(1.10), 0.005, 8))
    assert bs.ends_look(far, 0.025, 0.03, 0.015).call == "differ"
    assert bs.ends_look([-x for x in far], 0.025, 0.03, 0.015).call == "differ"
    same = list(rng.normal(0.0, 0.003, 10))
    assert bs.ends_look(same, 0.025, 0.03, 0.015).call == "same"
    assert bs.ends_look(same[:2], 0.025, 0.03, 0.015).call is None  # two launches decide nothing here


def test_probe_calls_follow_the_bad_ends_side() -> None:
    rng = np.random.default_rng(3)
    up = list(rng.normal(0.05, 0.005, 8))
    assert bs.probe_look(up, 0.004, +1.0).call == "bad"
    assert bs.probe_look(up, 0.004, -1.0).call == "good"
    assert bs.probe_look(list(rng.normal(0.0, 0.01, 4)), 0.004, +1.0).call is None


def test_step_estimate_matches_welch_in_statsmodels() -> None:
    rng = np.random.default_rng(4)
    before, after = np.exp(rng.normal(4.5, 0.01, 9)), np.exp(rng.normal(4.47, 0.02, 7))
    ratio, lo, hi = bs.step_estimate(list(before), list(after), 0.05)
    cm = CompareMeans(DescrStatsW(np.log(after)), DescrStatsW(np.log(before)))
    slo, shi = cm.tconfint_diff(alpha=0.05, usevar="unequal")
    assert ratio == pytest.approx(math.exp(np.log(after).mean() - np.log(before).mean()))
    assert (lo, hi) == pytest.approx((math.exp(slo), math.exp(shi)), rel=1e-9)


def test_a_gap_lets_a_probe_be_called_before_its_interval_excludes_zero() -> None:
    rng = np.random.default_rng(7)
    like_bad = list(rng.normal(0.0148, 0.01, 8))  # a probe like the bad end: +Delta/2 for a 3% change
    plain = bs.probe_look(like_bad, 0.05 / 12, 1.0)
    gapped = bs.probe_look(like_bad, 0.05 / 12, 1.0, gap=0.0148)
    lo, hi = bs.bounds(like_bad, 0.05 / 12)
    assert plain.call is None and lo < 0 < hi  # the interval still holds 0
    assert gapped.call == "bad" and lo > -0.0148  # but it excludes every mean a good-like version can have
    # on the other side: the bad end lower (sign -1), the same contrasts mirrored
    assert bs.probe_look([-x for x in like_bad], 0.05 / 12, -1.0, gap=0.0148).call == "bad"
    assert bs.probe_look([-x for x in like_bad], 0.05 / 12, 1.0, gap=0.0148).call == "good"
    assert bs.probe_look(like_bad, 0.05 / 12, 1.0, gap=0.0).call == plain.call  # gap 0: the old rule


def test_a_probe_in_the_middle_of_the_ends_is_called_between() -> None:
    mid = list(np.random.default_rng(8).normal(0.0, 0.001, 30))  # neither +g nor -g: a drift, not a step
    assert bs.probe_look(mid, 0.05 / 12, 1.0, gap=0.02).call == "between"


def test_the_ends_gap_is_half_the_best_bound_of_their_confidence_sequence() -> None:
    c = list(np.random.default_rng(9).normal(math.log(1.05), 0.01, 15))
    looks = [3, 5, 7, 9, 11, 13, 15]
    want = max(bs.bounds(c[:n], 0.025)[0] for n in looks) / 2
    assert bs.ends_gap(c, 0.025, 1.0, looks) == pytest.approx(want)
    assert bs.ends_gap([-x for x in c], 0.025, -1.0, looks) == pytest.approx(want)
    assert bs.ends_gap(c[:2], 0.025, 1.0, [2]) == 0.0  # no bound above 0: no gap
