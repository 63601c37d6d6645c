"""SLO capacity: known ladders, the isotonic estimate, and the step-down bound's coverage on a known curve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from framework.stats.capacity import LoadLevel, slo_capacity

LOADS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
SPREAD = (0.97, 1.0, 1.03, 0.99, 1.01)


def _curve(load: float) -> float:
    """A known monotone p99 TTFT curve (s): 0.1 s per req/s."""
    return 0.1 * load


def test_a_clear_ladder():
    levels = [LoadLevel(x, [_curve(x) * s for s in SPREAD]) for x in LOADS]
    cap = slo_capacity(levels, threshold=0.45)
    assert cap.estimate == 4.0 and cap.lower_bound == 4.0 and cap.coverage == 0.95
    assert [r.confirmed for r in cap.levels] == [True] * 4 + [False] * 3
    assert cap.interpolated is not None and 4.0 < cap.interpolated < 5.0
    # the fit crosses log(0.45) between the geometric means at 4 and 5
    g4, g5 = cap.levels[3].fitted, cap.levels[4].fitted
    assert math.isclose(cap.interpolated, 4 + (math.log(0.45) - math.log(g4)) / (math.log(g5) - math.log(g4)))


def test_the_bound_stops_at_the_first_level_not_confirmed():
    # level 2 is noisy and close to the SLO: the estimate goes past it, the step-down does not
    levels = [LoadLevel(1, [0.10, 0.11, 0.09]), LoadLevel(2, [0.30, 0.52, 0.40]), LoadLevel(3, [0.41, 0.42, 0.43]),
              LoadLevel(4, [0.9, 0.95, 1.0])]
    cap = slo_capacity(levels, threshold=0.5)
    assert cap.estimate == 3.0
    assert cap.lower_bound == 1.0
    assert [r.confirmed for r in cap.levels] == [True, False, False, False]
    assert cap.levels[2].p_value is not None and cap.levels[2].p_value < 0.05  # level 3 alone would pass


def test_non_monotone_means_are_pooled():
    # the mean at load 2 dips below load 1's: isotonic regression pools them (weights: launches)
    levels = [LoadLevel(1, [0.20, 0.21]), LoadLevel(2, [0.15, 0.16, 0.155, 0.152]), LoadLevel(3, [0.6, 0.62])]
    cap = slo_capacity(levels, threshold=0.5)
    m1, m2 = np.mean(np.log([0.20, 0.21])), np.mean(np.log([0.15, 0.16, 0.155, 0.152]))
    pooled = math.exp((2 * m1 + 4 * m2) / 6)
    assert math.isclose(cap.levels[0].fitted, pooled) and math.isclose(cap.levels[1].fitted, pooled)
    fitted = [r.fitted for r in cap.levels]
    assert fitted == sorted(fitted)


def test_level_test_is_the_one_sample_t_test_of_the_logs():
    rng = np.random.default_rng(3)
    for op, alt in (("<=", "less"), (">=", "greater")):
        vals = list(np.exp(rng.normal(math.log(0.4), 0.1, 6)))
        cap = slo_capacity([LoadLevel(1, vals)], threshold=0.45, op=op)
        ref = stats.ttest_1samp(np.log(vals), math.log(0.45), alternative=alt).pvalue
        assert math.isclose(cap.levels[0].p_value, ref, rel_tol=1e-9)


def test_a_throughput_floor_uses_the_lower_bound():
    # per-user decode tok/s falls with concurrency; SLO: >= 20 tok/s
    levels = [LoadLevel(c, [40.0 / c ** 0.5 * s for s in SPREAD]) for c in (1, 2, 4, 8)]
    cap = slo_capacity(levels, threshold=20.0, op=">=")
    assert cap.estimate == 2.0 and cap.lower_bound == 2.0  # 40/sqrt(4) = 20 exactly is not beyond chance
    assert all(r.bound is not None and r.bound < r.estimate for r in cap.levels)


def test_nothing_meets():
    cap = slo_capacity([LoadLevel(1, [1.0, 1.1]), LoadLevel(2, [2.0, 2.1])], threshold=0.5)
    assert cap.estimate is None and cap.lower_bound is None and cap.interpolated is None


def _coverage(first_fail_ratio: float, runs: int, seed: int, launches: int = 5, sd: float = 0.05) -> tuple[int, list]:
    """Seeded repetitions of a ladder from `_curve`, the SLO just below load 5's value times `first_fail_ratio`."""
    rng = np.random.default_rng(seed)
    threshold = _curve(5.0) / first_fail_ratio  # load 5 fails by the ratio; loads 1-4 meet; true capacity 4
    covered, bounds = 0, []
    for _ in range(runs):
        levels = [LoadLevel(x, list(_curve(x) * np.exp(rng.normal(0, sd, launches)))) for x in LOADS]
        cap = slo_capacity(levels, threshold=threshold)
        lb = cap.lower_bound or 0.0
        covered += lb <= 4.0
        bounds.append(lb)
    return covered, bounds


def test_coverage_is_the_stated_one_when_the_first_failing_level_sits_on_the_threshold():
    # load 5 fails by one part in a million: its H0 is true at its boundary, so P(bound > 4) = alpha exactly
    runs = 2000
    covered, _ = _coverage(1.000001, runs, seed=20261201)
    ci = stats.binomtest(covered, runs).proportion_ci(0.999)
    assert ci.low <= 0.95 <= ci.high, (covered, runs)


def test_coverage_is_at_least_the_stated_one_when_the_curve_is_clear_of_the_threshold():
    runs = 1000
    covered, bounds = _coverage(1.05, runs, seed=7)
    assert stats.binomtest(covered, runs).proportion_ci(0.999).high >= 0.95
    assert covered / runs >= 0.95
    assert sum(b == 4.0 for b in bounds) / runs > 0.9  # conservative in coverage, not in power: it reaches 4


def test_the_point_estimate_alone_would_not_have_the_coverage():
    # what the bound is for: the isotonic estimate exceeds the true capacity about half the time on the boundary
    rng = np.random.default_rng(11)
    runs, over = 600, 0
    threshold = _curve(5.0) / 1.000001
    for _ in range(runs):
        levels = [LoadLevel(x, list(_curve(x) * np.exp(rng.normal(0, 0.05, 5)))) for x in LOADS]
        over += (slo_capacity(levels, threshold=threshold).estimate or 0.0) > 4.0
    assert stats.binomtest(over, runs).proportion_ci(0.999).low > 0.2


def test_bad_input():
    with pytest.raises(ValueError, match="op must be"):
        slo_capacity([LoadLevel(1, [1.0, 2.0])], 1.0, op="<")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct"):
        slo_capacity([LoadLevel(1, [1.0, 2.0]), LoadLevel(1, [1.0, 2.0])], 1.0)
    with pytest.raises(ValueError, match="threshold"):
        slo_capacity([LoadLevel(1, [1.0, 2.0])], 0.0)
    with pytest.raises(ValueError, match="at least one launch"):
        slo_capacity([LoadLevel(1, [])], 1.0)
