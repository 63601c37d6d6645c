"""The error control of a bisection over versions: the alpha split and each look's anytime-valid decision.

Why this design (docs/statistics.md, "Bisection over versions"): under one change point every version is
either like the good end (G) or like the bad end (B), so a bisection is a chain of classifications. Each one is
a sequential test with an anytime-valid confidence sequence (framework.stats.anytime: the t-test e-process,
valid at every look, so a probe may add launches until it is decided). With n versions, the ends' comparison
gets alpha / 2, and each probe alpha / (2 P), P = ceil(log2(n - 1)) the most probes a bisection makes: the
probes a bisection makes when every classification is right are fixed by the change point, so a Bonferroni
bound over those P probes plus the ends bounds P(naming a wrong version) by alpha, and P(naming one when
nothing changed) by alpha / 2 (the ends must then claim a change beyond the margin that is not there).

Contrasts (log launch values, one per replicate r, pairing the r-th launch of each version; launches are
independent, so the contrasts of one comparison are i.i.d.):
- the ends: c_r = x_B,r - x_G,r, mean Delta (the total change);
- a probe v: c_r = x_v,r - (x_G,r + x_B,r) / 2, mean -Delta/2 when v is like G and +Delta/2 when like B.
Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from scipy import stats as sps

from framework.stats.anytime import AnytimeEffect

EndsCall = Literal["differ", "same"]
ProbeCall = Literal["good", "bad", "between"]


def split_alpha(alpha: float, probes: int) -> tuple[float, float]:
    """(alpha of the ends' comparison, alpha of each probe): alpha / 2 and alpha / (2 probes)."""
    return alpha / 2, alpha / (2 * max(1, probes))


def bounds(contrasts: Sequence[float], a: float) -> tuple[float, float]:
    """The two-sided (1 - a) anytime-valid confidence sequence of the contrasts' mean, as it stands now."""
    if len(contrasts) < 2:
        return -math.inf, math.inf
    return AnytimeEffect(list(contrasts)).bounds(a / 2)


@dataclass(frozen=True)
class Look:
    """One look at a comparison: its contrasts' mean, the interval and the call (None: undecided)."""

    n: int
    estimate: float
    lo: float
    hi: float
    call: str | None


def ends_look(contrasts: Sequence[float], a: float, threshold: float, margin: float) -> Look:
    """The ends at one look: "differ" when the interval lies beyond +/- log(1 + margin) (a change is there and
    is larger than the margin), "same" when it lies within +/- log(1 + threshold) (any change is smaller than a
    regression), else undecided."""
    lo, hi = bounds(contrasts, a)
    m, t = math.log1p(margin), math.log1p(threshold)
    call: str | None = None
    if lo > m or hi < -m:
        call = "differ"
    elif lo > -t and hi < t:
        call = "same"
    return Look(len(contrasts), float(np.mean(contrasts)) if len(contrasts) else math.nan, lo, hi, call)


def probe_look(contrasts: Sequence[float], a: float, sign: float, gap: float = 0.0) -> Look:
    """A probe at one look: "bad" when the interval excludes every mean a version like the good end can have,
    "good" when it excludes every mean of one like the bad end, else undecided (`sign`: +1 when the bad end is
    higher). With `gap` 0 (rules before version 5's `bisect_gap`) that is the interval excluding 0 on one side.

    With a gap g (half the change the ends' own confidence sequence has shown, log scale), a version like the
    good end has mean <= -g on the bad end's side and one like the bad end >= +g, so "bad" needs only the lower
    bound above -g and "good" the upper below +g. An interval inside (-g, g) excludes both: the version is
    neither (a second change or a drift), and it is called "between", which ends the bisection undecided."""
    lo, hi = bounds(contrasts, a)
    s_lo, s_hi = (lo, hi) if sign > 0 else (-hi, -lo)  # on the bad end's side
    call: str | None = None
    bad, good = s_lo > -gap, s_hi < gap
    if bad and good:
        call = "between"
    elif bad or good:
        call = "bad" if bad else "good"
    return Look(len(contrasts), float(np.mean(contrasts)) if len(contrasts) else math.nan, lo, hi, call)


def ends_gap(contrasts: Sequence[float], a: float, sign: float, looks: Sequence[int]) -> float:
    """Half the change the ends have shown: max over `looks` of the ends' confidence-sequence bound nearer 0 on
    the bad end's side, halved (0 when none is above 0). The sequence covers the ends' change at every look at
    once with probability 1 - a, so on that event the total change is at least every such bound, and a probe like
    the good end sits at least this far on the good side of the ends' midpoint (one change point)."""
    best = 0.0
    for n in looks:
        lo, hi = bounds(contrasts[:n], a)
        best = max(best, lo if sign > 0 else -hi)
    return best / 2


def step_estimate(before: Sequence[float], after: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """The step from the last good version to the first bad one: the ratio of geometric means with its Welch
    (1 - alpha) interval on log launch values (scipy.stats.ttest_ind, equal_var=False). Takes launch values."""
    x, y = np.log(np.asarray(after, float)), np.log(np.asarray(before, float))
    d = float(x.mean() - y.mean())
    if len(x) < 2 or len(y) < 2:
        return math.exp(d), math.nan, math.nan
    ci = sps.ttest_ind(x, y, equal_var=False).confidence_interval(1 - alpha)
    return math.exp(d), math.exp(float(ci.low)), math.exp(float(ci.high))
