"""benchmarks/calibration_sim.py reads the figures `plan` prints: its hypotheses are valid and its parsers
recover, for every kind, the launches and the power `plan_cmd.print_plan` printed, and under
`design.analysis=anytime` the cap, power and expected launches `print_anytime_plan` printed (in-process, no probe).

The benchmark compares real runs against the number plan prints; if plan's printout changes, this fails
instead of the benchmark comparing against a misread figure.
"""

from __future__ import annotations

import importlib.util
import io
import math
import sys

import pytest
from cli_helpers import ROOT
from rich.console import Console

from framework.analysis.planning import launches_for_hypothesis, plan_anytime
from framework.cli.plan import plan_from_profile, print_anytime_plan, print_plan, profile_assumptions
from framework.core.spec import Hypothesis, load_experiment

_spec = importlib.util.spec_from_file_location("calibration_sim", ROOT / "benchmarks" / "calibration_sim.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["calibration_sim"] = bench  # its dataclasses look their module up
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("kind", bench.KINDS, ids=[k.name for k in bench.KINDS])
def test_the_benchmark_reads_what_plan_prints(kind):
    h = Hypothesis.model_validate(kind.hypothesis())
    exp = load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")
    rows, source = plan_from_profile(h, exp, power=bench.POWER, requests=h.design.requests,
                                     warmup=h.design.warmup, alpha=h.design.alpha)
    out = io.StringIO()
    print_plan(Console(file=out, width=120), h, rows, bench.POWER, source, h.design.requests, h.design.warmup)
    planned = bench.parse_plan(kind, out.getvalue())
    assert planned.launches == launches_for_hypothesis(rows)
    if kind.name == "launches":
        assert planned.power is None and planned.launches == 1
    else:
        (row,) = rows
        assert planned.power == pytest.approx(row.power, abs=5e-4) and planned.target == row.target
        assert 0.5 <= planned.power <= 0.9  # the informative range the thresholds were chosen for


@pytest.mark.parametrize("kind", bench.KINDS, ids=[k.name for k in bench.KINDS])
def test_the_benchmark_reads_what_plan_prints_under_anytime(kind):
    """`--analysis anytime`: the cap, P(hypothesis verdict) and expected launches print_anytime_plan printed."""
    h = Hypothesis.model_validate(kind.hypothesis())
    exp = load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")
    d = h.design.model_copy(update={"analysis": "anytime"})
    assumptions, source = profile_assumptions(h, exp)
    p = plan_anytime(h, **assumptions, requests=d.requests, warmup=d.warmup, power=bench.POWER, alpha=d.alpha,
                     block=d.sequential.block, sims=2000)
    out = io.StringIO()
    print_anytime_plan(Console(file=out, width=120), h, p, source, d)
    planned = bench.parse_anytime_plan(kind, out.getvalue())
    assert (planned.cap, planned.target) == (p.cap, p.hypothesis_target)
    assert planned.power == pytest.approx(p.hypothesis_power, abs=5e-4)
    assert planned.launches == pytest.approx(p.expected_launches, abs=5e-3)
    assert planned.launches_se == pytest.approx(p.expected_launches_se, abs=5e-3)
    assert planned.power_se == pytest.approx(math.sqrt(p.hypothesis_power * (1 - p.hypothesis_power) / 2000), abs=5e-4)
    # every launch as expected: decided at launches_to_support(0.5, 0.05) = 7, in blocks of 2
    if kind.name == "launches":
        assert (planned.cap, planned.power, planned.launches) == (8, 1.0, 8.0)
