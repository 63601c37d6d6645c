"""The audit of a bisect record: it replays the bisection from the trials rows and names what differs; a
record that stopped on its time budget audits only while the replay had not finished."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from framework.analysis import bisect as an
from framework.core.spec import Hypothesis, parse_yaml, validate_model
from framework.records.bisect_audit import bisect_problems

CONTENT = """\
name: audit_bisect
statement: s
experiment: e
metric: decode_tok_s
bisect:
  threshold: 0.05
  versions: [{name: a}, {name: b}, {name: c}, {name: d}, {name: e}]
  launches: 6
  block: 2
  max_launches: 20
design: {requests: 2, warmup: 0, seed: 1}
"""


def _rows(h: Hypothesis, k: int, rng: np.random.Generator, stop_after: int | None = None) -> list[dict]:
    """Launch and request rows as a run writes them, launched as the policy asks (truth 100, x0.9 from k on)."""
    rows: list[dict] = []
    reps = [0] * 5
    launched = 0
    while True:
        st = an.state_of(h, rows)
        if st.done or (stop_after is not None and launched >= stop_after):
            return rows
        for v, target in sorted(st.need.items()):
            while reps[v] < target:
                lid = f"c{v}-r{reps[v]}-a1"
                level = {"version": "abcde"[v]}
                rows.append({"kind": "launch", "launch_id": lid, "condition": v, "levels": level, "replicate": reps[v],
                             "block": launched, "attempt": 1, "seed": launched, "ok": True, "startup_s": 1.0,
                             "started": "", "finished": ""})
                value = (90.0 if v >= k else 100.0) * math.exp(rng.normal(0, 0.01))
                for i in range(2):
                    rows.append({"kind": "request", "trial_id": f"{lid}-{i}", "launch_id": lid, "condition": v,
                                 "levels": level, "index": i, "warmup": False, "ok": True, "decode_tok_s": value,
                                 "e2e_s": 1.0, "replicate": reps[v]})
                reps[v] += 1
                launched += 1


def _record(tmp: Path, rows: list[dict], outcome: str | None = None) -> tuple[dict, Path]:
    h = validate_model(Hypothesis, parse_yaml(CONTENT, "t"), "t")
    summary = an.summary(h, an.state_of(h, rows), an.version_data(h, rows))
    trials = tmp / "trials.jsonl"
    trials.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bj = tmp / "bisect.json"
    bj.write_text(json.dumps(summary))
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    rec = {"kind": "bisect", "hash": "x", "rules_version": 5,
           "hypothesis": {"name": "audit_bisect", "content": CONTENT},
           "outcome": outcome or summary["outcome"], "reason": "", "first_bad": summary.get("first_bad"),
           "last_good": summary.get("last_good"), "first_bad_commit": None, "probed": summary["probed"],
           "launches_spent": summary["launches_spent"], "linear_scan_launches": summary["linear_scan_launches"],
           "step": summary.get("step"), "bisect_json": {"path": bj.name, "sha256": sha(bj)},
           "trials": {"path": trials.name, "sha256": sha(trials), "bytes": trials.stat().st_size}}
    return rec, tmp / "verdicts.jsonl"


def test_a_faithful_record_audits_and_a_changed_one_does_not(tmp_path: Path) -> None:
    h = validate_model(Hypothesis, parse_yaml(CONTENT, "t"), "t")
    rows = _rows(h, 3, np.random.default_rng(5))
    rec, ledger = _record(tmp_path, rows)
    assert rec["outcome"] == "named" and rec["first_bad"] == "d"
    assert bisect_problems(rec, 1, ledger) == []
    for key, value in (("first_bad", "c"), ("launches_spent", rec["launches_spent"] + 1), ("probed", [])):
        msgs = [p.message for p in bisect_problems({**rec, key: value}, 1, ledger)]
        assert len(msgs) == 1 and msgs[0].startswith(f"{key}: recorded"), msgs
    trials = tmp_path / "trials.jsonl"
    trials.write_text(trials.read_text().replace('"ok": true', '"ok": false', 1))
    assert [p.message for p in bisect_problems(rec, 1, ledger)] == [
        "the bisection's trials file trials.jsonl changed since it was recorded"]


def test_a_stopped_record_audits_only_while_the_replay_had_not_finished(tmp_path: Path) -> None:
    h = validate_model(Hypothesis, parse_yaml(CONTENT, "t"), "t")
    partial = _rows(h, 3, np.random.default_rng(6), stop_after=12)  # the ends only: the budget ran out there
    rec, ledger = _record(tmp_path, partial, outcome="stopped")
    assert bisect_problems(rec, 1, ledger) == []
    full = _rows(h, 3, np.random.default_rng(6))
    rec, ledger = _record(tmp_path, full, outcome="stopped")  # a finished replay cannot have been stopped
    assert [p.message.split(":")[0] for p in bisect_problems(rec, 1, ledger)] == ["outcome"]
