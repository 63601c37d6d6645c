"""The switches that tell one version of the decision rules from the next, as plain data.

Each field defaults to version 1's behaviour; a later version turns its changes on. The analysis
phases read the switches they own from the `RuleSet` they are given, so the code of every version
stays reachable and `audit` recomputes an old record exactly as it was decided. A new rule change
adds a field here (default: the old behaviour), turns it on in the newest version, and gets a line
in CHANGELOG.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleSet:
    """One version's switches; a field's default is version 1's behaviour."""

    version: int = 1
    # a condition a comparison needs with no usable value (every launch failed to start, or the metric is 0
    # or undefined in every launch) is "no data", like one that served nothing (framework.analysis.nodata)
    no_value_is_no_data: bool = False


RULESETS: dict[int, RuleSet] = {
    1: RuleSet(version=1),
    2: RuleSet(version=2, no_value_is_no_data=True),
}
LATEST = max(RULESETS)
