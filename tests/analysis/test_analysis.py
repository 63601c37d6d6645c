"""analyze / sequential_look end to end on simulated trial rows (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stats_rows import fail_launches, simulate, with_superseded_attempt

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import LOSS_LIMIT, TrialsConflict, analyze, sequential_look
from framework.core.spec import Hypothesis, load_hypothesis

ROOT = Path(__file__).resolve().parents[2]
SEED_MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}  # fusion off/on x baseline/eagle3, see conditions()
EAGLE_SD = {0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04}


@pytest.fixture(scope="module")
def eagle() -> Hypothesis:
    return load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")


def _with(h: Hypothesis, **design) -> Hypothesis:
    data = h.model_dump()
    data["design"].update(design)
    return Hypothesis.model_validate(data)


def test_seed_hypothesis_is_supported_with_the_seed_effects(eagle):
    a = analyze(eagle, simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=1))
    assert a.verdict == "supported"
    by = {p.id: p for p in a.predictions}
    assert by["neutral_for_baseline"].estimate == pytest.approx(1.001, abs=0.01)
    assert by["helps_eagle3"].estimate == pytest.approx(1.776, rel=0.03)
    lo, hi = by["neutral_for_baseline"].ci
    assert 0.97 < lo < hi < 1.03 and by["neutral_for_baseline"].p_value < 0.05
    assert "ratio of ratios" in by["helps_eagle3_more_than_baseline"].reason
    c = {c.index: c for c in a.conditions}
    assert c[3].launches == {"ok": 5, "failed": 0, "without_data": 0}
    assert c[3].metric.mean == pytest.approx(96.1, rel=0.03) and len(c[3].metric.launch_means) == 5
    assert c[3].variance["icc"] is not None and "optimal_requests" in c[3].variance
    v = a.details["variance"]
    assert v["pooled"]["var_within"] > 0 and v["recommended_requests_per_launch"] >= 1
    json.dumps(a.model_dump(mode="json"), allow_nan=False)  # strict JSON: no inf / nan anywhere


def test_false_prediction_is_refuted(eagle):
    data = eagle.model_dump()
    data["predictions"] = [{"id": "fusion_speeds_baseline", "kind": "increase", "factor": "fusion", "level": "on",
                            "where": {"decoding": "baseline"}, "min_effect": 0.10}]
    h = Hypothesis.model_validate(data)
    a = analyze(h, simulate(h, SEED_MEANS, sd_request=EAGLE_SD, seed=2))
    assert a.verdict == "refuted"
    assert "significantly smaller than required" in a.predictions[0].reason


def test_too_few_launches_is_inconclusive_not_an_error(eagle):
    a = analyze(eagle, simulate(eagle, SEED_MEANS, launches=1, sd_request=EAGLE_SD, seed=3))
    assert a.verdict == "inconclusive"
    assert all(p.verdict == "inconclusive" for p in a.predictions)
    assert "at least 2 are needed" in a.predictions[0].reason


def test_failed_condition_makes_its_comparisons_inconclusive(eagle):
    rows = simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=4, failed={3: "CUDA error: out of memory"})
    a = analyze(eagle, rows, ruleset=RULESETS[1])
    by = {p.id: p for p in a.predictions}
    assert by["neutral_for_baseline"].verdict == "supported"
    assert by["helps_eagle3"].verdict == "inconclusive" and "0 ok, 5 failed" in by["helps_eagle3"].reason
    assert a.conditions[3].failures == ["CUDA error: out of memory"]
    # rules version 2: a compared condition whose every launch failed to start is "no data", with the cause
    a2 = analyze(eagle, rows)
    by2 = {p.id: p for p in a2.predictions}
    assert by2["neutral_for_baseline"].verdict == "supported" and a2.verdict == "inconclusive"
    assert by2["helps_eagle3"].verdict == "inconclusive" and by2["helps_eagle3"].reason.startswith("no data: ")
    assert a2.details["no_data"] == {"3": "condition fusion=on, decoding=eagle3 measured nothing: all 5 launch(es) "
                                          "failed to start ('CUDA error: out of memory')"}
    assert "no_data" not in a.details


def test_launch_predictions_quote_the_crash_line():
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")
    crash = "No supported CUDA architectures found for major versions [9, 10]"
    # conditions: stack cuda12_8/cuda13 x fusion off/on -> index 1 is (cuda12_8, on)
    rows = simulate(h, {0: 92.6, 1: 92.7, 2: 92.6, 3: 92.7}, launches=2, requests=1, warmup=0,
                    failed={1: f"exit code 1: {crash}"}, seed=5)
    a = analyze(h, rows)
    assert a.verdict == "supported"
    assert crash in a.predictions[0].reason


def test_methods_agree_on_clear_cases_and_are_deterministic(eagle):
    rows = simulate(eagle, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=6)
    for method in ("rank", "bootstrap"):
        a, b = analyze(eagle, rows, method=method), analyze(eagle, rows, method=method)
        assert a.verdict == "supported" and a.model_dump() == b.model_dump()
        assert a.details["method"] == method


def test_ratios_are_scale_invariant(eagle):
    rows = simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=7)
    scaled = [dict(r, decode_tok_s=r["decode_tok_s"] * 3.7) if r["kind"] == "request" else r for r in rows]
    a, b = analyze(eagle, rows), analyze(eagle, scaled)
    for p, q in zip(a.predictions, b.predictions, strict=True):
        assert p.verdict == q.verdict
        assert p.estimate == pytest.approx(q.estimate, rel=1e-9)
        assert p.ci == pytest.approx(q.ci, rel=1e-9)


def test_slow_launch_is_flagged_and_its_influence_reported(eagle):
    rows = simulate(eagle, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=8, slow={"c2-r4-a1": 1 / 1.08})
    a = analyze(eagle, rows)
    flagged = a.conditions[2].outlier_launches
    assert "c2-r4-a1" in flagged
    p = a.predictions[0]
    assert "c2-r4-a1" in p.reason and set(flagged) <= set(p.details["sensitivity"]["without_launches"])
    assert p.details["sensitivity"]["verdict"] == "supported" and p.details["sensitivity"]["exploratory"]
    assert "would be" not in p.reason and "exploratory" in p.reason and "flagged for inspection only" in p.reason


def test_sequential_look_stops_when_everything_is_decided(eagle):
    rows = simulate(eagle, SEED_MEANS, launches=20, sd_request=EAGLE_SD, seed=9)
    seen = []
    for look in range(1, 11):
        n = 2 * look
        sub = [r for r in rows if int(r["launch_id"].split("-r")[1].split("-")[0]) < n]
        a, stop, reason = sequential_look(eagle, sub, look=look, max_looks=10)
        seen.append((look, stop))
        assert a.details["sequential"]["look"] == look and a.details["sequential"]["max_looks"] == 10
        assert a.details["sequential"]["nominal_one_sided_alpha"] < 0.05
        if stop:
            break
    assert stop and look < 10 and a.verdict == "supported"
    assert reason.startswith("every prediction decided at look")
    assert seen[0] == (1, False)  # O'Brien-Fleming spends almost nothing at the first look


def test_sequential_final_look_uses_the_remaining_alpha(eagle):
    rows = simulate(eagle, {0: 92.6, 1: 54.1, 2: 92.6 * 1.029, 3: 54.1 * 1.2}, sd_request=EAGLE_SD, seed=10)
    a, stop, reason = sequential_look(eagle, rows, look=3, max_looks=3)
    assert stop and reason.startswith("final look 3 of 3")
    assert a.details["sequential"]["final"] is True
    fixed = analyze(eagle, rows)
    assert a.details["sequential"]["nominal_one_sided_alpha"] < fixed.details["one_sided_alpha"]


def test_unbounded_rank_interval_is_inconclusive_and_strict_json(eagle):
    rows = simulate(eagle, SEED_MEANS, launches=2, sd_request=EAGLE_SD, seed=11)
    a = analyze(eagle, rows, method="rank")
    p = a.predictions[0]
    assert p.verdict == "inconclusive" and p.ci is None
    json.dumps(a.model_dump(mode="json"), allow_nan=False)


def test_a_launch_that_served_nothing_is_counted_and_left_out_of_the_metric():
    from framework.core.design import conditions

    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    cond = conditions(h)[0]
    rows = []
    for i, value in enumerate([92.0, 93.0, None]):
        lid = f"c0-r{i}-a1"
        rows.append({"kind": "launch", "launch_id": lid, "condition": 0, "levels": cond.levels, "ok": True})
        rows.append({"kind": "request", "launch_id": lid, "condition": 0, "levels": cond.levels, "warmup": False,
                     "ok": value is not None, "decode_tok_s": value, "error": None if value else "HTTP 500"})
    summary = analyze(h, rows).conditions[0]
    assert summary.launches == {"ok": 3, "failed": 0, "without_data": 1}
    assert summary.metric.launch_means == [92.0, 93.0]


# --------------------------------------------------------------------------- duplicates, resumes, losses


def test_duplicated_rows_count_each_launch_once(eagle):
    """A resume that wrote a run's launches into its file again must not double n (issue: p 0.083 -> 0.010)."""
    rows = simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=11)
    once = analyze(eagle, rows)
    twice = analyze(eagle, rows + [{**r, "reused_from": "run1"} for r in rows])
    assert [p.ci for p in twice.predictions] == [p.ci for p in once.predictions]
    assert [p.p_value for p in twice.predictions] == [p.p_value for p in once.predictions]
    assert [c.launches for c in twice.conditions] == [c.launches for c in once.conditions]
    assert twice.details["duplicates_dropped"] == {"launch": 20, "request": 80}


