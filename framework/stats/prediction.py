"""A prediction interval for one new unit (the next machine) from m units' contrasts.

Why: an interval for the mean effect of the machines measured answers "what is the fleet's average?"; a
user who asks "what will I see on my machine?" needs the interval a new machine's own contrast falls in.
With m machines' contrasts d_1..d_m i.i.d. N(mu, V) (V = tau^2 + the launch noise of the design, so the
new machine is measured as these were), d_new - mean(d) ~ N(0, V (1 + 1/m)) is independent of s^2, and

    mean(d) +- t_{m-1}(1 - a) * s * sqrt(1 + 1/m)

covers d_new with probability 1 - 2a: the normal-sample prediction interval (Hahn & Meeker 1991,
Statistical Intervals, sec. 4.6; the random-effects form is Higgins, Thompson & Spiegelhalter 2009).

Its width rests on s, an estimate with m - 1 degrees of freedom: with 2 machines s is one difference, and
two machines that happen to agree give a narrow interval that a third machine can fall far outside. So
the interval says when it is not useful: the width factor t_{m-1}(1 - a) sqrt(1 + 1/m) is more than 25%
above its many-machine limit z(1 - a) (a fixed rule, chosen before any record was read: at a = 0.05 it
needs 8 machines; 2 machines give 7.73 against 1.64). Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

USEFUL_FACTOR = 1.25  # a useful interval's width factor is within 25% of its limit z(1 - a)
MAX_UNITS = 10_000


def width_factor(m: int, a: float) -> float:
    """t_{m-1}(1 - a) * sqrt(1 + 1/m): the prediction interval's half-width in units of s (m >= 2)."""
    return float(stats.t.ppf(1.0 - a, m - 1)) * math.sqrt(1.0 + 1.0 / m)


def units_for_useful(a: float) -> int:
    """The fewest units whose width factor is within USEFUL_FACTOR of the normal limit z(1 - a)."""
    limit = USEFUL_FACTOR * float(stats.norm.ppf(1.0 - a))
    m = 2
    while width_factor(m, a) > limit:
        m += 1
        if m > MAX_UNITS:
            raise ValueError(f"no unit count up to {MAX_UNITS} at level {a}")
    return m


@dataclass(frozen=True)
class NewUnit:
    """The interval for one new unit's contrast (log scale), and whether it can be used."""

    estimate: float
    low: float | None  # None when it cannot be estimated (fewer than 2 units, or no spread between them)
    high: float | None
    units: int
    df: int
    level: float  # two-sided coverage, 1 - 2a
    factor: float | None  # t_{m-1}(1 - a) sqrt(1 + 1/m)
    useful: bool
    units_needed: int  # units for a useful one at this level
    note: str


def new_unit(d: Sequence[float], a: float, unit: str = "machine") -> NewUnit:
    """The 1 - 2a prediction interval for a new unit's contrast from the units' contrasts `d`."""
    x = np.asarray(d, float)
    m = len(x)
    need = units_for_useful(a)
    est = float(x.mean()) if m else math.nan
    if m < 2:
        return NewUnit(est, None, None, m, 0, 1 - 2 * a, None, False, need,
                       f"cannot be estimated from {m} {unit}: a useful one needs {need} {unit}s")
    s = float(x.std(ddof=1))
    f = width_factor(m, a)
    if s <= 0:
        return NewUnit(est, None, None, m, m - 1, 1 - 2 * a, f, False, need,
                       f"cannot be estimated: the {m} {unit}s' contrasts agree exactly; "
                       f"a useful one needs {need} {unit}s")
    useful = m >= need
    if m == 2:
        note = (f"not useful: 2 {unit}s give 1 degree of freedom, so the spread between {unit}s rests on one "
                f"difference (the width factor is {f:.2f} standard deviations, against "
                f"{float(stats.norm.ppf(1 - a)):.2f} with many {unit}s); a useful one needs {need} {unit}s")
    elif not useful:
        note = (f"wide: {m} {unit}s give {m - 1} degrees of freedom (width factor {f:.2f}); a useful one needs "
                f"{need} {unit}s")
    else:
        note = f"from {m} {unit}s ({m - 1} degrees of freedom)"
    half = f * s
    return NewUnit(est, est - half, est + half, m, m - 1, 1 - 2 * a, f, useful, need, note)
