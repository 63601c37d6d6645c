"""No verdict without data: a condition that measured nothing caps every verdict that touches it."""

from __future__ import annotations

from cli_helpers import ROOT
from stats_rows import simulate

from framework.analysis.verdicts import analyze
from framework.core.design import conditions
from framework.core.evidence import empty_conditions
from framework.core.spec import load_hypothesis

SEED_MEANS = {0: 92.6, 1: 92.7, 2: 140.0, 3: 160.0}


def _served_nothing(rows: list[dict], cond: int, error: str = "HTTP 401: unauthorized") -> list[dict]:
    """Every measured request of `cond` failed although its launches started."""
    failed = {"ok": False, "error": error, "decode_tok_s": None}
    return [{**r, **failed} if r["kind"] == "request" and r["condition"] == cond else r for r in rows]


def test_a_condition_that_served_nothing_makes_the_run_inconclusive_never_refuted():
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")
    rows = simulate(h, {0: 92.6, 1: 92.7, 2: 92.6, 3: 92.7}, launches=2, requests=1, warmup=0, seed=5)
    # the unfused CUDA 12.8 server (condition 0) "started" but no request came back: a wrong key, a dead network
    a = analyze(h, _served_nothing(rows, 0))
    by = {p.id: p for p in a.predictions}
    assert by["unfused_starts_on_cuda12_8"].verdict == "inconclusive"  # was refuted: "0/2 launches started"
    assert "measured nothing" in by["unfused_starts_on_cuda12_8"].reason
    assert "HTTP 401" in by["unfused_starts_on_cuda12_8"].reason
    assert a.verdict == "inconclusive"
    assert a.details["no_data"] == {"0": by["unfused_starts_on_cuda12_8"].reason.removeprefix("no data: ")}


def test_an_unreachable_endpoint_is_no_evidence_of_a_failed_start():
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")
    rows = simulate(h, {0: 92.6, 1: 92.7, 2: 92.6, 3: 92.7}, launches=2, requests=1, warmup=0, seed=5,
                    failed={1: "http://127.0.0.1:9 unreachable: Connection refused"})
    for r in rows:
        if r["kind"] == "launch" and r["condition"] == 1:
            r["reachable"] = False
    a = analyze(h, rows)
    crash = next(p for p in a.predictions if p.id == "fused_crashes_on_cuda12_8")
    assert crash.verdict == "inconclusive" and "never reachable" in crash.reason
    assert a.verdict == "inconclusive"


def test_start_up_failures_are_evidence_and_keep_their_verdict():
    h = load_hypothesis(ROOT / "hypotheses" / "cuda13_unblocks_fusion.yaml")
    crash = "No supported CUDA architectures found for major versions [9, 10]"
    rows = simulate(h, {0: 92.6, 1: 92.7, 2: 92.6, 3: 92.7}, launches=2, requests=1, warmup=0, seed=5,
                    failed={1: crash})
    assert empty_conditions(conditions(h), rows) == {}
    assert analyze(h, rows).verdict == "supported"


def test_comparisons_with_an_empty_condition_are_inconclusive_and_the_others_keep_theirs():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    rows = _served_nothing(simulate(h, SEED_MEANS, sd_request={0: 0.004, 1: 0.004, 2: 0.03, 3: 0.03}, seed=4), 3)
    a = analyze(h, rows)
    by = {p.id: p for p in a.predictions}
    assert by["helps_eagle3"].reason.startswith("no data: ") and by["helps_eagle3"].verdict == "inconclusive"
    assert not by["neutral_for_baseline"].reason.startswith("no data")
    assert a.verdict == "inconclusive" and set(a.details["no_data"]) == {"3"}


def test_a_condition_without_any_launch_measured_nothing():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    rows = [r for r in simulate(h, SEED_MEANS, seed=1) if r["condition"] != 2]
    assert "no launch was made" in empty_conditions(conditions(h), rows)[2]
