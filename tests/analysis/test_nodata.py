"""One rule for "no data" (rules version 2): a compared condition without one usable value names its cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from stats_rows import simulate

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze, sequential_look
from framework.core.spec import Hypothesis, load_hypothesis

ROOT = Path(__file__).resolve().parents[2]
SEED_MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}


@pytest.fixture(scope="module")
def eagle() -> Hypothesis:
    return load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")


def test_every_launch_failing_to_start_is_no_data_in_version_2_only(eagle):
    rows = simulate(eagle, SEED_MEANS, seed=4, failed={1: "ready_timeout: server not ready after 3 s"})
    old = analyze(eagle, rows, ruleset=RULESETS[1])
    new = analyze(eagle, rows)
    assert "no_data" not in old.details
    assert new.details["no_data"] == {"1": "condition fusion=off, decoding=eagle3 measured nothing: all 5 launch(es) "
                                           "failed to start ('ready_timeout: server not ready after 3 s')"}
    assert new.verdict == "inconclusive"
    by = {p.id: p for p in new.predictions}
    assert by["neutral_for_baseline"].verdict == "supported"  # it does not compare condition 1
    assert by["helps_eagle3"].reason.startswith("no data: condition fusion=off, decoding=eagle3")


def test_a_refutation_elsewhere_cannot_stand_beside_a_condition_without_data(eagle):
    # the interaction and helps_eagle3 both compare condition 3; a refuted neutral_for_baseline (a 20% effect)
    # refutes the hypothesis in version 1, and in version 2 the run claims nothing
    means = {**SEED_MEANS, 2: 92.6 * 1.2}
    rows = simulate(eagle, means, seed=5, failed={3: "No module named sglang"})
    assert analyze(eagle, rows, ruleset=RULESETS[1]).verdict == "refuted"
    assert analyze(eagle, rows).verdict == "inconclusive"


def test_a_metric_that_is_zero_in_every_launch_is_no_data():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    data = h.model_dump()
    data.update(metric="goodput", slo={"ttft_s": 1e-12})
    h = Hypothesis.model_validate(data)
    rows = simulate(h, SEED_MEANS, seed=6, metric="decode_tok_s")
    rows = [{**r, "ttft_s": 0.2, "tpot_s": 0.01, "e2e_s": 2.5, "output_tokens": 256} if r["kind"] == "request" else r
            for r in rows]
    a = analyze(h, rows)
    assert set(a.details["no_data"]) == {"0", "1", "2", "3"}
    assert "goodput is 0 or undefined in every launch under slo {'ttft_s': 1e-12}" in a.details["no_data"]["0"]
    assert "no_data" not in analyze(h, rows, ruleset=RULESETS[1]).details
    _, stop, reason = sequential_look(h, rows, look=1, max_looks=5)
    assert stop and "no data" in reason  # more launches of an SLO no request meets would only burn machine time


def test_a_condition_only_a_launch_prediction_is_about_may_fail_every_launch():
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")
    crash = "No supported CUDA architectures found for major versions [9, 10]"
    from framework.core.design import conditions, matching

    (fused_old,) = matching(conditions(h), {"stack": "cuda12_8", "fusion": "on"})
    rows = simulate(h, {c.index: 90.0 for c in conditions(h)}, launches=3, seed=7, failed={fused_old.index: crash})
    a = analyze(h, rows)
    assert "no_data" not in a.details and a.verdict == "supported"
