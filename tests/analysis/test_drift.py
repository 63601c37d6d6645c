"""Drift is detected, not averaged: an empty confidence sequence or early != late blocks -> inconclusive (rules v2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.spec import Hypothesis


def _h(kind: str = "increase", **pred) -> Hypothesis:
    return Hypothesis.model_validate({
        "name": "d", "statement": "drift", "experiment": "none",
        "factors": {"x": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "p", "factor": "x", "level": "b", "kind": kind, **pred}],
        "design": {"launches": 5, "requests": 1, "warmup": 0, "alpha": 0.05, "seed": 1},
    })


def _rows(h: Hypothesis, logs: dict[int, list[float]]) -> list[dict]:
    rows = []
    for c, xs in logs.items():
        for i, x in enumerate(xs):
            lid = f"c{c}-r{i}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c, "replicate": i, "attempt": 1, "ok": True})
            rows.append({"kind": "request", "trial_id": f"{lid}-q0", "launch_id": lid, "condition": c, "index": 0,
                         "warmup": False, "ok": True, h.metric: float(100 * math.exp(x))})
    return rows


def _issue_example(seed: int = 0) -> tuple[Hypothesis, list[dict]]:
    """+6% for 6 blocks, then -6% for 14 (issue 22), small launch noise."""
    rng = np.random.default_rng(seed)
    h = _h(min_effect=0.0)
    effect = [math.log(1.06)] * 6 + [math.log(0.94)] * 14
    return h, _rows(h, {0: list(rng.normal(0, 0.004, 20)), 1: list(np.array(effect) + rng.normal(0, 0.004, 20))})


def test_the_issues_sign_change_is_inconclusive_with_the_cause():
    h, rows = _issue_example()
    old = analyze(h, rows, method="anytime", ruleset=RULESETS[1]).predictions[0]
    lo, hi = old.details["log_ci"]
    assert lo > hi and old.verdict == "supported"  # version 1: an empty sequence read as confident
    new = analyze(h, rows, method="anytime", ruleset=RULESETS[2]).predictions[0]
    assert new.verdict == "inconclusive"
    assert new.reason.startswith("inconclusive: the effect changed during the run")
    d = new.details["drift"]
    assert d["detected"] and d["empty_confidence_sequence"] and d["verdict_without_check"] == "supported"


def test_early_and_late_blocks_that_differ_make_a_fixed_verdict_inconclusive():
    rng = np.random.default_rng(1)
    h = _h(min_effect=0.0)
    b = [math.log(1.10)] * 5 + [math.log(0.99)] * 5  # the late half on the other side of the threshold
    rows = _rows(h, {0: list(rng.normal(0, 0.003, 10)), 1: list(np.array(b) + rng.normal(0, 0.003, 10))})
    assert analyze(h, rows, ruleset=RULESETS[1]).predictions[0].verdict == "supported"
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "inconclusive" and "the effect changed during the run" in p.reason
    d = p.details["drift"]
    assert d["early_blocks"] == 5 and d["late_blocks"] == 5 and d["p_value"] < 0.05
    assert math.exp(d["early_log_effect"]) == pytest.approx(1.10, abs=0.01) and d["late_log_effect"] < 0


def test_a_change_that_keeps_the_claim_on_both_halves_keeps_the_verdict():
    rng = np.random.default_rng(3)
    h = _h(min_effect=0.0)
    b = [math.log(1.30)] * 5 + [math.log(1.20)] * 5  # changed beyond chance, but an increase throughout
    rows = _rows(h, {0: list(rng.normal(0, 0.003, 10)), 1: list(np.array(b) + rng.normal(0, 0.003, 10))})
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported" and p.details["drift"]["halves_differ"] and not p.details["drift"]["detected"]


def test_a_steady_effect_is_decided_and_false_alarms_stay_near_alpha():
    """Steady effect: the check fires at most at its level (benchmarks/calibration_shape.py: 0.02-0.05)."""
    rng = np.random.default_rng(2)
    h = _h(min_effect=0.0)
    fired = 0
    sims = 200
    for _ in range(sims):
        rows = _rows(h, {0: list(rng.normal(0, 0.01, 10)), 1: list(rng.normal(math.log(1.05), 0.01, 10))})
        p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
        fired += bool(p.details["drift"]["detected"])
        assert p.verdict in ("supported", "inconclusive")
    assert fired / sims <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims)


def test_identical_contrasts_are_not_drift_however_small_their_float_noise():
    h = _h(min_effect=0.1)
    noise = [0.0, 0.01, -0.01, 0.02, -0.02]
    rows = _rows(h, {0: noise, 1: [math.log(1.3) + e for e in noise]})  # every block contrast log(1.3)
    p = analyze(h, rows, ruleset=RULESETS[2]).predictions[0]
    assert p.verdict == "supported" and not p.details["drift"]["detected"]
