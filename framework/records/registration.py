"""Pre-registration: declare a hypothesis and its analysis plan in the ledger before any data.

`check_or_amend` runs at the start of every run: it registers a new hypothesis, lets an unchanged
one through, and refuses a changed one unless the user says `allow_amend=true`, in which case it
appends an amendment record with a unified diff of what changed (a transparent change, as in OSF
practice). The verdict record then points at the registration or amendment it ran under.

What counts as a change: the hypothesis file's bytes (SHA-256) and the analysis settings the caller
passes (their canonical-JSON SHA-256). Pass only settings that decide the verdict (alpha, method,
sequential rule), not ones that merely size the run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from framework.core.spec import parse_yaml
from framework.errors import RegistrationChanged, SpecError
from framework.records import ledger
from framework.records.environment import git_info
from framework.records.models import AmendmentRecord, HypothesisRef, RegistrationRecord


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def settings_sha256(settings: dict[str, Any]) -> str:
    return hashlib.sha256(ledger.canonical_json(ledger.to_dict(settings)).encode("utf-8")).hexdigest()


def hypothesis_ref(path: str | Path) -> HypothesisRef:
    """Name, statement, content and SHA-256 of a hypothesis file, as it is on disk now."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(path, "", f"cannot read: {exc}") from None
    text = raw.decode("utf-8")
    data = parse_yaml(text, path)
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise SpecError(path, "name", "a hypothesis needs a name")
    return HypothesisRef(name=data["name"], sha256=hashlib.sha256(raw).hexdigest(),
                         statement=str(data.get("statement", "")).strip(), path=str(path), content=text)


def _git_commit() -> str | None:
    return git_info()["commit"]


def register(ledger_path: str | Path, hypothesis_path: str | Path, analysis_settings: dict[str, Any],
             git_commit: str | None) -> dict[str, Any]:
    """Append a registration record for the hypothesis file as it is now; return the stored record."""
    ref = hypothesis_ref(hypothesis_path)
    rec = RegistrationRecord(hypothesis=ref, analysis=analysis_settings,
                             analysis_sha256=settings_sha256(analysis_settings),
                             git_commit=git_commit, registered=_now())
    return ledger.append(ledger_path, rec)


def find_registration(ledger_path: str | Path, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The latest registration of `name` and the amendments chained after it (oldest first)."""
    reg: dict[str, Any] | None = None
    amendments: list[dict[str, Any]] = []
    if not Path(ledger_path).exists():
        return None, []
    for rec in ledger.read(ledger_path):
        if (rec.get("hypothesis") or {}).get("name") != name:
            continue
        if rec.get("kind") == "registration":
            reg, amendments = rec, []
        elif rec.get("kind") == "amendment" and reg is not None:
            amendments.append(rec)
    return reg, amendments


def current(reg: dict[str, Any], amendments: list[dict[str, Any]]) -> dict[str, Any]:
    """The record in force: the last amendment, or the registration itself."""
    return amendments[-1] if amendments else reg


def _diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=old_name, tofile=new_name))


def _settings_text(settings: dict[str, Any]) -> str:
    return json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n"


def check_or_amend(ledger_path: str | Path, hypothesis_path: str | Path, settings: dict[str, Any],
                   allow_amend: bool, git_commit: str | None = None,
                   carried_over: list[str] | None = None) -> tuple[str, bool]:
    """(hash of the registration or amendment in force, whether an amendment was appended now).

    Registers the hypothesis when the ledger has no registration for it. Raises RegistrationChanged
    when the file or the settings changed since registration, unless `allow_amend`.
    `carried_over`: launch ids a resume reuses although they were measured under another definition
    (`resume_carry=`, which needs `allow_amend`): an amendment listing them is appended even when nothing
    else changed, so the ledger says which launches the verdict carries over.
    Holds the ledger lock throughout so two runs cannot both register or amend the same change.
    """
    ref = hypothesis_ref(hypothesis_path)
    new_settings_sha = settings_sha256(settings)
    with ledger.lock(ledger_path):
        reg, amendments = find_registration(ledger_path, ref.name)
        if reg is None:
            commit = git_commit if git_commit is not None else _git_commit()
            return register(ledger_path, hypothesis_path, settings, commit)["hash"], False
        now_in_force = current(reg, amendments)
        old_ref = now_in_force["hypothesis"]
        content_changed = old_ref.get("sha256") != ref.sha256
        settings_changed = now_in_force.get("analysis_sha256") != new_settings_sha
        if not content_changed and not settings_changed and not carried_over:
            return now_in_force["hash"], False
        when = now_in_force.get("amended") or now_in_force.get("registered")
        what = " and ".join(x for x, changed in (
            (f"{hypothesis_path}", content_changed), ("its analysis settings", settings_changed)) if changed) or (
            "nothing (launches carried over by resume_carry=)")
        verb = "amended" if amendments else "registered"
        if not allow_amend:
            raise RegistrationChanged(
                f"{what} changed since hypothesis {ref.name!r} was {verb} at {when} "
                f"(record {now_in_force['hash'][:12]} in {ledger_path}); "
                "to run it anyway and record an amendment, pass allow_amend=true")
        diff = ""
        if content_changed:
            diff += _diff(old_ref.get("content") or "", ref.content or "",
                          f"{ref.name}.yaml@{old_ref.get('sha256', '')[:12]}", f"{ref.name}.yaml@{ref.sha256[:12]}")
        if settings_changed:
            diff += _diff(_settings_text(now_in_force.get("analysis") or {}), _settings_text(settings),
                          "analysis@registered", "analysis@now")
        commit = git_commit if git_commit is not None else _git_commit()
        rec = AmendmentRecord(hypothesis=ref, previous_sha256=old_ref.get("sha256", ""),
                              amends=now_in_force["hash"], registration=reg["hash"], diff=diff,
                              analysis=settings, analysis_sha256=new_settings_sha,
                              previous_analysis_sha256=now_in_force.get("analysis_sha256"),
                              git_commit=commit, amended=_now(),
                              **({"carried_over": sorted(carried_over)} if carried_over else {}))
        return ledger.append(ledger_path, rec)["hash"], True


def in_force(ledger_path: str | Path, hypothesis_path: str | Path, settings: dict[str, Any],
             allow_amend: bool) -> tuple[str, bool]:
    """`check_or_amend` without writing, for a sweep job whose submitting process registered it: (hash of
    the registration or amendment in force, whether it is an amendment this sweep may have made)."""
    ref = hypothesis_ref(hypothesis_path)
    reg, amendments = find_registration(ledger_path, ref.name)
    now_in_force = current(reg, amendments) if reg is not None else None
    if (now_in_force is None or now_in_force["hypothesis"].get("sha256") != ref.sha256
            or now_in_force.get("analysis_sha256") != settings_sha256(settings)):
        raise RegistrationChanged(
            f"hypothesis {ref.name!r} as it is now ({hypothesis_path}) is not registered in {ledger_path}: the "
            "process that submitted this sweep registers every job before it starts; was the file changed since?")
    return now_in_force["hash"], bool(amendments) and allow_amend


def analysis_settings(d: Any) -> dict[str, Any]:
    """What the decision rules depend on besides the data (of a `framework.core.spec.Design`): registered,
    and kept in every record.

    The sampling plan (launches, requests, sequential looks) is recorded with every verdict but
    not registered, so asking for more launches is not an amendment; changing alpha or the
    analysis method is.
    """
    return {"alpha": d.alpha, "method": d.analysis}
