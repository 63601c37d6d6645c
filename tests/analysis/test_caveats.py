"""Caveats on decided comparisons (rules v2): rare modes unseen, shapes that differ, survivors; and the spread floor."""

from __future__ import annotations

import math

import numpy as np
from test_drift import _h, _rows

from framework.analysis import caveats
from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze


def _kinds(p) -> set[str]:
    return {c["kind"] for c in p.details.get("caveats") or []}


def test_a_small_effect_at_five_launches_carries_the_rare_mode_caveat():
    rng = np.random.default_rng(4)
    h = _h(min_effect=0.0)
    rows = _rows(h, {0: list(rng.normal(0, 0.003, 5)), 1: list(rng.normal(math.log(1.02), 0.003, 5))})
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported" and "rare_modes" in _kinds(p)
    c = next(c for c in p.details["caveats"] if c["kind"] == "rare_modes")
    assert c["launches"] == 5 and round(c["unseen_rate"], 2) == 0.45
    # the factor that overturns it: margin / unseen rate, on the log scale
    assert abs(math.log(c["overturning_factor"]) - c["margin_log"] / c["unseen_rate"]) < 1e-12
    assert c["overturning_factor"] < caveats.RARE_MODE_FACTOR and "caveat: rare launch modes" in p.reason
    v1 = analyze(h, rows, ruleset=RULESETS[1]).predictions[0]
    assert "caveats" not in v1.details and "caveat" not in v1.reason and v1.verdict == p.verdict


def test_a_large_effect_is_robust_to_unseen_modes_and_carries_none():
    rng = np.random.default_rng(5)
    h = _h(min_effect=0.1)
    rows = _rows(h, {0: list(rng.normal(0, 0.01, 10)), 1: list(rng.normal(math.log(1.78), 0.01, 10))})
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported" and "rare_modes" not in _kinds(p)


def test_spreads_that_differ_are_marked():
    h = _h(min_effect=0.0)
    a = [0.0, 0.001, -0.001, 0.0015, -0.0015, 0.0005, -0.0005, 0.001, -0.001, 0.0]
    b = [0.05 + x for x in (0.03, -0.04, 0.05, -0.02, 0.045, -0.035, 0.02, -0.03, 0.04, -0.025)]
    p = analyze(h, _rows(h, {0: a, 1: b}), ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported"
    shape = next(c for c in p.details["caveats"] if c["kind"] == "shape")
    assert shape["brown_forsythe_p"] < 0.05 and "LAUNCH DISTRIBUTIONS DIFFER" == shape["mark"]


def test_survivors_of_a_loss_near_the_limit_are_marked():
    rng = np.random.default_rng(6)
    h = _h(min_effect=0.0)
    rows = _rows(h, {0: list(rng.normal(0, 0.003, 10)), 1: list(rng.normal(math.log(1.3), 0.003, 10))})
    for r in rows:  # the slowest-looking 2 of condition b's 10 launches failed at start-up
        if r["kind"] == "launch" and r["launch_id"] in ("c1-r0-a1", "c1-r1-a1"):
            r.update(ok=False, error="exit code 1")
    rows = [r for r in rows if not (r["kind"] == "request" and r["launch_id"] in ("c1-r0-a1", "c1-r1-a1"))]
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported" and "survivors" in _kinds(p) and "survivors may be biased" in p.reason
    clean = _rows(h, {0: list(rng.normal(0, 0.003, 10)), 1: list(rng.normal(math.log(1.3), 0.003, 10))})
    assert "survivors" not in _kinds(analyze(h, clean, ruleset=RULESETS[2]).predictions[0])


def test_a_jitter_below_the_resolution_is_zero_spread():
    h = _h(min_effect=0.0)
    rows = _rows(h, {0: [0.0, 1e-9, -1e-9, 2e-9, 0.0], 1: [0.1, 0.1 + 1e-9, 0.1, 0.1 - 1e-9, 0.1]})
    assert analyze(h, rows, ruleset=RULESETS[1]).predictions[0].verdict == "supported"  # slipped past 1e-12
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "inconclusive" and "zero observed spread" in p.reason


def test_a_permutation_check_that_cannot_reach_the_level_draws_no_mark() -> None:
    # 6 launches against 6: 924 splits, so no p-value below 1/924 exists; at a level under it the check
    # would "fail to confirm" every verdict whatever the launches look like
    from framework.stats import permutation

    assert permutation.smallest_p(6, 6) == 1 / 924
    assert permutation.smallest_p(6, 6) > 0.00068 > permutation.smallest_p(8, 8)
