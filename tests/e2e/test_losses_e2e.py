"""No verdict from silent survivors: a server that merges chunks, one that cuts streams and one that dies
after it was ready, end to end through `python -m framework run` and real sim processes.

One run, one factor `server` with a clean reference and one level per fault (the level's server flags
turn it on; the sim's faults are seeded by the launch seed, so the run is reproducible):

- `merged`: half the streams arrive as one chunk (`--sim-fault-merge-chunks`, rate 0.5): those requests
  are ok but their decode cannot be measured; each row says why (`decode_unmeasured: one_chunk`),
  the condition counts them as lost, and more than 20% lost makes the comparison inconclusive;
- `cut`: some streams are cut after 3 events while the server stays up: each such launch fails
  (`stream_cut`, its line the first cut request's error);
- `dies`: the server exits after 5 requests (`--sim-fault-crash-after-requests`): every launch
  fails as `crash_after_ready`, so `expect: starts` is refuted, not supported from the requests
  served before the crash.

The verdict table, the record and the report name how many were lost and why, and `audit`
recomputes the verdict from trials.jsonl. About 40 s on two cores (each crash waits for the
server to finish dying), so it carries the `faults` marker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

from framework.analysis import rules

pytestmark = pytest.mark.faults

HYPOTHESIS = """\
name: losses
statement: A fault the server hides in its stream is counted as lost, never dropped.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
factors:
  server:
    reference: clean
    levels:
      clean: {}
      merged: {server_args: [--sim-fault-merge-chunks, --sim-fault-rate, "0.5"]}
      cut: {server_args: [--sim-fault-cut-stream, "3", --sim-fault-rate, "0.25"]}
      dies: {server_args: [--sim-fault-crash-after-requests, "5"]}
predictions:
  - {id: clean_starts, kind: launches, where: {server: clean}, expect: starts}
  - {id: dies_starts, kind: launches, where: {server: dies}, expect: starts}
  - {id: same_speed_merged, kind: equivalent, factor: server, level: merged, margin: 0.5}
  - {id: same_speed_cut, kind: equivalent, factor: server, level: cut, margin: 0.5}
  - {id: same_speed_dies, kind: equivalent, factor: server, level: dies, margin: 0.5}
design: {launches: 3, requests: 8, warmup: 1, seed: 4}
"""


class Run:
    def __init__(self, workdir: Path, out) -> None:
        self.workdir, self.out = workdir, out
        self.record = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"][-1]
        self.run_dir = Path(self.record["run_dir"])
        self.rows = [json.loads(line) for line in (self.run_dir / "trials.jsonl").read_text().splitlines()]

    def rows_of(self, kind: str, level: str) -> list[dict]:
        return [r for r in self.rows if r["kind"] == kind and r["levels"] == {"server": level}]

    def measured(self, level: str) -> list[dict]:
        return [r for r in self.rows_of("request", level) if not r["warmup"]]

    def prediction(self, pid: str) -> dict:
        return next(p for p in self.record["predictions"] if p["id"] == pid)

    def condition(self, level: str) -> dict:
        return next(c for c in self.record["conditions"] if c["levels"] == {"server": level})


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    workdir = tmp_path_factory.mktemp("losses")
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "losses.yaml").write_text(HYPOTHESIS)
    out = framework("run", "hypothesis=losses", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={ROOT / 'experiments'}", "backend.speedup=20",
                    'backend.extra_args=[--sim-startup-s,"0"]', cwd=workdir)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return Run(workdir, out)


def test_the_run_is_recorded_audited_and_leaves_no_server(run):
    assert run.record["rules_version"] == rules.CURRENT  # the version that turned this on (2) or a later one
    assert run.record["verdict"] != "supported"
    audit = framework("audit", cwd=run.workdir)  # the recorded verdict recomputed from trials.jsonl
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    assert no_servers_left(run.workdir)


def test_a_clean_server_loses_nothing(run):
    assert run.prediction("clean_starts")["verdict"] == "supported"
    assert all(r["ok"] and r.get("decode_unmeasured") is None for r in run.rows_of("request", "clean"))
    assert all(r["ok"] for r in run.rows_of("launch_end", "clean"))


def test_merged_streams_are_counted_as_unmeasured_and_named(run):
    rows = run.measured("merged")
    merged = [r for r in rows if r.get("decode_unmeasured")]
    assert merged and len(merged) < len(rows)  # the fault hit some streams, not all
    for r in merged:  # ok, every token in one chunk: no decode figure, and the row says why
        assert r["ok"] and r["decode_tok_s"] is None and r["decode_unmeasured"] == "one_chunk", r
        assert r["completion_tokens"] == 256 and r["ttft_s"] is not None
    losses = run.condition("merged")["losses"]
    assert losses["unmeasured"] == len(merged) and losses["unmeasured_why"] == {"one_chunk": len(merged)}
    assert losses["requests_lost"] == len(merged) and losses["requests"] == len(rows)
    p = run.prediction("same_speed_merged")
    assert f"{len(merged)} of {len(rows)} measured requests ok but not measured" in p["reason"], p
    assert "one_chunk" in p["reason"]
    if len(merged) / len(rows) > 0.2:  # the loss rule: no verdict from the surviving half
        assert p["verdict"] == "inconclusive" and "survivorship" in p["reason"], p
    assert f"{len(merged)} not measured (one_chunk" in run.out.stdout  # the verdict table says it too


def test_cut_streams_fail_their_launch_with_the_class_and_the_line(run):
    ends = run.rows_of("launch_end", "cut")
    failed = [e for e in ends if not e["ok"]]
    cut = {r["launch_id"] for r in run.rows_of("request", "cut") if r.get("error_class") == "stream_cut"}
    assert cut and {e["launch_id"] for e in failed} == cut  # exactly the launches that cut a stream
    for e in failed:
        assert e["failure_class"] == "stream_cut" and not e["crashed"], e
        assert "stream ended before the request finished" in e["failure_line"]
        assert e["requests_lost"]["stream_cut"] >= 1
    c = run.condition("cut")
    assert c["launches"]["failed"] == len(failed) and c["losses"]["failed_while_measured"] == len(failed)
    p = run.prediction("same_speed_cut")
    assert p["verdict"] == "inconclusive" and "stream_cut" in p["reason"], p


def test_a_server_that_dies_after_ready_fails_its_launches(run):
    ends = run.rows_of("launch_end", "dies")
    assert ends and all(not e["ok"] and e["crashed"] and e["failure_class"] == "crash_after_ready" for e in ends)
    assert all("fault injected: crash after 5 requests" in e["failure_line"] for e in ends), ends
    served = [r for r in run.measured("dies") if r["ok"]]
    assert served  # the requests served before the crash are kept, but no launch counts as ok
    c = run.condition("dies")
    assert c["launches"]["ok"] == 0 and c["launches"]["failed"] == len(ends)
    starts = run.prediction("dies_starts")
    assert starts["verdict"] == "refuted" and "crash_after_ready" in starts["reason"], starts
    # they started and served requests before the crash: said so, not "0/3 launches started" (issue 33)
    assert "0/3 launches started" not in starts["reason"], starts
    n = len([r for r in run.rows_of("request", "dies") if r["ok"]]) // len(ends)
    assert f"3/3 launches started, 0 served their workload; 3 failed after they served {n}, {n} and {n} requests" \
        in starts["reason"], starts
    assert "3 (3 after serving requests)" in run.out.stdout
    assert run.prediction("same_speed_dies")["verdict"] == "inconclusive"
