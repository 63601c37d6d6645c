"""The anytime rule's power model (planning.simulate_anytime / plan_anytime / anytime_cap) against the analysis.

Three checks: on the same data the model reaches exactly the verdicts and stopping looks that
`analysis.sequential_look` reaches (so it mirrors the runner's stopping rule); on the calibration
benchmark's noise model it reproduces the benchmark's figures within Monte Carlo error; and the
default cap it derives is the one the run records. Small simulation counts; tolerances from the MC SEs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import framework

from framework.analysis import planning
from framework.analysis.verdicts import sequential_look
from framework.core.design import conditions
from framework.core.spec import Design, Hypothesis, load_hypothesis
from framework.records import audit
from framework.run.resolve import effective_design

ROOT = Path(__file__).resolve().parents[2]
SEED_MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}  # the seed's four figures (docs/model.md)
# benchmarks/calibration.py's noise model: launch sd 0.6%, request sd 0.4% (+4% accept length in EAGLE cells),
# 3 requests per launch, 3% slow launches at -8%
CAL_SDR = {0: 0.004, 1: math.hypot(0.004, 0.04), 2: 0.004, 3: math.hypot(0.004, 0.04)}
CAL_VAR = {c: 0.006 ** 2 + CAL_SDR[c] ** 2 / 3 for c in range(4)}


# launch-outcome predictions on the seed's conditions: decided (all as expected) at 7 and ceil(7 / 4) = 2 launches
LAUNCH_PREDICTIONS = [
    {"id": "eagle3_fused_starts", "kind": "launches", "where": {"fusion": "on", "decoding": "eagle3"},
     "expect": "starts"},
    {"id": "every_condition_starts", "kind": "launches", "where": {}, "expect": "starts"},
]


def _seed(predictions: list[dict] | None = None, **design) -> Hypothesis:
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    data = h.model_dump()
    data["design"].update(analysis="anytime", **design)
    data["predictions"] += predictions or []
    return Hypothesis.model_validate(data)


def _rows(h: Hypothesis, logs: np.ndarray) -> list[dict]:
    """Trial rows with one measured request per launch whose log value is logs[replicate, condition]."""
    rows: list[dict] = []
    for c in conditions(h):
        for r in range(logs.shape[0]):
            lid = f"c{c.index}-r{r}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c.index, "levels": c.levels, "replicate": r,
                         "block": r, "attempt": 1, "seed": r, "ok": True, "startup_s": 1.0})
            rows.append({"kind": "request", "trial_id": f"{lid}-0", "launch_id": lid, "condition": c.index,
                         "levels": c.levels, "index": 0, "warmup": False, "ok": True, "replicate": r,
                         h.metric: float(math.exp(logs[r, c.index])), "e2e_s": 1.0})
    return rows


@pytest.mark.parametrize("block,launch_predictions", [(1, False), (2, False), (1, True), (2, True)])
def test_on_the_same_data_the_model_stops_and_decides_as_the_runner_does(block, launch_predictions):
    """simulate_anytime on given launch means == the runner's loop of sequential_look on rows of those means.

    With launch-outcome predictions, every launch in the rows starts and serves (the outcome they
    expect, as the model assumes): their e-processes then hold the run until they are decided."""
    h = _seed(LAUNCH_PREDICTIONS if launch_predictions else None)
    cap, sims = 12, 24
    rng = np.random.default_rng(7)
    # noisier than the seed so that the stopping looks, the verdicts and the cap all vary
    noise = rng.normal(0.0, 0.012, (sims, cap, 4)) - math.log(1.08) * (rng.random((sims, cap, 4)) < 0.05)
    comps = [planning.comparison(h, p, SEED_MEANS) for p in h.predictions if p.kind != "launches"]
    rules = {p.id: planning.launch_decided_at(h, p, 0.05) for p in h.predictions if p.kind == "launches"}
    assert rules == ({"eagle3_fused_starts": 7, "every_condition_starts": 2} if launch_predictions else {})
    curve = planning.simulate_anytime(comps, {c: 1.0 for c in range(4)}, alpha=0.05, comparisons=len(h.predictions),
                                      block=block, max_launches=cap, sims=sims, noise=noise, launch_rules=rules)
    logs = np.log([SEED_MEANS[c] for c in range(4)])
    looks = list(range(block, cap + 1, block))
    stops, supported, per = [], [], {p.id: [] for p in h.predictions}
    for i in range(sims):
        rows = _rows(h, logs + noise[i])
        for k, n in enumerate(looks, start=1):
            a, stop, _ = sequential_look(h, [r for r in rows if r["replicate"] < n], look=k, max_looks=len(looks))
            if stop:
                break
        stops.append(n)
        supported.append(a.verdict == "supported")
        for p in a.predictions:
            per[p.id].append(p.verdict == "supported")
    assert curve.caps[-1] == cap
    assert curve.launches[-1] == pytest.approx(np.mean(stops))
    assert curve.hypothesis[-1] == pytest.approx(np.mean(supported))
    for pid, hits in per.items():
        assert curve.power[pid][-1] == pytest.approx(np.mean(hits))
    assert 0.1 < np.mean(supported) < 0.95 and len(set(stops)) > 1 + (not launch_predictions)  # not vacuous
    if launch_predictions:  # the launch-outcome rule held back runs that the comparisons alone would have stopped
        alone = planning.simulate_anytime(comps, {c: 1.0 for c in range(4)}, alpha=0.05, comparisons=5, block=block,
                                          max_launches=cap, sims=sims, noise=noise)
        assert min(stops) == 7 + (block == 2) and alone.launches[-1] < curve.launches[-1]


@pytest.mark.parametrize("block,launches,launches_se", [(1, 7.62, 0.15), (2, 8.32, 0.15)])
def test_the_model_matches_the_calibration_benchmarks_anytime_figures(block, launches, launches_se):
    """benchmarks/calibration_anytime.py on the seed's effects, cap 20 (800 runs through analyze):
    P(all three supported) 0.985 ± 0.004; mean launches 7.62 ± 0.15 (a look after every launch),
    8.32 ± 0.15 (blocks of 2). The model, same noise model, 2000 runs: within 3 combined SEs."""
    h = _seed()
    comps = [planning.comparison(h, p, SEED_MEANS) for p in h.predictions]
    sims = 2000
    curve = planning.simulate_anytime(comps, CAL_VAR, alpha=0.05, comparisons=3, block=block, max_launches=20,
                                      sims=sims, slow_prob=0.03, slow_factor=1 / 1.08)
    k = curve.at(20)
    p = curve.hypothesis[k]
    assert curve.hypothesis_target == "supported"
    assert abs(p - 0.985) <= 3 * math.hypot(0.004, math.sqrt(0.985 * 0.015 / sims))
    assert abs(curve.launches[k] - launches) <= 3 * math.hypot(launches_se, curve.launches_se[k])


def test_plan_anytime_is_the_smallest_cap_with_the_power():
    h = _seed()
    p = planning.plan_anytime(h, means=SEED_MEANS, sd_launch_log=0.006, sd_request_log=CAL_SDR, requests=3,
                              power=0.95, block=2, slow_launch_prob=0.03, slow_launch_factor=1 / 1.08, sims=1000)
    curve = p.curve
    assert p.cap is not None and p.cap % 2 == 0
    assert curve.hypothesis[curve.at(p.cap)] >= 0.95 > curve.hypothesis[curve.at(p.cap - 2)]
    assert p.hypothesis_power == curve.hypothesis[curve.at(p.cap)]
    assert set(p.power_at_cap) == {r.prediction for r in p.rows}
    # each prediction alone needs no more than the hypothesis (all three supported is the hardest)
    assert all(r.launches_per_condition <= p.cap and r.power >= 0.95 for r in p.rows)
    assert 4 <= p.expected_launches < p.cap


def test_plan_anytime_says_why_an_effect_on_a_threshold_has_no_cap():
    h = _seed()
    means = {**SEED_MEANS, 2: SEED_MEANS[0] * 1.03}  # baseline fusion ratio exactly at the 3% margin
    p = planning.plan_anytime(h, means=means, sd_launch_log=0.006, sd_request_log=CAL_SDR, requests=3, power=0.9,
                              sims=500)
    by = {r.prediction: r for r in p.rows}
    assert by["neutral_for_baseline"].note == planning.ON_THRESHOLD
    assert p.hypothesis_target is None and p.hypothesis_power is None
    assert p.cap is not None and p.cap >= by["helps_eagle3"].launches_per_condition


def test_the_anytime_default_cap_keeps_the_fixed_designs_power_and_is_recorded():
    cap = planning.anytime_cap(5, 2, 0.05)
    assert cap % 2 == 0 and cap > 5
    comp = planning.Comparison("p", "increase", (0,), (1.0,), (1.6449 + 1.2816) / math.sqrt(5), "up", 0.0, None,
                               "supported")
    curve = planning.simulate_anytime([comp], {0: 1.0}, alpha=0.05, comparisons=1, block=2, max_launches=cap)
    assert curve.hypothesis[-1] >= 0.9 > curve.hypothesis[-2]  # the smallest such cap (same seeded paths)
    d = effective_design(Design(launches=5, analysis="anytime", sequential={"enabled": True}), {})
    assert d.sequential.max_launches == cap
    welch = effective_design(Design(launches=5, sequential={"enabled": True}), {})
    assert welch.sequential.max_launches == 6  # the group-sequential cap, unchanged
    # audit recomputes from the recorded design: the looks follow from the recorded cap
    settings = {"alpha": 0.05, "method": "anytime", "design": d.model_dump(),
                "stopping": {"sequential": True, "looks": [{"look": 1}, {"look": 2}]}}
    assert audit.sequential_settings(settings)["max_looks"] == cap // 2


@pytest.mark.e2e
def test_plan_command_under_anytime(workdir):
    out = framework("plan", "hypothesis=eagle3_allreduce", "probe=false", "design.analysis=anytime", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    text = " ".join(out.stdout.split())
    assert "under design.analysis=anytime" in text and "a look after every block of 2" in text
    assert "whole hypothesis: cap" in text and "P(hypothesis supported) =" in text
    assert "launches per condition on average" in text and "±" in text
    assert "figures do not apply under design.analysis=anytime" in text
    assert "inflation factor" not in text  # the group-sequential line is not printed


def test_plan_anytime_plans_the_others_when_a_prediction_has_no_assumed_metric():
    h = _seed()
    p = planning.plan_anytime(h, means={0: 92.6, 1: 54.1, 3: 96.1}, sd_launch_log=0.006, sd_request_log=CAL_SDR,
                              requests=3, power=0.9, sims=500)
    by = {r.prediction: r for r in p.rows}
    assert "no assumed metric" in by["neutral_for_baseline"].note
    assert by["helps_eagle3"].launches_per_condition and p.cap == by["helps_eagle3"].launches_per_condition
    assert p.hypothesis_power is None and "lower bounds" in p.note


def test_plan_anytime_from_a_pilot_run():
    """The pilot's assumptions (pilot_assumptions, shared with the Welch plan) feed the anytime model too."""
    from stats_rows import simulate

    h = _seed()
    rows = simulate(h, SEED_MEANS, sd_request=CAL_SDR, seed=3)
    p = planning.plan_anytime(h, **planning.pilot_assumptions(h, rows), power=0.9, sims=500)
    assert p.cap and p.hypothesis_target == "supported" and p.hypothesis_power >= 0.9
    assert p.expected_wall_s > 0  # costs measured from the rows


