"""Every fault the sim can inject, end to end through `python -m framework run` and real sim processes.

One run covers them all: a hypothesis whose factor `fault` has one level per fault (the level's
server flags turn it on), one launch each. Each test below then checks one fault's record; the
common checks hold for the whole run: no server outlives it, every hang ended at its configured
bound, nothing is missing from `trials.jsonl` (audit recomputes the verdict from it), no hidden
retries, and no prediction claims more than its data show.

The group takes about 40 s on two cores (most of it the two hangs waiting out their time-outs), so
it carries the `faults` marker: `.ci/run` runs it after the default suite (`pytest -m faults`).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

pytestmark = pytest.mark.faults

READY_TIMEOUT_S = 12   # backend.ready_timeout_s: bounds hang_before_ready (sims here start in ~1 s)
REQUEST_TIMEOUT_S = 3  # the hang_mid_stream level's workload.request_timeout_s
SLOW_START_S = 1.0

HYPOTHESIS = f"""\
name: faults
statement: Each injected fault is recorded as what it is, and nothing is claimed without data.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
factors:
  fault:
    reference: none
    levels:
      none: {{}}
      crash_at_start: {{server_args: [--sim-fault-crash-at-start, "3"]}}
      crash_after: {{server_args: [--sim-fault-crash-after-requests, "1"]}}
      hang_before_ready: {{server_args: [--sim-fault-hang-before-ready]}}
      slow_start: {{server_args: [--sim-fault-slow-start-s, "{SLOW_START_S}"]}}
      hang_mid_stream: {{server_args: [--sim-fault-hang-mid-stream, "3"],
                        workload: {{request_timeout_s: {REQUEST_TIMEOUT_S}}}}}
      cut_stream: {{server_args: [--sim-fault-cut-stream, "3"]}}
      malformed_sse: {{server_args: [--sim-fault-malformed-sse, "3"]}}
      http_500: {{server_args: [--sim-fault-http-500]}}
      health_lies: {{server_args: [--sim-fault-health-lies]}}
predictions:
  - {{id: clean_starts, kind: launches, where: {{fault: none}}, expect: starts}}
  - {{id: crash_at_start_fails, kind: launches, where: {{fault: crash_at_start}}, expect: fails,
     match: "fault injected: crash at start"}}
  - {{id: hang_before_ready_fails, kind: launches, where: {{fault: hang_before_ready}}, expect: fails,
     match: "not ready after"}}
  - {{id: health_lies_starts, kind: launches, where: {{fault: health_lies}}, expect: starts}}
  - {{id: same_speed_http_500, kind: equivalent, factor: fault, level: http_500, margin: 0.5}}
  - {{id: same_speed_cut_stream, kind: equivalent, factor: fault, level: cut_stream, margin: 0.5}}
  - {{id: same_speed_malformed_sse, kind: equivalent, factor: fault, level: malformed_sse, margin: 0.5}}
  - {{id: same_speed_hang_mid_stream, kind: equivalent, factor: fault, level: hang_mid_stream, margin: 0.5}}
  - {{id: same_speed_crash_after, kind: equivalent, factor: fault, level: crash_after, margin: 0.5}}
