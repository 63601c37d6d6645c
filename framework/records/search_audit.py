"""Audit of searches: an exploration record's files are as recorded, and a confirmatory verdict's `search` link
holds (the search.json it names is the one the exploration recorded, the exploration came before the
confirmation was registered, and the confirmation measured fresh launches, none with an exploration seed).

Called by :func:`framework.records.audit.audit` for `exploration` records and for verdict records with a
`search` field; each finding is a `Problem` naming the record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from framework.core.trials import Trials, parse_trials
from framework.records.ledger import Problem


def _resolve(ledger_path: Path, recorded: str) -> Path | None:
    p = Path(recorded)
    candidates = [p] if p.is_absolute() else [Path(ledger_path).resolve().parent / p, Path.cwd() / p]
    return next((c for c in candidates if c.is_file()), None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def exploration_problems(rec: dict[str, Any], line: int, ledger_path: Path) -> list[Problem]:
    """The exploration's search.json and trials file exist and still have the SHA-256 it recorded."""
    name = (rec.get("hypothesis") or {}).get("name")
    out: list[Problem] = []

    def problem(msg: str) -> None:
        out.append(Problem(line, rec.get("hash"), name, "search", msg))

    if rec.get("exploratory") is not True:
        problem("an exploration record must say exploratory: true")
    for what, ref in (("search.json", rec.get("search_json") or {}), ("trials file", rec.get("trials") or {})):
        path = _resolve(ledger_path, str(ref.get("path") or ""))
        if path is None:
            problem(f"the exploration's {what} {ref.get('path')!r} is not found")
            continue
        data = path.read_bytes()
        size = ref.get("bytes")
        if hashlib.sha256(data).hexdigest() != ref.get("sha256") and not (
                isinstance(size, int) and hashlib.sha256(data[:size]).hexdigest() == ref.get("sha256")):
            problem(f"the exploration's {what} {ref.get('path')} changed since it was recorded "
                    f"(sha256 {str(ref.get('sha256'))[:12]})")
    return out


def _seeds(ledger_path: Path, trials: dict[str, Any]) -> set[int]:
    path = _resolve(ledger_path, str(trials.get("path") or ""))
    if path is None:
        return set()
    rows = parse_trials(path.read_bytes(), path)
    return {int(r["seed"]) for r in Trials(rows).of_kind("launch") if isinstance(r.get("seed"), int)}


def link_problems(rec: dict[str, Any], line: int, ledger_path: Path, explorations: dict[str, dict[str, Any]],
                  registrations: dict[str, dict[str, Any]], lines: dict[str, int] | None = None) -> list[Problem]:
    """A confirmatory verdict's `search` field against the exploration it names and the files both point at.

    `lines`: each record's ledger line, by hash; the confirmation's registration must come after its
    exploration in the ledger (without `lines`, by their clocks, as before)."""
    name = (rec.get("hypothesis") or {}).get("name")
    link = rec.get("search") or {}
    out: list[Problem] = []

    def problem(msg: str) -> None:
        out.append(Problem(line, rec.get("hash"), name, "search", msg))

    path = _resolve(ledger_path, str(link.get("path") or ""))
    if path is None:
        problem(f"names search {link.get('id')!r} whose search.json {link.get('path')!r} is not found")
    elif _sha(path) != link.get("sha256"):
        problem(f"search.json {link.get('path')} is not the one the confirmation was drawn from (sha256 recorded "
                f"{str(link.get('sha256'))[:12]}, now {_sha(path)[:12]})")
    exploration = explorations.get(str(link.get("exploration")))
    if exploration is None:
        problem(f"names exploration {str(link.get('exploration'))[:12]}, which is not earlier in the ledger")
        return out
    if exploration.get("search_id") != link.get("id"):
        problem(f"names search {link.get('id')!r}, but exploration {str(link.get('exploration'))[:12]} is search "
                f"{exploration.get('search_id')!r}")
    if (exploration.get("search_json") or {}).get("sha256") != link.get("sha256"):
        problem("its search.json sha256 differs from the one its exploration recorded")
    reg = registrations.get(str(rec.get("registration")))
    if lines is not None:
        early = reg is not None and lines.get(str(rec.get("registration")), 0) < lines.get(str(link.get("exploration")),
                                                                                            0)
    else:
        early = reg is not None and str(reg.get("registered") or reg.get("amended") or "") < str(
            exploration.get("finished"))
    if early:
        problem("the confirmation was registered before its exploration finished: it could not have been declared "
                "from the search's result alone")
    fresh = _seeds(ledger_path, rec.get("trials") or {}) & _seeds(ledger_path, exploration.get("trials") or {})
    if fresh:
        problem(f"the confirmation reused {len(fresh)} launch seed(s) of the exploration: its launches are not fresh")
    copied = _launches(ledger_path, rec.get("trials") or {}) & _launches(ledger_path, exploration.get("trials") or {})
    if copied:
        problem(f"the confirmation holds {len(copied)} launch(es) of the exploration (the same id and start, "
                f"{sorted(copied)[0][0]} first): its launches are not fresh")
    return out


def _launches(ledger_path: Path, trials: dict[str, Any]) -> set[tuple[str, str]]:
    """Each launch's (id, start): a launch id repeats across runs, with its start it names one launch."""
    path = _resolve(ledger_path, str(trials.get("path") or ""))
    if path is None:
        return set()
    rows = parse_trials(path.read_bytes(), path)
    return {(str(r.get("launch_id")), str(r.get("started"))) for r in Trials(rows).of_kind("launch")}


def unlinked_problems(rec: dict[str, Any], line: int, explorations: dict[str, dict[str, Any]]) -> list[Problem]:
    """A verdict of a search's confirmation (named NAME_confirm_ID after an earlier exploration in the ledger) must
    link that search, however it was run: else nothing checks that its launches were fresh."""
    name = (rec.get("hypothesis") or {}).get("name")
    for h, exploration in explorations.items():
        if f"{(exploration.get('hypothesis') or {}).get('name')}_confirm_{exploration.get('search_id')}" == name:
            return [Problem(line, rec.get("hash"), name, "search",
                            f"confirms search {exploration.get('search_id')!r} (exploration {h[:12]}) but does not "
                            "link it: nothing shows its launches are fresh (rerun it: the run links it now)")]
    return []
