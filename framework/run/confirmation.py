"""A search's confirmation is fresh by construction, whatever path it is run through.

`search` writes its confirmatory hypothesis (`NAME_confirm_ID`, framework.analysis.search.confirm_hypothesis)
into the search directory and runs it; a user can run the same file by hand (`run hypothesis=SEARCH/X.yaml`).
Either way the run finds the exploration in the ledger by that name, links its record to the search (the
`search` field `audit` checks, framework.records.search_audit) and refuses to reuse any launch of the
exploration: one from its trials file, or one whose seed an exploration launch had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.core.trials import Trials, parse_trials
from framework.errors import ConfigError
from framework.records import ledger
from framework.run.writer import completed_launches


def exploration_of(ledger_path: Path, name: str) -> dict[str, Any] | None:
    """The exploration record whose confirmation is named `name` (the last, if a search id repeats), or None."""
    if not ledger_path.is_file():
        return None
    found = None
    for rec in ledger.read(ledger_path):
        if ledger.is_kind(rec, "exploration") and isinstance(rec.get("hypothesis"), dict) and (
                f"{rec['hypothesis'].get('name')}_confirm_{rec.get('search_id')}" == name):
            found = rec
    return found


def link(exploration: dict[str, Any]) -> dict[str, Any]:
    """The verdict record's `search` field for a confirmation of `exploration` (as `search` writes it)."""
    ref = exploration.get("search_json") or {}
    return {"id": exploration.get("search_id"), "sha256": ref.get("sha256"), "path": ref.get("path"),
            "exploration": exploration.get("hash")}


def _trials_path(ledger_path: Path, exploration: dict[str, Any]) -> Path | None:
    recorded = Path(str((exploration.get("trials") or {}).get("path") or ""))
    candidates = [recorded] if recorded.is_absolute() else [ledger_path.resolve().parent / recorded]
    return next((c.resolve() for c in candidates if c.is_file()), None)


def exploration_launches(ledger_path: Path, exploration: dict[str, Any]) -> tuple[set[int], set[tuple[str, str]]]:
    """The seeds of every exploration launch, and each launch's (id, start) identity (none when its trials
    file is gone): a launch id alone repeats across runs (c0-r0-a1), with its start it names one launch."""
    path = _trials_path(ledger_path, exploration)
    if path is None:
        return set(), set()
    launches = Trials(parse_trials(path.read_bytes(), path)).of_kind("launch")
    return ({int(r["seed"]) for r in launches if isinstance(r.get("seed"), int)},
            {(str(r.get("launch_id")), str(r.get("started"))) for r in launches})


def check_fresh(ledger_path: Path, exploration: dict[str, Any], run_dir: Path, rows: list[dict[str, Any]],
                requests_n: int, name: str) -> None:
    """Refuse (before any server starts) to resume confirmation `name` from `run_dir` when the launches it would
    reuse belong to the exploration: its trials file, or a seed of one of its launches."""
    search_id = exploration.get("search_id")
    safe = ("a confirmation runs on fresh launches only: run it without resume= (or resume its own "
            "confirmation directory, e.g. the search's confirm/)")
    if _trials_path(ledger_path, exploration) == (run_dir / "trials.jsonl").resolve():
        raise ConfigError("command line", "resume", f"{run_dir} is the exploration of search {search_id}, which "
                                                    f"{name} confirms; {safe}")
    seeds, identities = exploration_launches(ledger_path, exploration)
    done = completed_launches(rows, requests_n)
    taken = sorted(r["launch_id"] for r in Trials(rows).of_kind("launch") if r.get("launch_id") in done and (
        r.get("seed") in seeds or (str(r.get("launch_id")), str(r.get("started"))) in identities))
    if taken:
        raise ConfigError("command line", "resume", f"{run_dir}: {len(taken)} launch(es) ({', '.join(taken[:4])}) "
                                                    f"have seeds or launch ids of search {search_id}'s exploration, "
                                                    f"which {name} confirms; {safe}")
