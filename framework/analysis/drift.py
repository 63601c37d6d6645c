"""Drift: an effect that changed during the run is detected, not averaged (rules version 2).

Every rule here assumes one effect for the whole run: the blocks are exchangeable. A machine that
warms up, a neighbour that starts a job, a driver that throttles: the effect of the first blocks is
then not that of the last, and a single interval averages two different answers. Two signs say so:

- an **empty confidence sequence** (anytime analysis): the running intersection of the bounds has
  lower > upper, so no single effect is consistent with every look (Howard et al. 2021 note that
  a confidence sequence that empties is evidence against the model itself); and
- **early and late blocks that differ beyond chance**: the block contrasts of the first half of the
  blocks against those of the second half, by Welch's two-sided t test at the prediction's one-sided
  level `a` (a fixed split at the middle, chosen before any data: a test of a treatment-by-period
  interaction, as for the carry-over of a crossover trial, Grizzle 1965).

An empty sequence makes the comparison inconclusive with the cause, "the effect changed during the
run". So does a significant early/late difference when the two halves do not tell the same story:
one half's estimate lies on the other side of the threshold (or outside the equivalence bounds) from
the verdict. When both halves' estimates agree with the verdict, the claim held throughout the run
and the verdict stands, with the drift stated in its details. The check can only turn a decision
into "inconclusive", so it never adds a wrong "supported" or "refuted"; what it costs is power (a
false alarm at most `a` per decided prediction, and less, since both halves must also disagree;
measured in benchmarks/calibration_shape.py). Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats

from framework.analysis.rows import ConditionData
from framework.core.design import Condition
from framework.stats import anytime, decisions, shape

CAUSE = "the effect changed during the run"
MIN_BLOCKS = 4  # two per half: the fewest with which Welch's test of early against late is defined


def contrasts_of(data: dict[int, ConditionData], cells: list[Condition],
                 exclude: frozenset[str] = frozenset()) -> list[float]:
    """The per-block contrasts of a comparison's cells, in block order ((+1, -1) or (+1, -1, -1, +1))."""
    weights = [1, -1] if len(cells) == 2 else [1, -1, -1, 1]
    contrasts, _ = anytime.block_contrasts([data[c.index].by_block(exclude) for c in cells], weights)
    return contrasts


def agrees(dec: decisions.Decision, log_effect: float) -> bool:
    """Whether an effect of `log_effect` lies on the side of the threshold (or bounds) the verdict claims."""
    lo, _ = (dec.details.get("log_ci") or [None, None])[:2]
    if "bounds" in dec.details:
        low, upp = (math.log(b) for b in dec.details["bounds"])
        if dec.verdict == "supported":
            return low < log_effect < upp
        return log_effect > upp if lo is not None and lo > upp else log_effect < low
    theta = math.log(dec.details["threshold"])
    above = (dec.verdict == "supported") == (dec.details.get("direction") == "up")
    return log_effect > theta if above else log_effect < theta


def check(dec: decisions.Decision, contrasts: list[float], a: float) -> dict[str, Any]:
    """What the drift check found: `detected`, and why (an empty sequence, or early against late)."""
    out: dict[str, Any] = {"blocks": len(contrasts), "level": a, "detected": False}
    lo, hi = (dec.details.get("log_ci") or [None, None])[:2]
    if dec.details.get("method") == "anytime" and lo is not None and hi is not None and lo > hi:
        out.update(detected=True, empty_confidence_sequence=True,
                   why=f"the confidence sequence is empty ([{math.exp(lo):.3f}, {math.exp(hi):.3f}]: lower "
                       f"above upper), so no single effect is consistent with every look")
    n = len(contrasts)
    if n >= MIN_BLOCKS and max(contrasts) - min(contrasts) > shape.RESOLUTION:  # else: no spread to test
        early, late = contrasts[: n // 2], contrasts[n // 2:]
        res = stats.ttest_ind(early, late, equal_var=False)
        p = float(res.pvalue)
        if math.isfinite(p):
            e, lt = sum(early) / len(early), sum(late) / len(late)
            out.update(p_value=p, early_blocks=len(early), late_blocks=len(late),
                       early_log_effect=e, late_log_effect=lt)
            # a difference below the measurement's resolution is float rounding, however small its p
            differs = p < a and abs(e - lt) > shape.RESOLUTION
            out["halves_differ"] = differs
            decided = dec.verdict != "inconclusive"
            if differs and decided and not out["detected"] and not (agrees(dec, e) and agrees(dec, lt)):
                out.update(detected=True,
                           why=f"blocks 1-{len(early)} give {math.exp(e):.3f}, blocks {len(early) + 1}-{n} give "
                               f"{math.exp(lt):.3f} (Welch two-sided p={p:.2g} < {a:.2g}), on different sides of "
                               f"what the verdict claims")
    return out


def apply(dec: decisions.Decision, contrasts: list[float], a: float) -> tuple[decisions.Decision, dict[str, Any]]:
    """The decision, made inconclusive with the cause when a decided comparison drifted, and the check's details."""
    found = check(dec, contrasts, a)
    if dec.verdict == "inconclusive" and not found.get("empty_confidence_sequence"):
        return dec, found
    if not found["detected"]:
        return dec, found
    found["verdict_without_check"] = dec.verdict
    reason = f"inconclusive: {CAUSE}: {found['why']}; the rule would have said {dec.verdict}: {dec.reason}"
    return decisions.Decision("inconclusive", reason, dec.estimate, dec.ci, dec.p_value, dict(dec.details)), found