@pytest.mark.parametrize("block,cap", [(1, 7), (2, 8)])
def test_plan_anytime_holds_launch_outcome_predictions_until_their_e_process_decides(block, cap):
    """cuda13_unblocks_fusion: three launch-outcome predictions, one condition each, rate 0.5: all as expected,
    each is supported at launches_to_support(0.5, 0.05) = 7 launches, so the cap and the stop are 7 in whole blocks."""
    data = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml").model_dump()
    data["design"].update(analysis="anytime")
    h = Hypothesis.model_validate(data)
    p = planning.plan_anytime(h, means={}, sd_launch_log=0.006, sd_request_log=0.004, power=0.9, block=block, sims=200)
    assert p.cap == cap and p.hypothesis_target == "supported" and p.hypothesis_power == 1.0
    assert p.expected_launches == cap and p.curve.hypothesis[p.curve.at(cap - 1)] == 0.0
    assert all(r.launches_per_condition == cap and "every launch has the expected outcome" in r.note for r in p.rows)


def test_plan_anytime_counts_launch_outcome_predictions_in_the_hypothesis_level_m(monkeypatch):
    """Under anytime they are tests (analysis._comparisons), so the refutation level is alpha / 5 here."""
    h = _seed(LAUNCH_PREDICTIONS)
    seen: dict = {}
    simulate = planning.simulate_anytime
    monkeypatch.setattr(planning, "simulate_anytime", lambda *a, **k: seen.update(k) or simulate(*a, **k))
    p = planning.plan_anytime(h, means=SEED_MEANS, sd_launch_log=0.006, sd_request_log=CAL_SDR, requests=3,
                              power=0.9, sims=500)
    by = {r.prediction: r for r in p.rows}
    assert by["eagle3_fused_starts"].launches_per_condition == 8 and p.cap >= 8 and p.expected_launches >= 8
    assert p.power_at_cap["eagle3_fused_starts"] == 1.0
    assert seen["comparisons"] == 5 and seen["launch_rules"] == {"eagle3_fused_starts": 7, "every_condition_starts": 2}


def test_the_anytime_default_cap_leaves_room_for_the_launch_outcome_predictions_to_be_decided():
    """A `rate: 0.9` claim needs launches_to_support(0.9, 0.05) launches all as expected; a default cap below
    that could never support it, whatever happened, so the default is raised to it (in whole blocks)."""
    from framework.stats.anytime import launches_to_support

    data = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml").model_dump()
    data["design"].update(analysis="anytime", launches=2, sequential={"enabled": True, "block": 2})
    for p in data["predictions"]:
        p["rate"] = 0.9
    h = Hypothesis.model_validate(data)
    need = launches_to_support(0.9, 0.05)
    floor = planning.anytime_launch_floor(h, 2, 0.05)
    assert floor == 2 * math.ceil(need / 2) and floor > planning.anytime_cap(2, 2, 0.05)
    assert effective_design(h.design, {}, h).sequential.max_launches == floor
    assert effective_design(h.design, {}).sequential.max_launches == planning.anytime_cap(2, 2, 0.05)  # no h: no floor
    assert planning.anytime_launch_floor(_seed(), 2, 0.05) == 0  # no launch-outcome prediction: no floor
