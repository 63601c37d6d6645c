"""Caveats a decided comparison carries: why its verdict may be wrong although the rule was followed (rules v2).

The estimand of every comparison is the ratio of geometric means over launches (docs/statistics.md,
section 1). Three things can make a verdict about it wrong without any rule being broken, and none can
be repaired by a better test at these launch counts, so the verdict says so instead (in its reason, in
`details.caveats` and as a mark beside it in the table, the record and the report):

- **rare launch modes unseen** (`framework.stats.shape.unseen_rate`): n launches miss, with
  probability >= 5%, a mode of rate up to r_n = 1 - 0.05^(1/n) (45% at n = 5, 26% at 10, 14% at 20).
  Such a mode in one condition, with its launches a factor f slower or faster, moves the log ratio by
  r_n log f, so a verdict whose decisive bound lies m (log) from its threshold is overturned by an
  unseen mode with f > exp(m / r_n). The caveat is attached when that f is below 2 (a launch at
  half or double speed: a straggler, a fallback path, a throttled clock), a rule of evidence fixed
  before any data like the loss limit, not a calibrated rate. The verdict then holds for the typical
  launch; whether it holds for the geometric mean over launches needs more launches.
- **launch distributions of different shape**: the Brown-Forsythe test finds the compared
  conditions' spreads different at level a, or (Welch, two conditions) the studentized permutation
  test of the decisive one-sided null does not reach level a (`framework.stats.permutation`).
- **survivors of a loss near the limit**: a compared condition lost more than 5% of its launches or
  of its measured requests (but no more than the limit of 20%, above which there is no verdict):
  attrition over 5% can bias the survivors (Schulz & Grimes 2002).

Pure functions over the decision and the phase-2 data.
"""

from __future__ import annotations

import math
from typing import Any

from framework.analysis.launches import losses
from framework.analysis.rows import ConditionData
from framework.core.design import Condition
from framework.stats import decisions, permutation, shape

RARE_MODE_FACTOR = 2.0  # a mode at half or double speed: fixed before any data, not tuned
SURVIVOR_SHARE = 0.05  # attrition above which survivors may be biased (Schulz & Grimes 2002)
MARKS = {"rare_modes": "RARE LAUNCH MODES UNSEEN", "shape": "LAUNCH DISTRIBUTIONS DIFFER",
         "survivors": "SURVIVORS MAY BE BIASED"}


def margin(dec: decisions.Decision) -> float | None:
    """How far (log scale) the decisive bound of a decided comparison lies from its threshold, or None."""
    lo, hi = (dec.details.get("log_ci") or [None, None])[:2]
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if "bounds" in dec.details:
        low, upp = (math.log(b) for b in dec.details["bounds"])
        if dec.verdict == "supported":
            return min(lo - low, upp - hi)
        return max(low - hi, lo - upp)
    theta = math.log(dec.details["threshold"])
    up = dec.details.get("direction") == "up"
    if (dec.verdict == "supported") == up:
        return lo - theta
    return theta - hi


def _rare(dec: decisions.Decision, cells: list[Condition], logs: dict[int, list[float]]) -> dict[str, Any] | None:
    m = margin(dec)
    if m is None or not math.isfinite(m):
        return None
    c = min(cells, key=lambda c: len(logs[c.index]))
    n = len(logs[c.index])
    r = shape.unseen_rate(n)
    factor = math.exp(min(m / r, 700.0))
    if factor >= RARE_MODE_FACTOR:
        return None
    return {"kind": "rare_modes", "mark": f"{MARKS['rare_modes']} (n={n})", "launches": n, "unseen_rate": r,
            "margin_log": m, "overturning_factor": factor,
            "text": (f"rare launch modes: {n} launches of condition {c.label()} miss a mode of up to {r:.0%} of "
                     f"launches with probability 5% or more, and such a mode with launches {factor:.3g}x slower "
                     f"or faster would carry the ratio of geometric means across the threshold; the verdict "
                     f"holds for the typical launch (no test sees a mode that did not occur: Bahadur & Savage "
                     f"1956), more launches are needed for it to hold for the geometric mean over launches")}


def _decisive_side(dec: decisions.Decision) -> list[tuple[float, str]]:
    """The one-sided nulls (threshold, alternative) a decided two-condition verdict rejected."""
    if "bounds" in dec.details:
        low, upp = (math.log(b) for b in dec.details["bounds"])
        if dec.verdict == "supported":
            return [(low, "greater"), (upp, "less")]
        lo, _ = dec.details["log_ci"]
        return [(upp, "greater")] if lo is not None and lo > upp else [(low, "less")]
    theta = math.log(dec.details["threshold"])
    up = dec.details.get("direction") == "up"
    return [(theta, "greater" if (dec.verdict == "supported") == up else "less")]


def _shape(dec: decisions.Decision, cells: list[Condition], logs: dict[int, list[float]], a: float,
           method: str) -> dict[str, Any] | None:
    groups = [logs[c.index] for c in cells]
    p_bf = shape.brown_forsythe(groups)
    p_perm = None
    # a check that cannot reach level a with these many launches (its smallest p-value is above a) says
    # nothing about the verdict: its failure to confirm is then no sign of a shape difference
    if method == "welch" and len(cells) == 2 and permutation.smallest_p(len(groups[0]), len(groups[1])) <= a:
        p_perm = max(permutation.studentized_p(groups[0], groups[1], theta, alt)
                     for theta, alt in _decisive_side(dec))
    why = []
    if p_bf is not None and p_bf < a:
        why.append(f"their spreads differ (Brown-Forsythe p={p_bf:.2g})")
    if p_perm is not None and p_perm > a:
        why.append(f"the distribution-free check does not confirm it (studentized permutation p={p_perm:.2g} > "
                   f"{a:.2g})")
    if not why:
        return None
    names = " and ".join(c.label() for c in cells)
    return {"kind": "shape", "mark": MARKS["shape"], "brown_forsythe_p": p_bf, "permutation_p": p_perm,
            "text": (f"launch distributions of different shape: for conditions {names} " + "; ".join(why)
                     + "; the t-based interval is then an approximation at this many launches")}


def survivors(data: dict[int, ConditionData], cells: list[Condition]) -> dict[str, Any] | None:
    """The survivors caveat when a compared condition lost more than SURVIVOR_SHARE (also a v4 mark)."""
    near = []
    for c in cells:
        loss = losses(data[c.index])
        share = max(loss["lost_share"], loss["censored_share"])
        if share > SURVIVOR_SHARE:
            near.append((c, share))
    if not near:
        return None
    what = ", ".join(f"condition {c.label()} lost {s:.0%}" for c, s in near)
    return {"kind": "survivors", "mark": MARKS["survivors"], "shares": {c.label(): s for c, s in near},
            "text": (f"survivors may be biased: {what} (over {SURVIVOR_SHARE:.0%}; Schulz & Grimes 2002), and "
                     f"launches or requests are rarely lost at random (the slowest, the most loaded), so the "
                     f"verdict stands on a selected sample")}


def caveats(dec: decisions.Decision, cells: list[Condition], data: dict[int, ConditionData], a: float,
            method: str, exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The caveats of a decided comparison (none for an inconclusive one: it claims nothing)."""
    if dec.verdict == "inconclusive" or "log_ci" not in dec.details:
        return []
    logs = {c.index: data[c.index].logs(exclude)[1] for c in cells}
    found = [_rare(dec, cells, logs), _shape(dec, cells, logs, a, method), survivors(data, cells)]
    return [c for c in found if c is not None]
