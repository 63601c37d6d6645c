"""audit recomputes from the trials file that a verdict's launches ran the definition it names (issue 31, item 1),
and orders registrations by ledger lines, not by clocks (item 5): an honest run registered 2 s after it started
(a loaded machine) audits clean, a record before its registration line does not."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from records_fixtures import EAGLE, fake_analyze, make_run

from framework.core import definition as definition_mod
from framework.records import audit, ledger


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from framework.analysis import rules

    faked = dataclasses.replace(rules.RULES[rules.CURRENT], analyze=fake_analyze)
    monkeypatch.setitem(rules.RULES, rules.CURRENT, faked)


def _stamp(hypothesis_sha: str, only: str | None = None):
    """A rows hook: every launch row (or only launch `only`) names a definition with `hypothesis_sha`."""
    def hook(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "definition": {"hypothesis": hypothesis_sha, "experiment": "e" * 64,
                                     "design": definition_mod.design_sha256({})}}
                if r.get("kind") == "launch" and (only is None or r["launch_id"] == only) else r for r in rows]
    return hook


def _kinds(path: Path, kind: str) -> list[str]:
    return [p.message for p in audit.audit(path).problems if p.kind == kind]


EAGLE_SHA = hashlib.sha256(EAGLE.read_bytes()).hexdigest()


def test_launches_of_the_records_own_definition_audit_clean(tmp_path: Path, fake: None) -> None:
    path = tmp_path / "verdicts.jsonl"
    make_run(tmp_path, "run", path, rows_hook=_stamp(EAGLE_SHA),
             extra_analysis={"definition": {"hypothesis": EAGLE_SHA, "experiment": "e" * 64}})
    assert audit.audit(path).ok, audit.audit(path).problems


def test_a_launch_of_another_hypothesis_file_fails_audit_unless_an_amendment_carries_it(tmp_path: Path,
                                                                                        fake: None) -> None:
    path = tmp_path / "verdicts.jsonl"
    rec = make_run(tmp_path, "run", path, rows_hook=_stamp("0" * 64, only="c1-r0"))
    (msg,) = _kinds(path, "definition")
    assert "1 launch(es) (c1-r0)" in msg and "the hypothesis file" in msg and "no amendment" in msg, msg
    # a record that says it carried the launch over, without an amendment listing it, fails too
    other = tmp_path / "v2.jsonl"
    make_run(tmp_path, "run2", other, rows_hook=_stamp("0" * 64, only="c1-r0"),
             extra_analysis={"carried_over": ["c1-r0"]})
    (msg,) = _kinds(other, "definition")
    assert "carries launch c1-r0 over" in msg and "does not list it" in msg, msg
    assert rec["registration"]


def test_a_record_whose_definition_is_not_its_own_hypothesis_fails(tmp_path: Path, fake: None) -> None:
    path = tmp_path / "verdicts.jsonl"
    make_run(tmp_path, "run", path, rows_hook=_stamp("1" * 64),
             extra_analysis={"definition": {"hypothesis": "1" * 64, "experiment": "e" * 64}})
    problems = _kinds(path, "definition")
    assert any("the record's definition names hypothesis 111111111111" in p for p in problems), problems


def test_rows_from_before_definitions_audit_as_before(tmp_path: Path, fake: None) -> None:
    path = tmp_path / "verdicts.jsonl"
    make_run(tmp_path, "run", path)
    assert audit.audit(path).ok


def test_a_registration_after_the_start_by_the_clock_but_before_the_record_by_line_is_honest(
        tmp_path: Path, fake: None) -> None:
    """At load 30 `run` took 1.2 s between noting its start and registering; audit's 1 s slack failed it."""
    path = tmp_path / "verdicts.jsonl"
    early = (datetime.now(timezone.utc) - timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    make_run(tmp_path, "run", path, started=early)
    assert audit.audit(path).ok, audit.audit(path).problems


def test_a_record_before_its_registration_line_fails(tmp_path: Path, fake: None) -> None:
    path = tmp_path / "verdicts.jsonl"
    make_run(tmp_path, "run", path)
    reg, verdict = ledger.read(path)
    moved = tmp_path / "moved.jsonl"
    prev = ledger.GENESIS
    with moved.open("w") as f:
        for rec in (verdict, reg):  # the verdict first, sealed in that order
            sealed = ledger.seal({k: v for k, v in rec.items() if k not in ("hash", "prev_hash")}, prev)
            f.write(ledger.canonical_json(sealed) + "\n")
            prev = sealed["hash"]
    problems = _kinds(moved, "registration")
    assert any("not earlier in the ledger" in p for p in problems), problems


def test_definition_parts_and_their_hashes() -> None:
    d = {"requests": 3, "warmup": 1, "seed": 5, "order": "randomized_blocks", "launches": 5, "alpha": 0.05}
    assert definition_mod.design_sha256(d) == definition_mod.design_sha256({**d, "launches": 9, "alpha": 0.01})
    assert definition_mod.design_sha256(d) != definition_mod.design_sha256({**d, "requests": 4})
    exp = {"name": "x", "sim": {"profile": "/somewhere/twin.yaml"}}
    assert definition_mod.experiment_sha256(exp, "a" * 64) == definition_mod.experiment_sha256(
        {"name": "x", "sim": {"profile": "/elsewhere/twin.yaml"}}, "a" * 64)
    now = definition_mod.definition("h" * 64, exp, d)
    assert definition_mod.differs(now, now) == []
    assert definition_mod.differs({**now, "hypothesis": "x"}, now) == ["hypothesis"]
    assert definition_mod.differs(None, now) == list(definition_mod.PARTS)
    assert definition_mod.describe(["hypothesis", "design"]) == "the hypothesis file and the design"
