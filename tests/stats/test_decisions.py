"""Decision rules: TOST against statsmodels, one-sided rules, monotonicity, launch outcomes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.weightstats import ttost_ind

from framework.stats import decisions, effects


@pytest.mark.parametrize("seed,shift", [(1, 0.0), (2, 0.01), (3, 0.025), (4, -0.02), (5, 0.05)])
def test_tost_matches_statsmodels(seed, shift):
    rng = np.random.default_rng(seed)
    x1 = 92.6 * np.exp(rng.normal(shift, 0.01, 6))
    x2 = 92.6 * np.exp(rng.normal(0.0, 0.02, 5))
    m = 0.03
    p_ref, lower, upper = ttost_ind(x1, x2, 1 - m, 1 + m, usevar="unequal", transform=np.log)
    eff = effects.welch(np.log(x1), np.log(x2))
    dec = decisions.equivalent(eff, m, 0.05)
    assert dec.p_value == pytest.approx(p_ref, rel=1e-8)
    assert dec.details["p_lower"] == pytest.approx(lower[1], rel=1e-8)
    assert dec.details["p_upper"] == pytest.approx(upper[1], rel=1e-8)
    # the interval rule and the TOST p agree
    assert (dec.verdict == "supported") == (p_ref < 0.05)


def _eff(est, se=0.01, df=8.0):
    return effects.TEffect(est, se, df)


def test_equivalence_three_ways():
    m = 0.03
    assert decisions.equivalent(_eff(0.0), m, 0.05).verdict == "supported"
    assert decisions.equivalent(_eff(0.1), m, 0.05).verdict == "refuted"
    assert decisions.equivalent(_eff(0.028), m, 0.05).verdict == "inconclusive"
    assert "inside the equivalence bounds [0.970, 1.030]" in decisions.equivalent(_eff(0.0), m, 0.05).reason


def test_increase_and_decrease_rules():
    th = math.log(1.10)
    assert decisions.increase(_eff(0.5), 0.10, 0.05).verdict == "supported"
    dec = decisions.increase(_eff(0.0), 0.10, 0.05)
    assert dec.verdict == "refuted" and "significantly smaller than required" in dec.reason
    assert decisions.increase(_eff(th), 0.10, 0.05).verdict == "inconclusive"
    assert decisions.increase(_eff(th), 0.10, 0.05).p_value == pytest.approx(0.5)
    assert decisions.decrease(_eff(-0.5), 0.10, 0.05).verdict == "supported"
    assert decisions.decrease(_eff(0.0), 0.10, 0.05).verdict == "refuted"
    assert decisions.interaction(_eff(0.5), 0.10, "larger", 0.05).verdict == "supported"
    assert decisions.interaction(_eff(-0.5), 0.10, "smaller", 0.05).verdict == "supported"
    assert decisions.interaction(_eff(0.5), 0.10, "smaller", 0.05).verdict == "refuted"


ORDER = {"refuted": 0, "inconclusive": 1, "supported": 2}


@settings(max_examples=200, deadline=None)
@given(est=st.floats(-0.5, 0.5), bump=st.floats(0, 0.5), se=st.floats(1e-4, 0.2), df=st.floats(1.0, 60.0),
       e=st.floats(0, 0.5))
def test_increase_verdict_is_monotone_in_the_effect(est, bump, se, df, e):
    lo = decisions.increase(_eff(est, se, df), e, 0.05).verdict
    hi = decisions.increase(_eff(est + bump, se, df), e, 0.05).verdict
    assert ORDER[hi] >= ORDER[lo]
    lo = decisions.decrease(_eff(-est, se, df), min(e, 0.9), 0.05).verdict
    hi = decisions.decrease(_eff(-est - bump, se, df), min(e, 0.9), 0.05).verdict
    assert ORDER[hi] >= ORDER[lo]


@settings(max_examples=200, deadline=None)
@given(est=st.floats(-0.2, 0.2), se=st.floats(1e-4, 0.1), df=st.floats(1.0, 60.0), m=st.floats(0.005, 0.3),
       a1=st.floats(0.001, 0.2), a2=st.floats(0.001, 0.2))
def test_stricter_level_never_decides_more(est, se, df, m, a1, a2):
    strict, loose = min(a1, a2), max(a1, a2)
    for rule in (lambda a: decisions.equivalent(_eff(est, se, df), m, a),
                 lambda a: decisions.increase(_eff(est, se, df), m, a)):
        if rule(strict).verdict != "inconclusive":
            assert rule(loose).verdict == rule(strict).verdict


def _o(ok, error=None, tail=()):
    return decisions.LaunchOutcome("l", ok, error, tail)


def test_launches_rules_and_captured_line():
    crash = "RuntimeError: No supported CUDA architectures found for major versions [9, 10]"
    fails = [_o(False, "exit code 1", ("loading...", crash)) for _ in range(2)]
    dec = decisions.launches(fails, "fails", "No supported CUDA architectures found")
    assert dec.verdict == "supported" and crash in dec.reason
    assert decisions.launches(fails, "starts", None).verdict == "refuted"
    assert decisions.launches(fails, "fails", "out of memory").verdict == "refuted"
    mixed = [_o(True)] * 3 + [_o(False, "boom")] * 2
    dec = decisions.launches(mixed, "starts", None)
    assert dec.verdict == "inconclusive" and "flaky: 3/5" in dec.reason and "boom" in dec.reason
    assert decisions.launches([_o(True)] * 4, "starts", None).verdict == "supported"
    assert decisions.launches([], "starts", None).verdict == "inconclusive"


def test_launches_can_match_a_failure_class():
    def failed(cls):
        return decisions.LaunchOutcome("l", False, f"{cls}: a line", (), cls)

    two = [failed("port_in_use"), failed("port_in_use")]
    dec = decisions.launches(two, "fails", None, "port_in_use")
    assert dec.verdict == "supported" and "as port_in_use" in dec.reason
    assert decisions.launches(two, "fails", None, "out_of_memory").verdict == "refuted"
    assert decisions.launches(two, "fails", "a line", "port_in_use").verdict == "supported"
    assert decisions.launches([failed("port_in_use"), failed("bad_flag")], "fails", None,
                              "bad_flag").verdict == "inconclusive"


def _blocks(oks, error="boom"):
    """One launch per block, in block order."""
    return [decisions.LaunchOutcome(f"l{i}", ok, None if ok else error, (), None, i) for i, ok in enumerate(oks)]


def test_launches_under_anytime_test_the_claimed_rate_and_keep_the_counts_in_the_reason():
    crash = "RuntimeError: No supported CUDA architectures found for major versions [9, 10]"
    seven = [decisions.LaunchOutcome(f"l{i}", False, "exit code 1", ("loading...", crash), None, i) for i in range(7)]
    dec = decisions.launches(seven, "fails", "No supported CUDA", a=0.05)
    assert dec.verdict == "supported" and dec.p_value == pytest.approx(8 / 255) and crash in dec.reason
    assert "7/7 launches failed" in dec.reason and "confidence sequence" in dec.reason
    assert dec.ci[0] > 0.5 and dec.ci[1] == 1.0 and dec.details["rate"] == 0.5
    six = decisions.launches(seven[:6], "fails", "No supported CUDA", a=0.05)  # (2^7 - 1) / 7 = 18.1 < 20
    assert six.verdict == "inconclusive" and "at least 7 launches" in six.reason
    dec = decisions.launches(seven, "starts", None, a=0.05)
    assert dec.verdict == "refuted" and "0/7 launches started" in dec.reason and crash not in dec.reason
    assert dec.details["p_upper"] <= 0.05 and dec.ci[1] < 0.5
    flaky = decisions.launches(_blocks([True, False] * 10), "starts", None, a=0.05)
    assert flaky.verdict == "inconclusive" and "10/20 launches started" in flaky.reason and "'boom'" in flaky.reason
    # a stricter claim needs more: 7 of 7 supports "more often than not" but not "nine in ten"
    assert decisions.launches(_blocks([True] * 7), "starts", None, rate=0.9, a=0.05).verdict == "inconclusive"
    assert decisions.launches(_blocks([True] * 7), "starts", None, rate=0.2, a=0.05).verdict == "supported"


def test_launches_under_anytime_look_at_block_ends_and_a_verdict_stays_reached():
    late = decisions.launches(_blocks([True] * 8 + [False] * 6), "starts", None, a=0.05)
    assert late.verdict == "supported" and "8/14" in late.reason  # 8 of 8 at the eighth look: it stays
    both = decisions.launches(_blocks([True] * 8 + [False] * 40), "starts", None, a=0.05)
    assert both.verdict == "inconclusive" and "both directions" in both.reason
    # a block is one look: its first 7 of 7 would have crossed, but a look sees the whole block (7 of 8)
    pairs = [decisions.LaunchOutcome(f"l{i}", i < 7, "boom", (), None, i // 8) for i in range(16)]
    dec = decisions.launches(pairs, "starts", None, a=0.05)
    assert dec.details["looks"] == [[7, 8], [7, 16]] and dec.verdict == "inconclusive"


def test_launches_count_rule_is_unchanged_without_anytime():
    dec = decisions.launches(_blocks([True] * 2), "starts", None)
    assert dec.verdict == "supported" and dec.p_value is None and dec.ci is None
    assert dec.reason == "all 2 launch(es) started"


def test_a_launch_that_served_requests_and_then_crashed_is_not_said_to_have_not_started():
    crash = "crash_after_ready: server exited with code 1 while being measured: boom"
    three = [decisions.LaunchOutcome(f"l{i}", False, crash, (), "crash_after_ready", i, served) for i, served
             in enumerate((4, 4, 2))]
    dec = decisions.launches(three, "starts", None)
    assert dec.verdict == "refuted"
    assert "0/3 launches started" not in dec.reason
    assert dec.reason.startswith("3/3 launches started, 0 served their workload; 3 failed after they served "
                                 "4, 4 and 2 requests")
    one = [decisions.LaunchOutcome("a", True), decisions.LaunchOutcome("b", False, crash, (), None, 1, 1),
           decisions.LaunchOutcome("c", False, "bad_flag: x", (), "bad_flag", 2)]
    flaky = decisions.launches(one, "starts", None)
    assert "2/3 launches started, 1 served their workload; 1 failed after it served 1 request" in flaky.reason
    fails = decisions.launches(three, "fails", "nothing like this")
    assert "(3 started)" in fails.reason
