"""Pre-registration: register once, pass unchanged, refuse a changed hypothesis unless amended."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from framework.errors import RegistrationChanged
from framework.records import ledger
from framework.records.registration import check_or_amend, find_registration, register, settings_sha256

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"alpha": 0.05, "method": "welch"}


@pytest.fixture
def hyp(tmp_path: Path) -> Path:
    dst = tmp_path / "hypotheses" / "eagle3_allreduce.yaml"
    dst.parent.mkdir()
    shutil.copy(ROOT / "hypotheses" / "eagle3_allreduce.yaml", dst)
    return dst


def test_register_records_content_settings_and_commit(tmp_path: Path, hyp: Path) -> None:
    led = tmp_path / "verdicts.jsonl"
    rec = register(led, hyp, SETTINGS, "abc123")
    assert rec["kind"] == "registration" and rec["schema"] == "framework.registration/1"
    assert rec["hypothesis"]["name"] == "eagle3_allreduce"
    assert rec["hypothesis"]["content"] == hyp.read_text()
    assert rec["analysis"] == SETTINGS and rec["analysis_sha256"] == settings_sha256(SETTINGS)
    assert rec["git_commit"] == "abc123" and rec["registered"].endswith("Z")
    reg, amendments = find_registration(led, "eagle3_allreduce")
    assert reg == rec and amendments == []
    assert find_registration(led, "other") == (None, [])
    assert find_registration(tmp_path / "missing.jsonl", "x") == (None, [])


def test_check_registers_once_then_passes(tmp_path: Path, hyp: Path) -> None:
    led = tmp_path / "verdicts.jsonl"
    h1, amended1 = check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c")
    h2, amended2 = check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c")
    assert h1 == h2 and not amended1 and not amended2
    assert len(list(ledger.read(led))) == 1


def test_changed_hypothesis_refuses_then_amends(tmp_path: Path, hyp: Path) -> None:
    led = tmp_path / "verdicts.jsonl"
    reg_hash, _ = check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c")
    hyp.write_text(hyp.read_text().replace("margin: 0.03", "margin: 0.05"))
    with pytest.raises(RegistrationChanged) as err:
        check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c")
    msg = str(err.value)
    assert str(hyp) in msg and "changed since" in msg and "registered at" in msg and "allow_amend=true" in msg
    assert len(list(ledger.read(led))) == 1  # nothing appended on refusal

    am_hash, amended = check_or_amend(led, hyp, SETTINGS, allow_amend=True, git_commit="c")
    assert amended and am_hash != reg_hash
    reg, amendments = find_registration(led, "eagle3_allreduce")
    assert reg["hash"] == reg_hash and [a["hash"] for a in amendments] == [am_hash]
    am = amendments[0]
    assert am["kind"] == "amendment" and am["amends"] == reg_hash and am["registration"] == reg_hash
    assert "-    margin: 0.03" in am["diff"] and "+    margin: 0.05" in am["diff"]
    assert am["previous_sha256"] == reg["hypothesis"]["sha256"] != am["hypothesis"]["sha256"]

    # The amended content is now in force: unchanged runs pass without a new record.
    assert check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c") == (am_hash, False)
    assert ledger.verify_chain(led) == []


def test_changed_settings_refuse_too(tmp_path: Path, hyp: Path) -> None:
    led = tmp_path / "verdicts.jsonl"
    check_or_amend(led, hyp, SETTINGS, allow_amend=False, git_commit="c")
    with pytest.raises(RegistrationChanged, match="analysis settings changed since"):
        check_or_amend(led, hyp, {**SETTINGS, "alpha": 0.1}, allow_amend=False, git_commit="c")
    _, amended = check_or_amend(led, hyp, {**SETTINGS, "alpha": 0.1}, allow_amend=True, git_commit="c")
    am = find_registration(led, "eagle3_allreduce")[1][0]
    assert amended and '-  "alpha": 0.05' in am["diff"] and '+  "alpha": 0.1' in am["diff"]
