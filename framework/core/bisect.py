"""The `bisect:` block of a hypothesis (`python -m framework bisect`): the ordered versions between a good and a
bad one, the threshold a change must reach to count as a regression, and the launches a probe may spend.

A version is one level of a software stack: what the run path already knows how to launch (server_args, env,
a per-version interpreter `python` for package versions, a sim profile), or a `commit` of the repository the
block names (the run path launches the server from a git worktree of that commit). The first version is the
good end, the last the bad end; the versions between are in the order they were made. Pure models: no I/O.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator


def _arg_text(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


Arg = Annotated[str, BeforeValidator(_arg_text)]
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
COMMIT = re.compile(r"^[0-9a-fA-F]{4,40}$|^[A-Za-z0-9][A-Za-z0-9_./~^-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Version(_Strict):
    """One software version: a commit of the block's `repo`, or a stack level (flags, environment, interpreter)."""

    name: str
    commit: str | None = None
    python: str | None = None
    server_args: list[Arg] = []
    env: dict[str, str] = {}
    sim_profile: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("a version name is 1-64 letters, digits and _.+- (it names a level in the trials)")
        return value

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and (not COMMIT.match(value) or value.startswith("-")):
            raise ValueError(f"{value!r} is not a commit (a hash, a tag or a branch name)")
        return value


class BisectBlock(_Strict):
    """What a bisection looks for and what it may spend (docs/statistics.md, "Bisection over versions")."""

    # a change of at least `threshold` (a fraction: 0.03 is 3%) between the ends is a regression to locate
    threshold: float = Field(gt=0, lt=1)
    # ends whose whole interval lies within +/- threshold are "no change"; an interval beyond +/- margin names a
    # change (default threshold / 2: a change of the threshold is found, one within the margin is not claimed)
    margin: float | None = Field(None, gt=0, lt=1)
    repo: str | None = None  # the git repository whose commits the versions name
    versions: list[Version] = Field(min_length=3, max_length=4096)
    launches: int = Field(3, ge=2, le=100)  # each version's first launches before its first look
    block: int = Field(2, ge=1, le=100)  # launches added per look after that
    max_launches: int = Field(60, ge=2, le=1000)  # per version; a probe still undecided there ends the bisection
    max_failures: int = Field(3, ge=1, le=100)  # failed launches of one version before the bisection gives up
    # a wall-clock budget (seconds): no launch starts after it is spent, and the bisection ends "stopped" with what
    # it has decided so far (a device session's time; the audit checks the replay had not finished there)
    max_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> "BisectBlock":
        names = [v.name for v in self.versions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"versions: duplicate name(s) {dup}")
        commits = [v.commit is not None for v in self.versions]
        if any(commits) and not all(commits):
            raise ValueError("versions: give a commit for every version or for none")
        if all(commits) and not self.repo:
            raise ValueError("versions name commits: give repo, the git repository they are commits of")
        if self.repo and not all(commits):
            raise ValueError("repo is given but the versions name no commit")
        if self.margin is not None and self.margin >= self.threshold:
            raise ValueError(f"margin {self.margin} must be below threshold {self.threshold}")
        if self.max_launches < self.launches:
            raise ValueError(f"max_launches {self.max_launches} is below launches {self.launches}")
        return self

    @property
    def equivalence_margin(self) -> float:
        return self.margin if self.margin is not None else self.threshold / 2

    @property
    def commits(self) -> bool:
        return bool(self.versions) and self.versions[0].commit is not None

    def probe_budget(self) -> int:
        """The most versions between the ends a bisection probes: ceil(log2(n - 1)) for n versions."""
        return max(1, math.ceil(math.log2(len(self.versions) - 1)))

    def kind(self) -> Literal["commits", "packages", "levels"]:
        if self.commits:
            return "commits"
        return "packages" if any(v.python for v in self.versions) else "levels"
