"""One door to a run (issue 30): one RunContext constructor, servers started only by run/ and execution/, and
no trials-row or record kind tested by its string in run/ or cli/ (they go through the Trials index and
records.ledger.is_kind)."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "framework"


def _sources(under: Path = PACKAGE) -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in sorted(under.rglob("*.py"))}


def test_a_run_context_is_made_in_one_place() -> None:
    calls = [name for name, text in _sources().items() for _ in re.finditer(r"\bRunContext\(", text)]
    assert calls == ["run/session.py"], calls


def test_only_run_and_execution_start_a_server_process() -> None:
    places = sorted({name for name, text in _sources().items() if re.search(r"\bServerProcess\(", text)})
    assert places and all(p.startswith(("run/", "execution/")) for p in places), places


def test_run_and_cli_test_no_kind_by_its_string() -> None:
    kind_test = re.compile(r"""(\.get\(\s*["']kind["']\s*\)|\[\s*["']kind["']\s*\])\s*(==|!=|in\b|not\s+in\b)""")
    found = [f"{name}:{text[:m.start()].count(chr(10)) + 1}"
             for room in ("run", "cli") for name, text in _sources(PACKAGE / room).items()
             for m in kind_test.finditer(text)]
    assert not found, f"kind tested by its string (use the Trials index or ledger.is_kind): {found}"
