"""Every record names its rules version; audit recomputes under that version and reports today's separately."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from framework.analysis import rules
from framework.records import audit, ledger

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign"


def test_a_new_record_names_the_current_rules_version() -> None:
    from framework.records.models import VerdictRecord

    assert VerdictRecord.model_fields["rules_version"].default == rules.CURRENT


def test_an_unknown_version_is_an_error_not_a_fallback() -> None:
    with pytest.raises(ValueError, match="version 99 is not known"):
        rules.rules_for(99)
    assert rules.version_of({}) == rules.UNVERSIONED == 1
    assert rules.version_of({"rules_version": 3}) == 3


@pytest.fixture
def ledger_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "pre_redesign"
    shutil.copytree(FIXTURES, dest)
    return dest / "sim_hypotheses.jsonl"


def test_old_records_audit_under_their_own_rules_and_today_is_reported_apart(ledger_copy: Path,
                                                                              monkeypatch) -> None:
    # a hypothetical rules version 2 that refutes everything: old (v1) records still audit clean,
    # and the audit says, apart from its problems, what today's rules would say of each
    v1 = rules.RULES[1]

    def refute_all(*args, **kwargs):
        result = v1.analyze(*args, **kwargs)
        return result.model_copy(update={"verdict": "refuted"})

    def refute_all_looks(*args, **kwargs):
        analysis, stop, reason = v1.sequential_look(*args, **kwargs)
        return analysis.model_copy(update={"verdict": "refuted"}), stop, reason

    monkeypatch.setitem(rules.RULES, 2, rules.Rules(2, refute_all, refute_all_looks, "test: refutes everything"))
    monkeypatch.setattr(rules, "CURRENT", 2)
    report = audit.audit(ledger_copy)
    assert report.ok, [p.message for p in report.problems]
    verdicts = [r for r in report.records if r.kind == "verdict"]
    assert verdicts and all(r.rules_version == 1 for r in verdicts)
    assert all(r.today.startswith("under today's rules (v2)") for r in verdicts if r.verdict != "refuted")
    assert all("hypothesis verdict recorded" in r.today for r in verdicts if r.verdict != "refuted")


def test_a_record_of_an_unknown_rules_version_is_a_problem(tmp_path: Path) -> None:
    records = [rec for _, _, rec in ledger.lines(FIXTURES / "sim_hypotheses.jsonl") if rec]
    verdict = next(r for r in records if r["kind"] == "verdict")
    body = {k: v for k, v in verdict.items() if k not in ("hash", "prev_hash")}
    body["rules_version"] = 99
    body["trials"] = {**body["trials"], "path": str(FIXTURES / body["trials"]["path"])}
    path = tmp_path / "v99.jsonl"
    ledger.append(path, body)
    report = audit.audit(path)
    assert any("version 99 is not known" in p.message for p in report.problems)


def test_a_v3_record_whose_labels_made_two_machines_audits_under_v3_and_v4_says_one() -> None:
    """Issue 31 (RuleSet.machine_by_hardware): a record decided under version 3 over two labels on one host
    (two machines then) recomputes exactly under its own version; today's rules count one machine."""
    import hashlib

    from stats_rows import simulate

    from framework.analysis.ruleset import RULESETS
    from framework.analysis.verdicts import analyze
    from framework.core.machine import identity
    from framework.core.spec import load_hypothesis

    path = Path(__file__).resolve().parents[2] / "hypotheses" / "eagle3_allreduce.yaml"
    h = load_hypothesis(path)
    rows = simulate(h, {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}, launches=6, seed=2)
    rows = [{**r, "machine": identity("vm", "AMD EPYC", [], label="ab"[r["replicate"] % 2])}
            if r["kind"] == "launch" else r for r in rows]
    v3 = analyze(h, rows, ruleset=RULESETS[3])
    assert v3.details["population"]["machines"] == 2
    content = path.read_text()
    record = {"kind": "verdict", "rules_version": 3, "verdict": v3.verdict,
              "hypothesis": {"name": h.name, "content": content,
                             "sha256": hashlib.sha256(content.encode()).hexdigest()},
              "predictions": [p.model_dump(mode="json") for p in v3.predictions], "analysis": {}}
    assert audit.compare(record, audit.recompute(record, rows)) == []
    today = audit.recompute(record, rows, rules.CURRENT)
    assert rules.CURRENT >= 4 and today.details["population"]["machines"] == 1
    assert audit.todays_difference(record, rows).startswith(f"under today's rules (v{rules.CURRENT})")
