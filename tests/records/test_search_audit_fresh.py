"""A confirmation's launches are fresh: audit finds an exploration launch in a confirmation's trials by its seed or
by its id and start (issue 31, item 2), and orders its registration after its exploration by ledger lines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from framework.records import search_audit


def _launch(launch_id: str, seed: int, started: str) -> dict:
    return {"kind": "launch", "launch_id": launch_id, "seed": seed, "ok": True, "started": started}


def _setup(tmp_path: Path, confirm_rows: list[dict]) -> tuple[dict, dict, dict]:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "search.json").write_text("{}")
    (tmp_path / "s" / "trials.jsonl").write_text(json.dumps(_launch("c0-r0-a1", 11, "2026-01-01T00:00:00.000Z")) + "\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in confirm_rows))
    sha = hashlib.sha256(b"{}").hexdigest()
    exploration = {"kind": "exploration", "hash": "e" * 64, "search_id": "abc", "hypothesis": {"name": "x"},
                   "search_json": {"path": "s/search.json", "sha256": sha}, "trials": {"path": "s/trials.jsonl"},
                   "finished": "2026-01-01T00:01:00.000Z"}
    reg = {"kind": "registration", "hash": "r" * 64, "registered": "2026-01-01T00:01:00.000Z"}
    rec = {"kind": "verdict", "hash": "v" * 64, "hypothesis": {"name": "x_confirm_abc"}, "registration": reg["hash"],
           "trials": {"path": "c/trials.jsonl"},
           "search": {"id": "abc", "sha256": sha, "path": "s/search.json", "exploration": exploration["hash"]}}
    return exploration, reg, rec


def _problems(tmp_path: Path, rows: list[dict], lines: dict[str, int]) -> list[str]:
    exploration, reg, rec = _setup(tmp_path, rows)
    found = search_audit.link_problems(rec, 3, tmp_path / "verdicts.jsonl", {exploration["hash"]: exploration},
                                       {reg["hash"]: reg}, lines)
    return [p.message for p in found]


LINES = {"e" * 64: 1, "r" * 64: 2, "v" * 64: 3}


def test_fresh_launches_pass(tmp_path: Path) -> None:
    assert _problems(tmp_path, [_launch("c0-r0-a1", 12, "2026-01-01T00:02:00.000Z")], LINES) == []


def test_an_exploration_launch_with_its_seed_edited_is_found_by_its_id_and_start(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, [_launch("c0-r0-a1", 99, "2026-01-01T00:00:00.000Z")], LINES)
    assert "holds 1 launch(es) of the exploration" in msg and "c0-r0-a1" in msg, msg


def test_a_registration_before_its_exploration_line_fails_whatever_the_clocks_say(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, [_launch("c0-r0-a1", 12, "2026-01-01T00:02:00.000Z")],
                       {"e" * 64: 2, "r" * 64: 1, "v" * 64: 3})
    assert "registered before its exploration finished" in msg, msg


def test_an_unlinked_confirmation_is_named() -> None:
    exploration = {"hypothesis": {"name": "x"}, "search_id": "abc"}
    (p,) = search_audit.unlinked_problems({"hypothesis": {"name": "x_confirm_abc"}, "hash": "v"}, 3,
                                          {"e" * 64: exploration})
    assert p.kind == "search" and "does not link it" in p.message
    assert search_audit.unlinked_problems({"hypothesis": {"name": "y"}}, 3, {"e" * 64: exploration}) == []
