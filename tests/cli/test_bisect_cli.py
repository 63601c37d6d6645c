"""`python -m framework bisect`: bad input is one line and exit 2, before any server starts or anything is written."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from framework.cli import main

BASE = """\
name: b
statement: a bisection
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
bisect:
  threshold: 0.03
{extra}
"""
LEVELS = "  versions: [{name: a}, {name: b}, {name: c}]"


def _file(workdir: Path, extra: str) -> Path:
    p = workdir / "b.yaml"
    p.write_text(BASE.format(extra=textwrap.indent(textwrap.dedent(extra), "  ")), encoding="utf-8")
    return p


@pytest.fixture
def framework(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """`python -m framework ARGS` in-process (the refusals come before any server, so no process is needed)."""

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        code = main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


def _refused(out: subprocess.CompletedProcess, workdir: Path, *words: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not (workdir / "r").exists() and not (workdir / "verdicts.jsonl").exists()


def test_a_hypothesis_without_a_bisect_block(framework, workdir: Path) -> None:
    _refused(framework("bisect", "hypothesis=eagle3_allreduce", "run_dir=r", cwd=workdir), workdir,
             "bisect", "no bisect block")


def test_run_refuses_a_bisect_file(framework, workdir: Path) -> None:
    p = _file(workdir, "versions: [{name: a}, {name: b}, {name: c}]")
    _refused(framework("run", f"hypothesis={p}", cwd=workdir), workdir, "declares a bisection",
             "python -m framework bisect")


@pytest.mark.parametrize(("extra", "words"), [
    ("margin: 0.05\nversions: [{name: a}, {name: b}, {name: c}]", ("bisect", "below threshold")),
    ("versions: [{name: a}, {name: b}]", ("bisect.versions", "at least 3")),
    ("versions: [{name: a, python: /no/such/python}, {name: b}, {name: c}]",
     ("bisect.versions[0].python", "not an executable")),
    ("versions: [{name: a, bogus: 1}, {name: b}, {name: c}]", ("bisect.versions[0].bogus", "unknown field")),
])
def test_bad_blocks(framework, workdir: Path, extra: str, words: tuple[str, ...]) -> None:
    p = _file(workdir, extra)
    _refused(framework("bisect", f"hypothesis={p}", "run_dir=r", cwd=workdir), workdir, *words)


def test_a_commit_the_repository_does_not_have(framework, workdir: Path) -> None:
    repo = workdir / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    p = _file(workdir, f"repo: repo\nversions: [{{name: a, commit: {head}}}, {{name: b, commit: {head}}}, "
                       f"{{name: c, commit: deadbeef}}]")
    _refused(framework("bisect", f"hypothesis={p}", "run_dir=r", cwd=workdir), workdir,
             "bisect.versions[2].commit", "not a commit")
    p = _file(workdir, "repo: nowhere\nversions: [{name: a, commit: abcd}, {name: b, commit: abcd}, "
                       "{name: c, commit: abcd}]")
    _refused(framework("bisect", f"hypothesis={p}", "run_dir=r", cwd=workdir), workdir, "bisect.repo",
             "not a git repository")