def test_conflicting_duplicates_are_refused_loudly(eagle):
    rows = simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=11)
    other = dict(next(r for r in rows if r["kind"] == "request" and not r["warmup"]))
    other["decode_tok_s"] *= 2
    with pytest.raises(TrialsConflict, match="conflicting rows for request .*decode_tok_s"):
        analyze(eagle, rows + [other])
    launch = {**next(r for r in rows if r["kind"] == "launch"), "ok": False}
    with pytest.raises(TrialsConflict, match="launch 'c0-r0-a1'"):
        analyze(eagle, rows + [launch])


def test_an_interrupted_attempt_left_in_the_file_is_set_aside_for_its_rerun(eagle):
    rows = simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=12)
    base = analyze(eagle, rows)
    a = analyze(eagle, with_superseded_attempt(rows))
    assert [p.ci for p in a.predictions] == [p.ci for p in base.predictions]
    assert a.details["superseded_attempts"] == ["c1-r0-a1"]



def test_a_condition_that_lost_most_launches_is_inconclusive_and_the_reason_says_why(eagle):
    """7 of 9 launches failed at start-up: the 2 survivors gave 'supported' (TOST p = 0.0003) before."""
    rows = fail_launches(simulate(eagle, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=13),
                 {f"c0-r{i}-a1" for i in range(7)})
    p = {p.id: p for p in analyze(eagle, rows).predictions}["neutral_for_baseline"]
    assert p.verdict == "inconclusive"
    assert "7 of 9 launches failed at start-up" in p.reason and "CUDA error: out of memory" in p.reason
    assert f"more than {LOSS_LIMIT:.0%} lost" in p.reason and "survivorship" in p.reason


