"""Rules v4's marks that inform (analysis/marks.py) and the typical-launch estimand (core/spec.py `estimand`)."""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats
from test_drift import _h, _rows

from framework.analysis import marks
from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze


def _kinds(p) -> set[str]:
    return {c["kind"] for c in p.details.get("caveats") or []}


def test_a_clear_effect_on_normal_launches_carries_no_mark_under_v4_but_v2s_rare_mode_caveat():
    rng = np.random.default_rng(4)
    h = _h(min_effect=0.0)
    rows = _rows(h, {0: list(rng.normal(0, 0.003, 5)), 1: list(rng.normal(math.log(1.02), 0.003, 5))})
    v4 = analyze(h, rows, ruleset=RULESETS[4]).predictions[0]
    v2 = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert v4.verdict == v2.verdict == "supported"
    assert _kinds(v4) == set() and "caveat" not in v4.reason
    assert "rare_modes" in _kinds(v2)  # an old record keeps its caveats when audited under its own version
    assert _kinds(analyze(h, rows, ruleset=RULESETS[3]).predictions[0]) == _kinds(v2)
    assert v4.details["estimand"]["name"] == "mean" and "log 0.05 / log(1 - p)" in v4.details["estimand"]["covers"]
    assert "estimand" not in v2.details


def test_a_slow_launch_in_one_condition_is_marked():
    h = _h(min_effect=0.0)
    a = [0.0, 0.001, -0.001, 0.0005, -0.0005, 0.0012, -0.0008, 0.0003, -0.0002, 0.0007]
    b = [0.02 + x for x in a[:9]] + [-0.01]
    p = analyze(h, _rows(h, {0: a, 1: b}), ruleset=RULESETS[4]).predictions[0]
    assert p.verdict != "inconclusive" and "mode" in _kinds(p)
    mode = next(c for c in p.details["caveats"] if c["kind"] == "mode")
    assert mode["mark"] == marks.MARKS["mode"] and list(mode["apart"]) == ["x=b"]


def test_evidence_that_cannot_carry_the_verdict_across_its_threshold_draws_no_mark():
    # spreads that differ beyond chance (F test), but the effect (~50%) is far beyond any launch's deviation
    h = _h(min_effect=0.0)
    a = [0.0, 0.001, -0.001, 0.0015, -0.0015, 0.0005, -0.0005, 0.001, -0.001, 0.0]
    b = [0.4 + x for x in (0.03, -0.04, 0.05, -0.02, 0.045, -0.035, 0.02, -0.03, 0.04, -0.025)]
    p = analyze(h, _rows(h, {0: a, 1: b}), ruleset=RULESETS[4]).predictions[0]
    assert p.verdict == "supported" and _kinds(p) == set()
    assert analyze(h, _rows(h, {0: a, 1: b}), ruleset=RULESETS[2]).predictions[0].details["caveats"]
    # the same spreads with an effect within a launch's deviation of the threshold: marked, with both sizes
    near = [x - 0.35 for x in b]
    q = analyze(h, _rows(h, {0: a, 1: near}), ruleset=RULESETS[4]).predictions[0]
    assert q.verdict == "supported" and _kinds(q) == {"spread"}
    spread = q.details["caveats"][0]
    assert spread["spread_p"] < marks.MARK_LEVEL and spread["margin_log"] < spread["reach_log"]
    assert abs(spread["reach_log"] - max(abs(x - np.median(near)) for x in near)) < 1e-9


def _exact_u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) by enumerating every ranking (a direct computation, independent of the project's recurrence)."""
    counts = np.zeros(m * n + 1)
    for xs in itertools.combinations(range(m + n), m):
        counts[sum(xs) - m * (m - 1) // 2] += 1
    return np.cumsum(counts) / counts.sum()


def test_the_typical_estimand_is_hodges_lehmann_with_the_moses_interval_and_the_mann_whitney_test():
    rng = np.random.default_rng(7)
    x, y = rng.normal(0.01, 0.006, 6), rng.normal(0.0, 0.006, 7)
    x[0] -= 0.08  # one slow launch: the mean moves, the typical launch barely
    h = _h(min_effect=0.0, estimand="typical")
    p = analyze(h, _rows(h, {0: list(y), 1: list(x)}), ruleset=RULESETS[4]).predictions[0]
    diffs = np.sort((x[:, None] - y[None, :]).ravel())
    assert math.log(p.estimate) == np.median(diffs) or abs(math.log(p.estimate) - np.median(diffs)) < 1e-9
    assert p.details["method"] == "rank" and p.details["estimand"]["name"] == "typical"
    assert p.reason.startswith("the typical launch (Hodges-Lehmann shift): ratio ")
    ref = stats.mannwhitneyu(x, y, alternative="greater", method="exact").pvalue
    assert abs(p.p_value - ref) < 1e-9
    cdf = _exact_u_cdf(6, 7)
    c = int(np.nonzero(cdf <= 0.05 + 1e-12)[0][-1]) + 1  # Moses: D_(c), c the largest with P(U <= c-1) <= a
    assert abs(math.log(p.ci[0]) - diffs[c - 1]) < 1e-9 and abs(math.log(p.ci[1]) - diffs[-c]) < 1e-9
    mean = analyze(_h(min_effect=0.0), _rows(h, {0: list(y), 1: list(x)}), ruleset=RULESETS[4]).predictions[0]
    assert mean.details["method"] == "welch" and mean.estimate < p.estimate


def test_the_typical_estimand_over_machines_is_inconclusive_with_why():
    h = _h(min_effect=0.0, estimand="typical")
    rows = _rows(h, {0: [0.0, 0.001, -0.001, 0.0], 1: [0.05, 0.051, 0.049, 0.05]})
    p = analyze(h, rows, method="anytime", ruleset=RULESETS[4]).predictions[0]
    assert p.verdict == "inconclusive" and "no machine-level or anytime-valid test" in p.reason
