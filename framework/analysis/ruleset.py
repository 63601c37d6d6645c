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
    # what a launch and a condition lost (CHANGELOG.md, rules version 2; docs/statistics.md, "What was lost")
    launch_end_fails: bool = False  # a launch whose launch_end row says ok: false (it crashed, cut, hung up or
    #                                 stalled while measured) is a failed launch, as one that did not start
    unmeasured_lost: bool = False  # an ok measured request without a value of the metric (its decode could not
    #                                be measured: one chunk, one token) counts toward the loss rule, with why
    ratio_rates: bool = False  # a launch's decode_tok_s, tpot_s and output_tok_s: the ratio of its requests'
    #                            totals (tokens / seconds), not the mean of their rates (docs/workloads.md)


RULESETS: dict[int, RuleSet] = {
    1: RuleSet(version=1),
    2: RuleSet(version=2, launch_end_fails=True, unmeasured_lost=True, ratio_rates=True),
}
LATEST = max(RULESETS)