def test_a_single_lost_launch_is_named_in_the_reason(eagle):
    rows = fail_launches(simulate(eagle, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=14), {"c3-r2-a1"})
    by = {p.id: p for p in analyze(eagle, rows).predictions}
    assert by["helps_eagle3"].verdict == "supported"
    for pid in ("helps_eagle3", "helps_eagle3_more_than_baseline"):
        assert "lost 1 of 9 launches failed at start-up" in by[pid].reason
        assert by[pid].details["losses"]
    assert "lost" not in by["neutral_for_baseline"].reason  # its conditions lost nothing


def test_censored_requests_over_the_limit_make_the_comparison_inconclusive(eagle):
    rows = simulate(eagle, SEED_MEANS, requests=4, sd_request=EAGLE_SD, seed=15)
    out = []
    for r in rows:  # half the measured requests of condition 2 fail
        if r["kind"] == "request" and r["condition"] == 2 and not r["warmup"] and r["index"] % 2:
            r = {k: v for k, v in r.items() if k != "decode_tok_s"} | {"ok": False, "error": "timeout"}
        out.append(r)
    p = {p.id: p for p in analyze(eagle, out).predictions}["neutral_for_baseline"]
    assert p.verdict == "inconclusive" and "10 of 20 measured requests failed (censored)" in p.reason


