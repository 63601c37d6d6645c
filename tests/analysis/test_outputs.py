"""The `outputs` prediction kind decided from trial rows: pairing by prompt, the verdict rule, the record."""

from __future__ import annotations

from typing import Any

import pytest

from framework.analysis import outputs
from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.spec import Hypothesis
from framework.execution.client.capture import prompt_digest


def hypothesis(min_agreement: float = 1.0, extra: list[dict] | None = None) -> Hypothesis:
    return Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e",
        "factors": {"spec": {"reference": "off", "levels": {"off": {}, "on": {}}}},
        "predictions": [{"id": "same", "kind": "outputs", "factor": "spec", "level": "on",
                         "min_agreement": min_agreement}, *(extra or [])],
        "design": {"launches": 3, "requests": 4, "seed": 1}})


def rows(generated: dict[tuple[int, int], list[list[int]]], prompts: int = 4,
         order: dict[tuple[int, int], list[int]] | None = None) -> list[dict[str, Any]]:
    """Launch and request rows: `generated[(condition, block)]` is each request's ids, request i sent prompt i
    (or `order[(condition, block)][i]`); decode rates vary so that a metric comparison has spread."""
    out: list[dict[str, Any]] = []
    for (cond, block), outs in generated.items():
        lid = f"c{cond}-r{block}-a1"
        out.append({"kind": "launch", "launch_id": lid, "condition": cond, "levels": {"spec": ["off", "on"][cond]},
                    "replicate": block, "block": block, "attempt": 1, "ok": True})
        for i, ids in enumerate(outs):
            p = (order or {}).get((cond, block), list(range(prompts)))[i]
            out.append({"kind": "request", "trial_id": f"{lid}-q{i}", "launch_id": lid, "condition": cond,
                        "index": i, "warmup": False, "phase": "measured", "ok": True, "completion_tokens": len(ids),
                        "decode_tok_s": 100.0 + cond + block + 0.1 * i,
                        "output": {"prompt_sha256": prompt_digest(f"prompt {p}"), "ids": ids, "tokens": len(ids),
                                   "truncated": False}})
    return out


SAME = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]


def all_blocks(on: dict[int, list[list[int]]] | None = None) -> dict[tuple[int, int], list[list[int]]]:
    gen = {(0, b): SAME for b in range(3)}
    gen.update({(1, b): (on or {}).get(b, SAME) for b in range(3)})
    return gen


def prediction(analysis: Any, pid: str = "same") -> Any:
    return next(p for p in analysis.predictions if p.id == pid)


def test_identical_outputs_support_the_claim_and_the_record_says_what_n_guarantees():
    p = prediction(analyze(hypothesis(), rows(all_blocks())))
    assert p.verdict == "supported" and p.estimate == 1.0
    d = p.details
    assert d["compared"] == 12 and d["identical"] == 12 and d["blocks"] == 3 and d["compares"] == ["ids"]
    assert d["differed"] == [] and d["unpaired"] == 0
    assert "0.95 needs 59 identical requests" in p.reason and f"{0.05 ** (1 / 12):.3f}" in p.reason


def test_one_difference_refutes_one_and_names_the_request_and_the_first_differing_position():
    changed = [[1, 2, 3], [4, 5], [6, 7, 0, 9], [10]]
    a = analyze(hypothesis(), rows(all_blocks({2: changed})))
    p = prediction(a)
    assert p.verdict == "refuted" and a.verdict == "refuted"
    assert p.details["differed_count"] == 1
    assert p.details["differed"] == [{"block": 2, "index": 2, "reference_index": 2, "launch": "c1-r2-a1",
                                      "reference_launch": "c0-r2-a1", "first_difference": 2, "compared": "ids",
                                      "length": 4, "reference_length": 4}]
    assert "first difference: block 2, request 2, at position 2" in p.reason


def test_an_output_that_only_runs_longer_differs_where_the_shorter_one_ended():
    longer = [[1, 2, 3, 11], [4, 5], [6, 7, 8, 9], [10]]
    p = prediction(analyze(hypothesis(), rows(all_blocks({0: longer}))))
    assert p.verdict == "refuted" and p.details["differed"][0]["first_difference"] == 3


def test_requests_pair_on_their_prompt_not_their_position():
    # the level's launch sent the same four prompts in another order (a closed loop of several streams)
    shuffled = [SAME[3], SAME[0], SAME[2], SAME[1]]
    gen = all_blocks({1: shuffled})
    p = prediction(analyze(hypothesis(), rows(gen, order={(1, 1): [3, 0, 2, 1]})))
    assert p.verdict == "supported" and p.details["compared"] == 12 and p.details["unpaired"] == 0


