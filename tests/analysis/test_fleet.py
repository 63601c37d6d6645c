"""How many machines a fleet claim needs: more machine-level noise, more machines; a one-machine pilot cannot
say; the rule's power matches a direct simulation of the machine-means analysis."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_machines import _rows, two_cell

from framework.analysis import fleet
from framework.analysis.planning import comparison
from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze


def test_more_noise_between_machines_needs_more_machines():
    h = two_cell()
    comp = comparison(h, h.predictions[0], {0: 100.0, 1: 115.0})
    counts = [fleet.machines_needed(comp, var_effect=sd ** 2, var_launch=0.02 ** 2, n=3, a=0.05, power=0.9)[0]
              for sd in (0.01, 0.03, 0.06)]
    assert counts[0] is not None and counts[0] < counts[1] < counts[2]
    # launches per machine shrink only the launch part: with the machine part dominant, more barely helps
    few = fleet.machines_needed(comp, var_effect=0.06 ** 2, var_launch=0.02 ** 2, n=2, a=0.05, power=0.9)[0]
    many = fleet.machines_needed(comp, var_effect=0.06 ** 2, var_launch=0.02 ** 2, n=50, a=0.05, power=0.9)[0]
    assert many is not None and few is not None and many >= few - 2


def test_power_matches_the_analysis_it_plans_for():
    """The planned power at m = 4 against the share of supported verdicts of the real analysis on simulated
    fleets of 4 machines (200 of them: a binomial se of about 0.03)."""
    h = two_cell()
    comp = comparison(h, h.predictions[0], {0: 100.0, 1: 100.0 * math.exp(0.12)})
    planned = fleet.power_machines(comp, m=4, var_effect=0.03 ** 2, var_launch=0.02 ** 2, n=2, a=0.05)
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(200):
        values = {}
        for j in range(4):
            g = rng.normal(0, 0.03)
            for c in (0, 1):
                values[(f"m{j}", c)] = [float(100 * math.exp(c * (0.12 + g) + rng.normal(0, 0.02))) for _ in range(2)]
        hits += analyze(h, _rows(values), ruleset=RULESETS[3]).predictions[0].verdict == "supported"
    assert hits / 200 == pytest.approx(planned, abs=0.08)


def test_a_one_machine_pilot_cannot_plan_a_fleet_without_an_assumption():
    h = two_cell()
    rows = _rows({("a", 0): [100, 102, 98], ("a", 1): [120, 123, 118]})
    noise = fleet.pilot_noise(h, rows)
    assert noise["faster"]["machines"] == 1 and noise["faster"]["var_effect"] is None
    (row,) = fleet.plan_machines(h, means={0: 100.0, 1: 120.0}, noise=noise, n=3, power=0.9, alpha=0.05)
    assert row.machines is None and "one machine" in row.note
    (assumed,) = fleet.plan_machines(h, means={0: 100.0, 1: 120.0}, noise=noise, n=3, power=0.9, alpha=0.05,
                                     machine_sd=0.05)
    assert assumed.machines is not None and assumed.machines >= 2
    assert fleet.launches_per_machine(h, rows) == 3


def test_an_anytime_design_is_told_that_its_fleet_plan_is_for_the_fixed_sample_rule():
    h = two_cell()
    anytime = h.model_copy(update={"design": h.design.model_copy(update={"analysis": "anytime"})})
    rows = _rows({("a", 0): [100, 102, 98], ("a", 1): [120, 123, 118]})
    noise = fleet.pilot_noise(anytime, rows)
    (row,) = fleet.plan_machines(anytime, means={0: 100.0, 1: 120.0}, noise=noise, n=3, power=0.9, alpha=0.05,
                                 machine_sd=0.05)
    assert "under analysis: anytime the machine-level confidence sequence" in row.note
    (fixed,) = fleet.plan_machines(h, means={0: 100.0, 1: 120.0}, noise=noise, n=3, power=0.9, alpha=0.05,
                                   machine_sd=0.05)
    assert "anytime" not in fixed.note and fixed.machines == row.machines
