"""docs/architecture.md names every room of the package, and only rooms that exist.

A room is a package directory: framework/<name>/ with an __init__.py, and framework/servers/<name>/. The doc
names each once in its code block, as `name/` (or `servers/name/`) at the start of a line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "framework"
DOC = ROOT / "docs" / "architecture.md"
ROOM_LINE = re.compile(r"^((?:[a-z_]+/)+)(?:\s|$)")


def rooms_in_doc(text: str) -> list[str]:
    """The rooms named at the start of a line inside the doc's fenced code blocks, without the trailing slash."""
    rooms, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and (m := ROOM_LINE.match(line)):
            rooms.append(m.group(1).rstrip("/"))
    return rooms


def rooms_in_package() -> set[str]:
    top = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    servers = {f"servers/{p.parent.name}" for p in (PACKAGE / "servers").glob("*/__init__.py")}
    return top | servers


def test_the_parser_reads_rooms_only_from_the_code_block() -> None:
    text = "core/ outside\n```\ncore/    domain\n  run/ indented\nservers/sim/ the clock\nerrors.py x\n```\n"
    assert rooms_in_doc(text) == ["core", "servers/sim"]


def test_the_doc_names_every_room_once_and_no_other() -> None:
    named = rooms_in_doc(DOC.read_text(encoding="utf-8"))
    actual = rooms_in_package()
    assert actual >= {"core", "run", "servers", "servers/sim"}  # the package was found
    twice = sorted({r for r in named if named.count(r) > 1})
    missing = sorted(actual - set(named))
    absent = sorted(set(named) - actual)
    assert not missing, f"rooms of framework/ not named in docs/architecture.md: {missing}"
    assert not absent, f"docs/architecture.md names rooms that framework/ does not have: {absent}"
    assert not twice, f"docs/architecture.md names these rooms more than once: {twice}"