design: {{launches: 1, requests: 2, warmup: 0, seed: 15}}
"""
NO_DATA = ("hang_mid_stream", "cut_stream", "malformed_sse", "http_500", "health_lies")


class Run:
    def __init__(self, workdir: Path, out) -> None:
        self.workdir, self.out = workdir, out
        self.record = ledger_records(workdir / "verdicts.jsonl")[-1]
        self.run_dir = Path(self.record["run_dir"])
        lines = (self.run_dir / "trials.jsonl").read_text().splitlines()
        self.rows = [json.loads(line) for line in lines]  # every line is whole JSON

    def launch(self, fault: str) -> dict:
        (row,) = [r for r in self.rows if r["kind"] == "launch" and r["levels"] == {"fault": fault}]
        return row

    def requests(self, fault: str) -> list[dict]:
        return [r for r in self.rows if r["kind"] == "request" and r["levels"] == {"fault": fault}]

    def prediction(self, pid: str) -> dict:
        return next(p for p in self.record["predictions"] if p["id"] == pid)

    def log(self, fault: str) -> str:
        return (self.run_dir / "logs" / f"{self.launch(fault)['launch_id']}.log").read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    workdir = tmp_path_factory.mktemp("faults")
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "faults.yaml").write_text(HYPOTHESIS)
    out = framework("run", "hypothesis=faults", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={ROOT / 'experiments'}", "backend.speedup=20",
                    f"backend.ready_timeout_s={READY_TIMEOUT_S}", 'backend.extra_args=[--sim-startup-s,"0"]',
                    cwd=workdir)
    return Run(workdir, out)


def _seconds(row: dict) -> float:
    return (datetime.fromisoformat(row["finished"].replace("Z", "+00:00"))
            - datetime.fromisoformat(row["started"].replace("Z", "+00:00"))).total_seconds()


# --------------------------------------------------------------------------- the whole run


def test_the_run_ends_with_no_data_exit_and_no_orphan(run):
    assert run.out.returncode == 3, run.out.stderr[-3000:]  # a condition measured nothing (framework.core.evidence)
    assert "Traceback" not in run.out.stderr and "error: no data:" in run.out.stderr
    assert no_servers_left(run.workdir), "a faulty server outlived its run"


def test_nothing_lost_from_the_trials_and_no_hidden_retries(run):
    launches = [r for r in run.rows if r["kind"] == "launch"]
    assert sorted(r["levels"]["fault"] for r in launches) == sorted(
        ["none", "crash_at_start", "crash_after", "hang_before_ready", "slow_start", *NO_DATA])
    assert all(r["attempt"] == 1 for r in launches)
    for r in launches:  # every started launch kept every request it sent, failed ones included
        sent = [q for q in run.rows if q["kind"] == "request" and q["launch_id"] == r["launch_id"]]
        assert len(sent) == (2 if r["ok"] else 0), r["launch_id"]
        assert all(q["ok"] or (q["error"] and q["error_class"]) for q in sent)
    audit = framework("audit", cwd=run.workdir)  # the recorded verdict recomputed from trials.jsonl
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]


def test_no_verdict_claims_what_the_data_cannot_show(run):
    assert run.record["verdict"] == "inconclusive"
    for fault in NO_DATA:
        pid = "health_lies_starts" if fault == "health_lies" else f"same_speed_{fault}"
        p = run.prediction(pid)
        assert p["verdict"] == "inconclusive" and p["reason"].startswith("no data:"), p
        assert f"fault={fault} measured nothing" in p["reason"]
    # one measured request is not enough to compare: inconclusive, never a claim
    assert run.prediction("same_speed_crash_after")["verdict"] == "inconclusive"
    for pid in ("clean_starts", "crash_at_start_fails", "hang_before_ready_fails"):
        assert run.prediction(pid)["verdict"] == "supported", run.prediction(pid)


# --------------------------------------------------------------------------- one test per fault


def test_crash_at_start(run):
    row = run.launch("crash_at_start")
    assert not row["ok"] and row["exit_code"] == 3
    # no known failure pattern in the log: the class says so, and the line is the fault's own
    assert row["failure_class"] == "exited" and "fault injected: crash at start" in row["failure_line"], row


def test_crash_after_requests(run):
    first, second = sorted(run.requests("crash_after"), key=lambda r: r["index"])
    assert first["ok"] and first["completion_tokens"] > 0  # the data before the crash are kept
    # the kept-alive connection dropped, or (a new one) refused: the server is gone either way
    assert not second["ok"] and second["error_class"] in ("connection", "connection_refused"), second["error"]
    crashed = run.launch("crash_after")["launch_id"]
    (end,) = [r for r in run.rows if r["kind"] == "launch_end" and r["launch_id"] == crashed]
    assert end["crashed"] and end["failure_class"] == "crash_after_ready", end
    assert "fault injected: crash after 1 requests" in end["failure_line"]


def test_hang_before_ready_ends_at_the_ready_timeout(run):
    row = run.launch("hang_before_ready")
    assert not row["ok"] and row["exit_code"] is None and row["failure_class"] == "ready_timeout", row
    assert f"not ready after {READY_TIMEOUT_S} s" in row["error"]
    # bounded: the time-out, plus a stop (SIGTERM, SIGKILL after 10 s) and generous slack for a loaded machine
    assert READY_TIMEOUT_S <= _seconds(row) < READY_TIMEOUT_S + 60


def test_slow_start_is_waited_for_and_measured(run):
    row = run.launch("slow_start")
    assert row["ok"] and row["startup_s"] >= SLOW_START_S  # a lower bound: holds under any load
    assert all(q["ok"] for q in run.requests("slow_start"))
    assert "fault injected: slow start" in run.log("slow_start")


def test_hang_mid_stream_ends_at_the_request_timeout(run):
    for q in run.requests("hang_mid_stream"):
        assert q["error_class"] == "timeout" and f"no data for {REQUEST_TIMEOUT_S} s" in q["error"], q["error"]
        assert q["completion_tokens"] > 0  # the tokens that did arrive are kept
        assert REQUEST_TIMEOUT_S <= q["e2e_s"] / q["time_scale"] < REQUEST_TIMEOUT_S + 60


@pytest.mark.parametrize("fault,error_class,fragment", [
    ("cut_stream", "stream_cut", "stream ended before the request finished"),
    ("malformed_sse", "malformed_stream", "malformed event"),
    ("http_500", "http_error", "HTTP 500: "),
    ("health_lies", "http_error", "HTTP 503: "),  # /health said 200, the engine was never ready
])
def test_request_faults_are_failed_rows_with_their_class(run, fault, error_class, fragment):
    rows = run.requests(fault)
    assert run.launch(fault)["ok"] and len(rows) == 2
    for q in rows:
        assert not q["ok"] and q["error_class"] == error_class and fragment in q["error"], q["error"]