def test_zero_observed_spread_is_inconclusive_not_a_zero_width_interval(eagle):
    rows = simulate(eagle, SEED_MEANS, sd_launch=0.0, sd_request=0.0, seed=16)
    a = analyze(eagle, rows)
    assert a.verdict == "inconclusive"
    assert all(p.verdict == "inconclusive" and "zero observed spread" in p.reason for p in a.predictions)


# --------------------------------------------------------------------------- hypothesis-level error, seeds


def _rows_from_logs(h, logs_by_cond):
    rows = []
    for c, logs in logs_by_cond.items():
        for i, x in enumerate(logs):
            lid = f"c{c}-r{i}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c, "replicate": i, "attempt": 1, "ok": True})
            rows.append({"kind": "request", "trial_id": f"{lid}-q0", "launch_id": lid, "condition": c, "index": 0,
                         "warmup": False, "ok": True, h.metric: float(100 * 2.718281828459045 ** x)})
    return rows


def test_hypothesis_refutation_is_bonferroni_across_its_comparisons(eagle):
    """Two true predictions at their thresholds: P(any refuted) was 0.086 at alpha 0.05 (issue 16)."""
    from scipy import stats

    data = eagle.model_dump()
    inc = {"kind": "increase", "factor": "fusion", "level": "on", "where": {"decoding": "baseline"}, "min_effect": 0.1}
    data["predictions"] = [{"id": "a", **inc}, {"id": "b", **inc, "where": {"decoding": "eagle3"}}]
    h = Hypothesis.model_validate(data)
    noise = [0.0, 0.01, -0.01, 0.02, -0.02]
    se = (2 * sum(e * e for e in noise) / 4 / 5) ** 0.5  # Welch se of two groups with this spread, df 8
    import math

    theta = math.log(1.1)
    t_between = (stats.t.ppf(0.95, 8) + stats.t.ppf(0.975, 8)) / 2  # refuted at 0.05, not at 0.025
    shifted = [theta - t_between * se + e for e in noise]
    rows = _rows_from_logs(h, {0: noise, 1: noise, 2: shifted, 3: [theta + 0.5 + e for e in noise]})
    a = analyze(h, rows)
    by = {p.id: p for p in a.predictions}
    assert by["a"].verdict == "refuted" and by["b"].verdict == "supported"
    assert a.verdict == "inconclusive" and a.details["hypothesis_rule"]["refute_one_sided_alpha"] == 0.025
    assert "not at the hypothesis-level" in a.details["hypothesis_rule"]["note"]
    clear = _rows_from_logs(h, {0: noise, 1: noise, 2: [e - 0.2 for e in noise], 3: [theta + 0.5 + e for e in noise]})
    assert analyze(h, clear).verdict == "refuted"


def test_the_bootstrap_is_seeded_from_the_seed_the_run_used(eagle):
    h = _with(eagle, analysis="bootstrap")
    rows = simulate(h, SEED_MEANS, sd_request=EAGLE_SD, seed=17)
    one, two = analyze(h, rows, seed=1), analyze(h, rows, seed=2)
    assert one.predictions[0].ci != two.predictions[0].ci and one.details["seed"] == 1
    assert analyze(h, rows, seed=1).predictions[0].ci == one.predictions[0].ci
    assert analyze(h, rows).predictions[0].ci == analyze(h, rows, seed=h.design.seed).predictions[0].ci


def test_a_sequential_stop_records_a_repeated_p_value_no_smaller_than_the_nominal_one(eagle):
    from framework.stats.sequential import nominal_alpha

    rows = simulate(eagle, SEED_MEANS, launches=4, sd_request=EAGLE_SD, seed=18)
    a, stop, _ = sequential_look(eagle, rows, look=2, max_looks=5)
    assert stop
    for p in a.predictions:
        assert p.details["p_sequential"] >= p.p_value
        if p.p_value <= nominal_alpha(2, 5, 0.05):  # rejected at this look <=> repeated p <= alpha
            assert p.details["p_sequential"] <= 0.05 * 1.001


# --------------------------------------------------------------------------- anytime-valid analysis


