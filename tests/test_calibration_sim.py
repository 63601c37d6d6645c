"""benchmarks/calibration_sim.py reads the figures `plan` prints: its hypotheses are valid and its parser
recovers, for every kind, the launches and the power `plan_cmd.print_plan` printed (in-process, no probe).

The benchmark compares real runs against the number plan prints; if plan's printout changes, this fails
instead of the benchmark comparing against a misread figure.
"""

from __future__ import annotations

import importlib.util
import io
import sys

import pytest
from rich.console import Console

from cli_helpers import ROOT
from framework.plan_cmd import plan_from_profile, print_plan
from framework.planning import launches_for_hypothesis
from framework.spec import Hypothesis, load_experiment

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
