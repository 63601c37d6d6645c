"""A commit version is launched from a git worktree of it: made when first needed, holding that commit's files,
removed (and pruned from the repository's list) at the end."""

from __future__ import annotations

import subprocess
from pathlib import Path

from framework.core.spec import Hypothesis
from framework.run.bisect import Worktrees


def _repo(root: Path) -> tuple[Path, list[str]]:
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    commits = []
    for i in range(3):
        (repo / "version.txt").write_text(f"v{i}\n")
        subprocess.run([*git, "add", "version.txt"], check=True)
        subprocess.run([*git, "commit", "-qm", f"v{i}"], check=True)
        commits.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                      check=True).stdout.strip())
    return repo, commits


def test_worktrees_hold_their_commit_and_are_removed(tmp_path: Path) -> None:
    repo, commits = _repo(tmp_path)
    h = Hypothesis.model_validate({"name": "b", "statement": "s", "experiment": "e", "bisect": {
        "threshold": 0.05, "repo": str(repo),
        "versions": [{"name": f"v{i}", "commit": c} for i, c in enumerate(commits)]}})
    wt = Worktrees(repo, h, tmp_path / "run" / "worktrees")
    assert set(wt.paths()) == {"v0", "v1", "v2"}
    wt.ensure("v0")
    wt.ensure("v2")
    wt.ensure("v2")  # made once
    assert (Path(wt.path("v0")) / "version.txt").read_text() == "v0\n"
    assert (Path(wt.path("v2")) / "version.txt").read_text() == "v2\n"
    assert not Path(wt.path("v1")).exists()  # never needed, never made
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert listed.count("\n") == 3
    wt.remove()
    assert not Path(wt.path("v0")).exists() and not Path(wt.path("v2")).exists()
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert listed.count("\n") == 1
