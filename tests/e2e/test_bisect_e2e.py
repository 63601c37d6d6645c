"""`python -m framework bisect` end to end on the sim (marker e2e: real servers, about 30 launches, 1-2 minutes
on two cores): a regression planted with the sim's test knob (--sim-decode-slowdown) from version v2 on is named,
the record audits and a changed trials file does not; ends that do not differ stop after the first comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left

from framework.records.bisect_audit import bisect_problems

pytestmark = pytest.mark.e2e

PLANTED = """\
name: sim_bisect_e2e
statement: v2 is the first version that decodes 10% slower (planted with --sim-decode-slowdown 1.10).
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
bisect:
  threshold: 0.05
  versions:
    - {name: v0}
    - {name: v1}
    - {name: v2, server_args: [--sim-decode-slowdown, "1.10"]}
    - {name: v3, server_args: [--sim-decode-slowdown, "1.10"]}
  launches: 3
  block: 2
  max_launches: 20
design: {requests: 2, warmup: 1, seed: 7}
"""

UNCHANGED = """\
name: sim_bisect_none
statement: nothing changed among three versions of the same stack.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
bisect:
  threshold: 0.10
  versions: [{name: a}, {name: b}, {name: c}]
  launches: 3
  max_launches: 20
design: {requests: 2, warmup: 1, seed: 7}
"""


def test_a_planted_regression_is_named_and_audited(workdir: Path) -> None:
    (workdir / "h.yaml").write_text(PLANTED, encoding="utf-8")
    out = framework("bisect", "hypothesis=h.yaml", "run_dir=b", "backend.speedup=20", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    summary = json.loads((workdir / "b" / "bisect.json").read_text())
    assert summary["outcome"] == "named" and summary["first_bad"] == "v2" and summary["last_good"] == "v1"
    lo, hi = summary["step"]["ci"]
    assert lo < summary["step"]["ratio"] < hi < 1.0  # slower: decode tok/s down
    assert summary["launches_spent"] == sum(v["launches"] + v["failed"] for v in summary["versions"])
    kinds = [r["kind"] for r in ledger_records(workdir / "verdicts.jsonl")]
    assert kinds == ["registration", "bisect"]  # registered before the first launch
    rec = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert rec["first_bad"] == "v2" and rec["probed"] == summary["probed"]
    assert (workdir / "b" / "bisect.png").stat().st_size > 0 and "v2" in (workdir / "b" / "bisect.md").read_text()
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    # the replay, not only the hashes: a record naming another version than its trials give is a problem
    wrong = bisect_problems({**rec, "first_bad": "v3"}, 2, workdir / "verdicts.jsonl")
    assert [p.message for p in wrong] == ["first_bad: recorded 'v3', the trials give 'v2'"]
    trials = workdir / "b" / "trials.jsonl"
    trials.write_text(trials.read_text().replace('"ok":true', '"ok":false', 1))
    audit = framework("audit", cwd=workdir)
    assert audit.returncode != 0 and "bisect" in audit.stdout


def test_ends_that_do_not_differ_stop_after_the_first_comparison(workdir: Path) -> None:
    (workdir / "h.yaml").write_text(UNCHANGED, encoding="utf-8")
    out = framework("bisect", "hypothesis=h.yaml", "run_dir=b", "backend.speedup=20", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((workdir / "b" / "bisect.json").read_text())
    assert summary["outcome"] == "no_change" and summary["probed"] == [] and len(summary["compared"]) == 1
    assert "stopped after the first comparison" in out.stdout
    assert summary["versions"][1]["launches"] == 0
    assert framework("audit", cwd=workdir).returncode == 0
