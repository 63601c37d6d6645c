"""A launch that served requests and then crashed (its launch_end row says ok: false) is reported as having
failed after it served N requests, not as a launch that did not start (issue 33)."""

from __future__ import annotations

from stats_rows import simulate

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.spec import Hypothesis


def test_crashed_after_serving_is_said_so():
    h = Hypothesis.model_validate({
        "name": "w", "statement": "it starts", "experiment": "none",
        "factors": {"x": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "starts", "kind": "launches", "where": {"x": "b"}, "expect": "starts"}],
        "design": {"launches": 3, "requests": 3, "warmup": 1}})
    rows = simulate(h, {0: 100.0, 1: 100.0}, launches=3)
    b = sorted({r["launch_id"] for r in rows if r["kind"] == "launch" and r["condition"] == 1})
    rows += [{"kind": "launch_end", "launch_id": lid, "condition": 1, "levels": {"x": "b"}, "ok": False,
              "crashed": True, "exit_code": 1, "failure_class": "crash_after_ready", "failure_line": "boom",
              "error": "crash_after_ready: server exited with code 1 while being measured: boom",
              "finished": ""} for lid in b]
    p = analyze(h, rows, ruleset=RULESETS[4]).predictions[0]
    assert p.verdict == "refuted"
    assert "0/3 launches started" not in p.reason
    assert "3/3 launches started, 0 served their workload; 3 failed after they served 4, 4 and 4 requests" in p.reason