def test_anytime_analysis_decides_the_seed_effects_and_reports_confidence_sequences(eagle):
    h = _with(eagle, analysis="anytime")
    a = analyze(h, simulate(h, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=1))
    assert a.verdict == "supported"
    for p in a.predictions:
        assert "confidence sequence" in p.reason and p.details["p_anytime"] == p.p_value
        assert p.details["blocks"] == 9
    few = analyze(h, simulate(h, SEED_MEANS, launches=3, sd_request=EAGLE_SD, seed=1))
    assert few.verdict == "inconclusive"  # an e-value of 3 blocks cannot reach 1/alpha = 20


def test_anytime_looks_use_the_full_alpha_at_every_look(eagle):
    h = _with(eagle, analysis="anytime")
    rows = simulate(h, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=2)
    a, stop, _ = sequential_look(h, rows, look=3, max_looks=5)
    fixed = analyze(h, rows)
    assert a.details["sequential"]["nominal_one_sided_alpha"] == 0.05
    assert [p.ci for p in a.predictions] == [p.ci for p in fixed.predictions]
    assert "p_sequential" not in a.predictions[0].details


def test_anytime_pairs_launches_by_block_and_drops_incomplete_blocks(eagle):
    h = _with(eagle, analysis="anytime")
    rows = fail_launches(simulate(h, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=3), {"c1-r4-a1"})
    by = {p.id: p for p in analyze(h, rows).predictions}
    assert by["helps_eagle3"].details["blocks"] == 8 and "4" not in by["helps_eagle3"].details["block_ids"]
    assert by["neutral_for_baseline"].details["blocks"] == 9


def test_a_sequential_run_stops_at_the_first_look_where_a_condition_measured_nothing(eagle):
    # its verdicts can only be "no data" (framework.core.evidence): more launches would only burn machine time
    rows = [r for r in simulate(eagle, SEED_MEANS, launches=2, sd_request=EAGLE_SD, seed=19)
            if not (r["kind"] == "request" and r["condition"] == 0)]
    a, stop, reason = sequential_look(eagle, rows, look=1, max_looks=9)
    assert stop and "no data" in reason and a.verdict == "inconclusive"
    full = simulate(eagle, SEED_MEANS, launches=2, sd_request=EAGLE_SD, seed=19)
    assert not sequential_look(eagle, full, look=1, max_looks=9)[1]  # the same look with data goes on


def test_anytime_tests_launch_outcomes_at_their_claimed_rate_and_they_share_the_refutation_alpha():
    """cuda13_unblocks_fusion under anytime: 2 launches each cannot support 'more often than not' (7 are needed);
    the count rule says supported. A 'starts' prediction whose launches all failed is refuted at alpha, but the
    hypothesis only at alpha / 3, since its three launch predictions are now tests."""
    crash = "No supported CUDA architectures found for major versions [9, 10]"
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")  # conditions: stack x fusion
    ha = _with(h, analysis="anytime")
    means = {c: 90.0 for c in range(4)}
    two = simulate(h, means, launches=2, failed={1: crash}, seed=1)
    assert analyze(h, two).verdict == "supported" and analyze(ha, two).verdict == "inconclusive"
    a = analyze(ha, simulate(ha, means, launches=7, failed={1: crash}, seed=1))
    assert a.verdict == "supported"
    for p in a.predictions:
        assert p.details["p_anytime"] == p.p_value <= 0.05 and p.ci[0] > 0.5 and "7/7 launches" in p.reason
    both = analyze(ha, simulate(ha, means, launches=7, failed={1: crash, 3: crash}, seed=1))
    by = {p.id: p for p in both.predictions}
    assert by["fused_starts_on_cuda13"].verdict == "refuted" and crash in by["fused_starts_on_cuda13"].reason
    rule = both.details["hypothesis_rule"]
    assert both.verdict == "inconclusive" and rule["comparisons"] == 3 and "alpha / 3 comparisons" in rule["note"]
    nine = analyze(ha, simulate(ha, means, launches=9, failed={1: crash, 3: crash}, seed=1))
    assert nine.verdict == "refuted" and nine.details["hypothesis_rule"]["refuted_by"] == ["fused_starts_on_cuda13"]
