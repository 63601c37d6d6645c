"""tests/ mirrors the package: a test module lives in the folder of the room it tests.

tests/<room>/ for a room of `framework` (tests/core/ for framework/core/, tests/servers/sim/ for
framework/servers/sim/), tests/e2e/ for what goes through `python -m framework run` across rooms, and at
the root only the helpers every folder imports (found through `pythonpath = ["tests"]` in pyproject.toml)
and the tests of the repository as a whole. With no __init__.py under tests/, pytest imports each test
module by its file name, so two test modules may not share one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "framework"
FIXTURES = TESTS / "fixtures"  # data and helper programs the tests start, no test modules
ROOT_TESTS = {
    "test_layout.py",
    "test_packaging.py",
    "test_exported_members.py",
    "test_import_graph.py",
    "test_architecture.py",
    "test_readme.py",
}  # the package as a whole
HELPERS = {"conftest.py", "cli_helpers.py", "records_fixtures.py", "stats_rows.py", "vllm_venv.py"}  # at the root only


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if FIXTURES not in p.parents and "__pycache__" not in p.parts)


def _is_room(parts: tuple[str, ...]) -> bool:
    """framework/<parts> is a package with code of its own: not an alias package (framework/sim,
    framework/gpuserver) that only forwards `python -m` to where the code now lives."""
    pkg = PACKAGE.joinpath(*parts)
    if not (pkg / "__init__.py").is_file():
        return False
    own = [p for p in pkg.iterdir() if p.name not in ("__init__.py", "__main__.py", "__pycache__")]
    return any(p.suffix == ".py" or (p / "__init__.py").is_file() for p in own)


def test_every_test_folder_names_a_room_of_the_package_or_e2e():
    wrong = []
    for path in _python_files():
        parts = path.relative_to(TESTS).parent.parts
        if parts and parts != ("e2e",) and not _is_room(parts):
            wrong.append(f"{path.relative_to(TESTS)}: framework/{'/'.join(parts)} is not a room of the package")
    assert not wrong, "\n".join(wrong)


def test_room_folders_hold_test_modules_and_the_root_holds_the_shared_helpers():
    wrong = []
    for path in _python_files():
        rel = path.relative_to(TESTS)
        at_root = len(rel.parts) == 1
        if at_root and path.name not in ROOT_TESTS | HELPERS:
            wrong.append(f"{rel}: a test module belongs in the folder of the room it tests (or e2e/)")
        if not at_root and not (path.name.startswith("test_") or path.name == "conftest.py"):
            wrong.append(f"{rel}: a helper shared by tests lives at tests/ (on sys.path), not in a room's folder")
    assert not wrong, "\n".join(wrong)


def test_no_two_test_modules_share_a_file_name():
    names = Counter(p.name for p in _python_files() if p.name.startswith("test_"))
    assert not [n for n, k in names.items() if k > 1], {n: k for n, k in names.items() if k > 1}


def test_the_layout_check_sees_the_rooms():
    """The checks above are not vacuous: the folders they accept exist and hold tests."""
    folders = {p.relative_to(TESTS).parent.parts for p in _python_files() if p.name.startswith("test_")}
    for parts in [("core",), ("run",), ("servers", "sim"), ("e2e",)]:
        assert parts in folders
    assert _is_room(("servers", "sim")) and _is_room(("core",))
    assert not _is_room(("sim",)) and not _is_room(("gpuserver",)) and not _is_room(("e2e",))