def test_a_bound_below_one_is_decided_on_the_clustered_bounds():
    half = [[1, 2, 3], [0], [6, 7, 8, 9], [0]]  # 2 of 4 identical in every block: agreement 0.5
    gen = all_blocks({0: half, 1: half, 2: half})
    assert prediction(analyze(hypothesis(0.9), rows(gen))).verdict == "refuted"  # upper bound < 0.9
    assert prediction(analyze(hypothesis(0.4), rows(gen))).verdict == "inconclusive"  # 12 requests: too few
    p = prediction(analyze(hypothesis(0.9), rows(all_blocks())))
    assert p.verdict == "inconclusive" and "straddle" in p.reason  # 12 identical cannot bound it above 0.9


def test_no_paired_requests_is_no_verdict():
    gen = all_blocks()
    lone = [r for r in rows(gen) if not (r["kind"] == "request" and r["condition"] == 0)]
    p = prediction(analyze(hypothesis(), lone))
    assert p.verdict == "inconclusive" and p.reason.startswith("no paired requests")
    assert p.details["unpaired"] == 12


def test_failed_requests_and_mixed_captures_are_counted_not_compared():
    r = rows(all_blocks())
    req = [x for x in r if x["kind"] == "request" and x["condition"] == 1]
    req[0]["ok"] = False
    req[1]["output"] = {**{k: v for k, v in req[1]["output"].items() if k != "ids"}, "text": "abc"}
    p = prediction(analyze(hypothesis(), r))
    assert p.details["failed"] == 1 and p.details["mixed_kinds"] == 1 and p.details["compared"] == 10


def test_before_rules_version_5_an_outputs_prediction_has_no_rule():
    p = prediction(analyze(hypothesis(), rows(all_blocks()), ruleset=RULESETS[4]))
    assert p.verdict == "inconclusive" and p.reason == outputs.NEEDS_V5


def test_the_switch_changes_nothing_for_a_hypothesis_without_an_outputs_prediction():
    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e",
        "factors": {"spec": {"reference": "off", "levels": {"off": {}, "on": {}}}},
        "predictions": [{"id": "up", "kind": "increase", "factor": "spec", "level": "on"}],
        "design": {"launches": 3, "requests": 4, "seed": 1}})
    r = rows(all_blocks())
    v4, v5 = analyze(h, r, ruleset=RULESETS[4]), analyze(h, r, ruleset=RULESETS[5])
    assert v4.model_dump() == v5.model_dump()


def test_an_outputs_prediction_is_one_of_the_m_tests_of_the_refutation_rule():
    extra = [{"id": "up", "kind": "increase", "factor": "spec", "level": "on"}]
    a = analyze(hypothesis(extra=extra), rows(all_blocks({1: [[9], [4, 5], [6, 7, 8, 9], [10]]})))
    rule = a.details["hypothesis_rule"]
    assert rule["comparisons"] == 2 and "same" in rule["refuted_by"]


@pytest.mark.parametrize("a,b,at", [([1, 2], [1, 2], None), ([1, 2], [1, 3], 1), ([1], [1, 2], 1),
                                     ("abc", "abd", 2), ("", "x", 0)])
def test_first_difference(a, b, at):
    assert outputs.first_difference(a, b) == at


def test_plan_sizes_an_outputs_prediction_by_its_pairs_and_keeps_the_hypothesis_plannable():
    from framework.analysis import planning
    from framework.stats.agreement import agreement

    extra = [{"id": "up", "kind": "increase", "factor": "spec", "level": "on", "min_effect": 0.1}]
    rows_ = planning.plan(hypothesis(extra=extra), means={0: 100.0, 1: 130.0}, sd_launch_log=0.05,
                          sd_request_log=0.05)
    same = next(r for r in rows_ if r.prediction == "same")
    assert same.launches_per_condition == 1 and planning.launches_for_hypothesis(rows_) is not None
    loose = planning.plan(hypothesis(0.9), means={0: 1.0, 1: 1.0}, sd_launch_log=0.05, sd_request_log=0.05,
                          requests=10)[0]
    m = loose.launches_per_condition
    assert agreement([10] * m, [10] * m, 0.05).lower >= 0.9 > agreement([10] * (m - 1), [10] * (m - 1), 0.05).lower
