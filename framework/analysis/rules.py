"""Versioned decision rules: every verdict record names the version it was decided under.

A rule is anything that turns the same trial rows into a different verdict: a test, a margin, a
stopping boundary, an outlier rule, a default. Changing one adds a new version here (and a line in
CHANGELOG.md saying what changed and why) and keeps the old version's functions reachable, so that
`audit` recomputes every old record under the rules it was made with and reports separately what
today's rules would say. Records written before versions existed carry none and are version 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from framework.analysis.ruleset import LATEST, RULESETS
from framework.analysis.verdicts import analyze, sequential_look

CURRENT = LATEST
UNVERSIONED = 1  # records made before the rules had versions (framework <= 0.1.0 at 08a34bb)


@dataclass(frozen=True)
class Rules:
    """One version of the rules: the fixed-design analysis and the sequential look it decides with."""

    version: int
    analyze: Callable[..., Any]
    sequential_look: Callable[..., Any]
    summary: str  # what this version is, in one line (CHANGELOG.md has the reasons)
    # the recorded settings its sequential look takes (a record may hold more; they are not passed)
    look_settings: tuple[str, ...] = ("look", "max_looks", "alpha", "method", "spending", "seed", "valid_p")


RULES: dict[int, Rules] = {
    1: Rules(1, partial(analyze, ruleset=RULESETS[1]), partial(sequential_look, ruleset=RULESETS[1]),
             "docs/statistics.md sections 1-5, 8 and 10 at framework 0.1.0: launch means on the log scale, "
             "Welch / rank / bootstrap / anytime-valid tests, outlying launches, group-sequential and "
             "anytime-valid stopping, launch outcomes by e-process"),
    2: Rules(2, partial(analyze, ruleset=RULESETS[2]), partial(sequential_look, ruleset=RULESETS[2]),
             "version 1 with the changes CHANGELOG.md lists under rules version 2"),
    3: Rules(3, partial(analyze, ruleset=RULESETS[3]), partial(sequential_look, ruleset=RULESETS[3]),
             "version 2 with the changes CHANGELOG.md lists under rules version 3"),
    4: Rules(4, partial(analyze, ruleset=RULESETS[4]), partial(sequential_look, ruleset=RULESETS[4]),
             "version 3 with the changes CHANGELOG.md lists under rules version 4"),
    5: Rules(5, partial(analyze, ruleset=RULESETS[5]), partial(sequential_look, ruleset=RULESETS[5]),
             "version 4 with the changes CHANGELOG.md lists under rules version 5"),
}


def version_of(record: dict[str, Any]) -> int:
    """The rules version a verdict record was decided under."""
    v = record.get("rules_version")
    return UNVERSIONED if v is None else int(v)


def rules_for(version: int) -> Rules:
    """The rules of `version`; a version this code does not know is an error, never a silent fallback."""
    if version not in RULES:
        raise ValueError(f"decision rules version {version} is not known to this framework "
                         f"(known: {sorted(RULES)}); audit it with the framework version that wrote it")
    return RULES[version]
