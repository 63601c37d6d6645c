"""What a condition lost under rules version 2, and version 1 unchanged beside it.

- an ok request whose decode could not be measured (every token in one chunk) counts toward its
  condition's loss, with its reason; more than 20% lost: no verdict from the survivors;
- a launch whose `launch_end` row says it did not serve its workload (it crashed, cut streams, hung
  up) is a failed launch: for the loss rule and for `launches` predictions alike;
- a launch's decode rate is the ratio of its requests' totals, which one burst cannot dominate.
"""

from __future__ import annotations

from pathlib import Path

from stats_rows import simulate

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.spec import Hypothesis, load_hypothesis

ROOT = Path(__file__).resolve().parents[2]
MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}
V1, V2 = RULESETS[1], RULESETS[2]


def _eagle(**changes) -> Hypothesis:
    data = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml").model_dump()
    data.update(changes)
    return Hypothesis.model_validate(data)


def _rows(h: Hypothesis, **kw) -> list[dict]:
    return simulate(h, MEANS, launches=5, requests=4, seed=11, **kw)


def _unmeasure(rows: list[dict], condition: int, n: int) -> list[dict]:
    """The first n measured requests of `condition` arrived as one chunk: ok, no decode figure, and why."""
    out, left = [], n
    for r in rows:
        if left and r["kind"] == "request" and r["condition"] == condition and not r["warmup"]:
            r = {**r, "decode_tok_s": None, "decode_unmeasured": "one_chunk"}
            left -= 1
        out.append(r)
    return out


def _neutral(analysis):
    return next(p for p in analysis.predictions if p.id == "neutral_for_baseline")


def test_unmeasured_requests_over_the_limit_leave_no_verdict_and_are_named():
    h = _eagle()
    rows = _unmeasure(_rows(h), condition=0, n=6)  # 6 of 20 measured requests: 30%
    v2 = analyze(h, rows, ruleset=V2)
    p = _neutral(v2)
    assert p.verdict == "inconclusive" and "survivorship" in p.reason, p.reason
    assert "6 of 20 measured requests ok but not measured (6 one_chunk: every token arrived in one chunk" in p.reason
    loss = v2.details["losses"]["0"]
    assert (loss["unmeasured"], loss["unmeasured_why"], loss["requests_lost"]) == (6, {"one_chunk": 6}, 6)
    assert loss["requests_lost_share"] == 0.3
    # version 1 dropped them silently: the same verdict as if they had never been sent
    silent = [r for r in rows if r.get("decode_unmeasured") is None]
    v1 = analyze(h, rows, ruleset=V1)
    assert _neutral(v1).verdict == _neutral(analyze(h, silent, ruleset=V1)).verdict == "supported"
    assert "losses" not in v1.details


def test_unmeasured_requests_within_the_limit_are_stated_beside_the_verdict():
    h = _eagle()
    p = _neutral(analyze(h, _unmeasure(_rows(h), condition=0, n=2), ruleset=V2))  # 10%
    assert p.verdict == "supported" and "2 of 20 measured requests ok but not measured" in p.reason
    assert p.details["losses"]["fusion=off, decoding=baseline"]["unmeasured"] == 2


def test_a_metric_the_merge_does_not_break_loses_nothing():
    h = _eagle(metric="e2e_s")
    rows = _unmeasure(_rows(h, metric="e2e_s"), condition=0, n=6)
    assert analyze(h, rows, ruleset=V2).details["losses"]["0"]["unmeasured"] == 0


def _ended(rows: list[dict], launch_ids: set[str], error: str) -> list[dict]:
    ends = [{"kind": "launch_end", "launch_id": r["launch_id"], "condition": r["condition"], "levels": r["levels"],
             "ok": r["launch_id"] not in launch_ids, "crashed": r["launch_id"] in launch_ids,
             "failure_class": "crash_after_ready" if r["launch_id"] in launch_ids else None,
             "error": error if r["launch_id"] in launch_ids else None, "finished": "t"}
            for r in rows if r["kind"] == "launch"]
    return rows + ends


