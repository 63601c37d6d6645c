"""benchmarks/calibration_search.py decides its confirmations with the framework's own analysis, on the
launches it means: the relabelled exploration rows give `analyze` the winner's and the reference's launch
means (its estimate is their ratio of geometric means), and a short run prints its figures (in-process)."""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
from cli_helpers import ROOT

from framework.analysis.verdicts import analyze

sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("calibration_search", ROOT / "benchmarks" / "calibration_search.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["calibration_search"] = bench
_spec.loader.exec_module(bench)


def test_the_exploration_rows_reach_analyze_as_the_winner_and_the_reference():
    rng = np.random.default_rng(3)
    h = bench._explore_hypothesis(4)
    idx = [c.index for c in bench.cal.conditions(h)]
    rows = bench.cal.simulate_rows(h, {i: 1.0 for i in idx}, (), bench.EXPLORE_LAUNCHES, rng)
    means = bench._by_launch(rows)
    ref, winner = 0, 3
    a = analyze(bench._confirm_hypothesis(0.0), bench._as_two_cell(rows, ref, winner))
    expected = math.exp(np.mean(np.log(means[winner])) - np.mean(np.log(means[ref])))
    assert math.isclose(a.predictions[0].estimate, expected, rel_tol=1e-9)


def test_one_search_is_seeded_and_a_short_run_prints_its_figures(capsys):
    job = (bench.SEED, 0, False, 7, bench.CANDIDATES)
    first, again = bench.one_search(job), bench.one_search(job)
    assert first == again
    assert set(first) >= {"naive", "fresh_0.0", "fresh_0.05", "reused_0.0", *bench.CORRECTIONS}
    assert bench.main(["--runs", "3", "--workers", "1"]) in (0, 1)
    out = capsys.readouterr().out
    assert "false confirmation on fresh launches" in out and "checks pass" in out
