"""Marks a decided comparison carries when its launches show why it may be wrong (rules v4, `informative_marks`).

Rules v2's caveats marked nearly every decided verdict ("rare launch modes unseen" fires whenever a
mode at half speed could overturn it, which at 5-20 launches is always): a mark on every right and
every wrong verdict tells the reader nothing. These marks fire on evidence in the launches, each a
test with a stated null (framework.stats.modes), and only where a mode of the size seen could carry the
verdict across its threshold:

- **LAUNCH MODE IN ONE CONDITION**: Grubbs' test finds a launch apart from the others in some
  compared condition and not in all (each condition at MARK_LEVEL / k, k conditions).
- **SKEWED LAUNCHES**: D'Agostino's skewness test rejects in some compared condition (at MARK_LEVEL / k;
  8 or more launches).
- **SPREADS DIFFER**: the F test (two conditions) or Bartlett's (more) rejects equal variances at MARK_LEVEL.
- **SURVIVORS MAY BE BIASED** (as in v2: framework.analysis.caveats.survivors).

The three evidence marks are drawn only where the evidence can matter: when the verdict's margin (the
log distance of its decisive bound from its threshold, framework.analysis.caveats.margin) is below the
largest deviation of a compared launch from its condition's median. A mode of that size in one
condition moves the log ratio by its share times its size, at most the size, so a verdict farther
from its threshold than that is not overturned by any mode like the ones seen.

On launches that fit the comparison's model (independent normal log launch values) each evidence mark
fires with probability at most MARK_LEVEL. What no test can see, a mode that none of the launches
showed, is said once, in the record's `estimand.covers` and in docs/statistics.md, not as a mark.
Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from framework.analysis.caveats import margin, survivors
from framework.analysis.rows import ConditionData
from framework.core.design import Condition
from framework.stats import decisions, modes

MARK_LEVEL = 0.05  # each evidence mark's rate on launches that fit the model: fixed before any data
MARKS = {"mode": "LAUNCH MODE IN ONE CONDITION", "skew": "SKEWED LAUNCHES", "spread": "SPREADS DIFFER"}


def _mode(cells: list[Condition], logs: dict[int, list[float]]) -> dict[str, Any] | None:
    level = MARK_LEVEL / len(cells)
    found = {c.label(): modes.apart(logs[c.index], level) for c in cells}
    seen = {k: v for k, v in found.items() if v is not None}
    if not seen or len(seen) == len(cells):
        return None
    what = "; ".join(f"condition {k}: a launch {math.exp(v['offset_log']):.3g}x the others' median "
                     f"(Grubbs G={v['g']:.2f} > {v['critical']:.2f})" for k, v in seen.items())
    return {"kind": "mode", "mark": MARKS["mode"], "level": level, "apart": seen,
            "text": (f"a launch mode in one condition: {what}, and none apart in the other(s); a mode in one "
                     f"condition only moves the ratio of geometric means by its share times its log factor, "
                     f"which these launches estimate poorly")}


def _skew(cells: list[Condition], logs: dict[int, list[float]]) -> dict[str, Any] | None:
    level = MARK_LEVEL / len(cells)
    ps = {c.label(): modes.skew_p(logs[c.index]) for c in cells}
    hit = {k: p for k, p in ps.items() if p is not None and p < level}
    if not hit:
        return None
    what = ", ".join(f"{k} (D'Agostino p={p:.2g})" for k, p in hit.items())
    return {"kind": "skew", "mark": MARKS["skew"], "level": level, "skew_p": ps,
            "text": f"skewed launches: condition(s) {what}; the t interval of a skewed mean is an approximation"}


def _spread(cells: list[Condition], logs: dict[int, list[float]]) -> dict[str, Any] | None:
    p = modes.spread_p([logs[c.index] for c in cells])
    if p is None or p >= MARK_LEVEL:
        return None
    test = "F" if len(cells) == 2 else "Bartlett"
    return {"kind": "spread", "mark": MARKS["spread"], "level": MARK_LEVEL, "spread_p": p,
            "text": (f"spreads differ: the conditions' launch variances differ beyond chance ({test} p={p:.2g}); "
                     f"one condition's launches vary for a reason the other's do not")}


def reach(cells: list[Condition], logs: dict[int, list[float]]) -> float:
    """The largest deviation (log) of a compared launch from its condition's median: the size of the modes seen."""
    return max(float(np.max(np.abs(np.asarray(logs[c.index]) - np.median(logs[c.index])))) for c in cells)


def marks(dec: decisions.Decision, cells: list[Condition], data: dict[int, ConditionData],
          exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The marks of a decided comparison (none for an inconclusive one: it claims nothing)."""
    if dec.verdict == "inconclusive" or "log_ci" not in dec.details:
        return []
    logs = {c.index: data[c.index].logs(exclude)[1] for c in cells}
    m, size = margin(dec), reach(cells, logs)
    found = []
    if m is not None and m < size:  # a mode of the size seen could carry the verdict across its threshold
        found = [_mode(cells, logs), _skew(cells, logs), _spread(cells, logs)]
        for f in found:
            if f is not None:
                f.update(margin_log=m, reach_log=size)
    found.append(survivors(data, cells))
    return [c for c in found if c is not None]
