"""Planning: analytic power against simulation of the decision rules, and plans for the seed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from stats_rows import simulate

from framework.analysis import planning
from framework.core.spec import load_hypothesis
from framework.stats import decisions, effects

ROOT = Path(__file__).resolve().parents[2]


def _simulated_power(rule, effect, sd_cell, n, m, target, reps=4000, seed=0):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        x, y = rng.normal(effect, sd_cell, n), rng.normal(0.0, sd_cell, n)
        eff = effects.welch(x, y)
        dec = decisions.equivalent(eff, m, 0.05) if rule == "equivalent" else decisions.increase(eff, m, 0.05)
        hits += dec.verdict == target
    return hits / reps


@pytest.mark.parametrize("rule,effect,n,m,target", [
    ("equivalent", 0.0, 3, 0.03, "supported"),
    ("equivalent", 0.01, 4, 0.03, "supported"),
    ("equivalent", 0.06, 4, 0.03, "refuted"),
    ("up", 0.15, 3, 0.10, "supported"),
    ("up", 0.05, 5, 0.10, "refuted"),
])
def test_power_matches_simulation_of_the_decision_rules(rule, effect, n, m, target):
    sd = 0.015
    if rule == "equivalent":
        pw = planning.power_of(rule, effect_log=effect, var_cells=[sd ** 2] * 2, weights=[1, -1], n=n, a=0.05,
                               low=math.log(1 - m), high=math.log(1 + m), target=target)
    else:
        pw = planning.power_of(rule, effect_log=effect, var_cells=[sd ** 2] * 2, weights=[1, -1], n=n, a=0.05,
                               low=math.log(1 + m), target=target)
    sim = _simulated_power(rule, effect, sd, n, m, target)
    assert pw == pytest.approx(sim, abs=4 * math.sqrt(0.25 / 4000))


def test_plan_for_the_seed():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    means = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}
    sdr = {0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04}
    rows = planning.plan(h, means=means, sd_launch_log=0.006, sd_request_log=sdr, launch_cost_s=120.0,
                         request_cost_s={0: 3.0, 1: 5.0, 2: 3.0, 3: 3.0})
    by = {r.prediction: r for r in rows}
    assert by["neutral_for_baseline"].target == "supported"
    assert by["helps_eagle3"].assumed_effect == pytest.approx(96.1 / 54.1)
    for r in rows:
        assert r.launches_per_condition >= 2 and r.power >= 0.9
        assert r.total_launches == 4 * r.launches_per_condition
        per_round = 4 * 120.0 + (h.design.requests + h.design.warmup) * (3.0 + 5.0 + 3.0 + 3.0)
        assert r.expected_wall_s == pytest.approx(r.launches_per_condition * per_round)
    assert planning.launches_for_hypothesis(rows) == max(r.launches_per_condition for r in rows)


def test_smaller_effects_need_more_launches():
    h = load_hypothesis(ROOT / "hypotheses" / "torch_symm_mem.yaml")
    ns = []
    for ratio in (1.30, 1.20, 1.15):
        (row,) = planning.plan(h, means={0: 54.1, 1: 54.1 * ratio}, sd_launch_log=0.006, sd_request_log=0.04)
        ns.append(row.launches_per_condition)
    assert ns == sorted(ns) and ns[0] < ns[-1]
    (row,) = planning.plan(h, means={0: 54.1, 1: 54.1 * 1.10}, sd_launch_log=0.006, sd_request_log=0.04)
    assert row.launches_per_condition is None and "threshold" in row.note


def test_plan_from_a_pilot_run():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    rows = simulate(h, {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}, sd_request={0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04},
                    seed=3)
    plan = planning.plan_from_rows(h, rows)
    assert len(plan) == 3 and all(r.launches_per_condition for r in plan)
    assert all(r.expected_wall_s > 0 for r in plan)  # costs measured from the rows (startup_s, e2e_s)


def test_slow_launches_raise_the_plan_for_a_tight_margin():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    means = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}
    sdr = {0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04}
    plain = planning.plan(h, means=means, sd_launch_log=0.006, sd_request_log=sdr)
    slow = planning.plan(h, means=means, sd_launch_log=0.006, sd_request_log=sdr, slow_launch_prob=0.03,
                         slow_launch_factor=1 / 1.08)
    assert slow[0].launches_per_condition > plain[0].launches_per_condition
    assert slow[0].power >= 0.9


def test_the_sims_measurement_noise_enters_the_plan_from_the_profile():
    """plan adds what a probe measured (per-request and between-launch sd) to the model's noise, in quadrature."""
    from framework.cli.plan import plan_from_profile
    from framework.core.spec import load_experiment

    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    exp = load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")
    noisy = {"within": {0: 0.02, 1: 0.02, 2: 0.02, 3: 0.02}, "between": 0.005, "launches": 2, "requests": 4,
             "speedup": 20}
    rows, source = plan_from_profile(h, exp, power=0.9, requests=2, warmup=1, alpha=0.05, measurement=noisy)
    # without it the same plan is 9 launches per condition (tests/cli/test_cli.py, plan with probe=false)
    assert rows[0].launches_per_condition > 9
    assert "measurement noise" in source and "between launches 0.50%" in source


def test_launches_to_see_a_mode_with_probability_095():
    import math

    from framework.analysis.planning import launches_to_see_mode, mode_shares

    for p in (0.5, 0.1, 0.03, 0.01, 0.001):
        n = launches_to_see_mode(p)
        assert 1 - (1 - p) ** n >= 0.95 > 1 - (1 - p) ** (n - 1)  # the smallest such n
        assert n == math.ceil(math.log(0.05) / math.log(1 - p))
    assert [n for _, n in mode_shares()] == [29, 59, 99, 299]
    assert (0.2, 14) in mode_shares(0.2)