def test_a_launch_that_died_while_measured_is_a_failed_launch():
    h = _eagle(predictions=[{"id": "starts", "kind": "launches", "where": {"fusion": "on"}, "expect": "starts"},
                            {"id": "neutral_for_baseline", "kind": "equivalent", "factor": "fusion", "level": "on",
                             "margin": 0.02, "where": {"decoding": "baseline"}}])
    error = "crash_after_ready: server exited with code -9 while being measured: ended by SIGKILL"
    rows = _ended(_rows(h), {"c2-r0-a1", "c2-r1-a1"}, error)  # fusion=on, decoding=baseline: 2 of 5
    v2 = analyze(h, rows, ruleset=V2)
    starts, neutral = v2.predictions
    assert starts.verdict == "inconclusive" and "SIGKILL" in starts.reason
    assert "10/10 launches started, 8 served their workload; 2 failed after they served 5 and 5 requests" \
        in starts.reason  # they started: not "8/10 launches started" (issue 33)
    assert neutral.verdict == "inconclusive" and "2 of 5 launches failed while measured" in neutral.reason
    cond = next(c for c in v2.conditions if c.index == 2)
    assert cond.launches == {"ok": 3, "failed": 2, "without_data": 0} and error in cond.failures
    assert v2.details["losses"]["2"]["failed_while_measured"] == 2
    assert set(cond.metric.launch_ids) == {"c2-r2-a1", "c2-r3-a1", "c2-r4-a1"}  # no survivor's data from the dead
    v1 = analyze(h, rows, ruleset=V1)  # version 1 read only the launch rows: every launch ok
    assert [p.verdict for p in v1.predictions] == ["supported", "supported"]
    assert next(c for c in v1.conditions if c.index == 2).launches["failed"] == 0


def _timed(rows: list[dict], burst: str | None = None) -> list[dict]:
    """Rows with their decode parts (255 tokens over 255 / rate seconds); `burst`: that request's tokens
    after the first chunk arrived all but at once (a burst read: 255 tokens in 1 ms)."""
    out = []
    for r in rows:
        if r["kind"] == "request":
            r = {**r, "completion_tokens": 256, "decode_tokens": 255, "decode_s": 255 / r["decode_tok_s"]}
            if r["trial_id"] == burst:
                r.update(decode_s=0.001, decode_tok_s=255 / 0.001)
        out.append(r)
    return out


def test_one_burst_cannot_dominate_a_launchs_decode_rate():
    h = _eagle()
    clean = _timed(_rows(h))
    burst = _timed(_rows(h), burst="c0-r0-a1-q1")

    def launch0(rows, rules):
        m = next(c for c in analyze(h, rows, ruleset=rules).conditions if c.index == 0).metric
        return m.launch_means[m.launch_ids.index("c0-r0-a1")]

    assert launch0(burst, V1) > 100 * launch0(clean, V1)  # the mean of rates: one request's 255000 tok/s
    assert launch0(burst, V2) < 1.5 * launch0(clean, V2)  # the ratio of totals: 255 tokens more, 1 ms more
    # without bursts the ratio is the harmonic mean of the rates (equal tokens), close to their mean
    assert abs(launch0(clean, V2) / launch0(clean, V1) - 1) < 1e-3


def _refuse(rows: list[dict], condition: int, n: int) -> list[dict]:
    """The first n measured requests of `condition` found nothing listening: failed, class connection_refused."""
    out, left = [], n
    for r in rows:
        if left and r["kind"] == "request" and r["condition"] == condition and not r["warmup"]:
            r = {**r, "ok": False, "error_class": "connection_refused", "decode_tok_s": None,
                 "error": "connection refused: ClientConnectorError: Cannot connect to host 127.0.0.1:9"}
            left -= 1
        out.append(r)
    return out


def test_rules_v4_say_why_requests_failed_a_dead_server_is_gone_not_cutting_streams():
    """Issue 31: the loss rule's reason names the censored requests' classes (RuleSet.loss_causes); the verdict
    is the same as under version 3."""
    h = _eagle()
    rows = _refuse(_rows(h), condition=0, n=6)
    v3, v4 = analyze(h, rows, ruleset=RULESETS[3]), analyze(h, rows, ruleset=RULESETS[4])
    p3, p4 = _neutral(v3), _neutral(v4)
    assert p3.verdict == p4.verdict == "inconclusive" and "survivorship" in p4.reason
    assert "6 of 20 measured requests failed (censored: 6 connection_refused: connection refused: the server " \
           "was gone, not cutting streams)" in p4.reason, p4.reason
    assert "connection refused" not in p3.reason
    assert v4.details["losses"]["0"]["censored_why"] == {"connection_refused": 6}
    assert "censored_why" not in v3.details["losses"]["0"] and "censored_why" not in v4.details["losses"]["1"]
    for a, b in zip(v3.predictions, v4.predictions, strict=True):
        assert (a.verdict, a.estimate, a.ci) == (b.verdict, b.estimate, b.ci)
