"""The wheel carries what the package reads at run time, checked from pyproject.toml without building one.

setuptools puts a non-.py file into the wheel only when a `[tool.setuptools.package-data]` glob of its
package matches it (globbed from the package's directory, `**` recursive, as setuptools does), so a
new data file that no glob names would be missing from an installed package and from nowhere else.
`.ci/wheel.sh` builds and installs the real wheel and runs it from outside the checkout.
"""

from __future__ import annotations

import fnmatch
import glob
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "framework"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _data_files() -> set[Path]:
    return {p for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}


def _package_dirs() -> list[Path]:
    return [PACKAGE, *(d for d in PACKAGE.rglob("*") if d.is_dir() and d.name != "__pycache__")]


def _matched_by_package_data() -> set[Path]:
    matched: set[Path] = set()
    for package, patterns in _pyproject()["tool"]["setuptools"].get("package-data", {}).items():
        bases = _package_dirs() if package in ("", "*") else [ROOT / package.replace(".", "/")]
        for base in bases:
            for pattern in patterns:
                matched |= {Path(p).resolve() for p in glob.glob(str(base / pattern), recursive=True)}
    return matched


def test_every_data_file_is_in_package_data():
    files = _data_files()
    assert any(p.name == "config.yaml" for p in files)  # the scan sees the Hydra config at all
    missing = sorted(str(p.relative_to(ROOT)) for p in files if p.resolve() not in _matched_by_package_data())
    assert not missing, (
        f"not matched by [tool.setuptools.package-data] in pyproject.toml (left out of the wheel): {missing}"
    )


def test_every_subpackage_is_found():
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert find.get("namespaces", True), "framework/conf/ has no __init__.py: it needs namespace packages"
    include, exclude = find.get("include", ["*"]), find.get("exclude", [])
    for d in _package_dirs():
        name = ".".join(d.relative_to(ROOT).parts)
        included = any(fnmatch.fnmatchcase(name, p) for p in include)
        found = included and not any(fnmatch.fnmatchcase(name, p) for p in exclude)
        assert found, f"{name} is not matched by [tool.setuptools.packages.find]: its files would be left out"


def test_the_version_is_written_once():
    import framework

    project = _pyproject()["project"]
    assert "version" in project.get("dynamic", []) and "version" not in project
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "framework.__version__"}
    from framework.records.environment import package_versions

    assert package_versions(("framework",)) == {"framework": framework.__version__}  # with or without metadata


def test_installed_package_looks_only_in_the_working_directory(tmp_path, monkeypatch, capsys):
    """An installed package (no checkout above it) finds files in the working directory only, and
    `validate` with nothing to check is an error rather than a pass on zero files."""
    from framework.cli.validate import main as validate_all
    from framework.run import resolve as runner

    monkeypatch.setattr(runner, "project_root", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert runner.find_file("hypotheses", "eagle3_allreduce") == Path("hypotheses/eagle3_allreduce.yaml")
    assert not runner.find_file("hypotheses", "eagle3_allreduce").exists()
    assert runner.available("hypotheses") == []
    assert validate_all([]) == 2
    assert "no experiments/*.yaml or hypotheses/*.yaml here" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_info_names_no_enclosing_repository(tmp_path):
    """A directory inside some repository but not its top (site-packages in a project's .venv) has no commit."""
    from framework.records.environment import NO_WORK_TREE, git_info

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
    nested = tmp_path / ".venv" / "lib" / "site-packages"
    nested.mkdir(parents=True)
    assert git_info(nested) == {"commit": None, "dirty": None, "tree": NO_WORK_TREE}
    assert git_info(tmp_path)["commit"] is not None and git_info(tmp_path)["tree"] == "git work tree"
    assert git_info(tmp_path / "absent") == {"commit": None, "dirty": None, "tree": NO_WORK_TREE}
