"""Ranking and selection with a stated probability of correct selection: Kim & Nelson's fully sequential KN.

Why: a search that ranks its candidates by their exploration means picks the runner-up whenever the noise of a
few launches is larger than the gap (issue 35: 3 of 7 seeds on `eagle3_tuning`), and nothing says how often.
KN (Kim & Nelson, "A fully sequential procedure for indifference-zone selection in simulation", ACM TOMACS
11(3), 2001) takes finalists to fresh launches one round at a time and eliminates a finalist as soon as another
beats it beyond a shrinking triangular continuation region; it guarantees

    P(select the best) >= 1 - alpha   whenever the best leads every other finalist by at least delta

(the indifference zone), for normal launch values with unknown, unequal variances, independent across launches
(common random numbers across finalists allowed: only pairwise differences enter). Values here are launch values
on the log scale (delta is a log ratio), larger is better after orientation.

With k finalists and a first stage of n0 launches each:

    eta = ((2 alpha / (k - 1)) ** (-2 / (n0 - 1)) - 1) / 2,   h^2 = 2 eta (n0 - 1)
    S_il^2 = the sample variance of X_ij - X_lj over the first n0 launches (paired by launch order)
    W_il(r) = max(0, delta / (2 r) * (h^2 S_il^2 / delta^2 - r))
    after r launches of each survivor: i is eliminated if mean_i(r) < mean_l(r) - W_il(r) for a survivor l
    stop with one survivor, or at r = max N_il + 1 (N_il = floor(h^2 S_il^2 / delta^2)) with the best mean.

eta solves (k - 1) / 2 * E[exp(-eta chi2_{n0-1})] = alpha, the bound the proof integrates (the test checks the
closed form against that integral). Pure functions over plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

import numpy as np

Direction = Literal["max", "min"]


def kn_eta(alpha: float, k: int, n0: int) -> float:
    """KN's eta for k systems, first-stage size n0, PCS 1 - alpha (Kim & Nelson 2001, eq. for c = 1)."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    if k < 2:
        raise ValueError("k >= 2 systems")
    if n0 < 2:
        raise ValueError("n0 >= 2 (the first stage estimates each pair's variance)")
    return 0.5 * ((2 * alpha / (k - 1)) ** (-2.0 / (n0 - 1)) - 1.0)


@dataclass(frozen=True)
class KNState:
    """Where the procedure stands on the launches given: who is left, who went out when, what it needs next."""

    alpha: float
    delta: float  # the indifference zone, log scale
    n0: int
    eta: float
    h2: float
    stage: int  # r: launches of each survivor the last screening used (0: the first stage is not complete)
    survivors: list[str]
    eliminated: dict[str, int] = field(default_factory=dict)  # name -> the stage it went out at
    done: bool = False
    best: str | None = None  # the selected finalist once done
    max_stage: int | None = None  # max N_il + 1: the stage at which KN stops and takes the best mean
    why: str = ""
    needs: list[str] = field(default_factory=list)  # the finalists that need one more launch (empty when done)
    means: dict[str, float] = field(default_factory=dict)  # each finalist's mean log value at its last stage


def _oriented(values: Mapping[str, Sequence[float]], direction: Direction) -> dict[str, np.ndarray]:
    if direction not in ("max", "min"):
        raise ValueError(f"direction must be 'max' or 'min', not {direction!r}")
    sign = 1.0 if direction == "max" else -1.0
    out = {}
    for name, vals in values.items():
        arr = np.asarray(list(vals), float)
        if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name}: launch values must be finite and > 0 (they are compared as logs)")
        out[name] = sign * np.log(arr)
    return out


def kn_select(values: Mapping[str, Sequence[float]], alpha: float, delta: float, n0: int,
              direction: Direction = "max", max_stage_cap: int | None = None) -> KNState:
    """Replay KN over each finalist's fresh launch values (launch order), and say where it stands.

    `delta` is the indifference zone as a log ratio (log(1.01) for 1%). With `max_stage_cap`, the procedure
    stops at that many launches of each survivor (a budget) and takes the best mean among the survivors: the
    guarantee then holds only if KN would have stopped by then, which `why` says.
    """
    if not delta > 0:
        raise ValueError("delta (the indifference zone) must be > 0")
    names = list(values)
    if len(names) < 2:
        raise ValueError("ranking and selection needs at least 2 finalists")
    x = _oriented(values, direction)
    k = len(names)
    eta = kn_eta(alpha, k, n0)
    h2 = 2 * eta * (n0 - 1)
    if any(len(x[n]) < n0 for n in names):
        return KNState(alpha, delta, n0, eta, h2, 0, names, {}, False, None, None,
                       f"first stage: {n0} launches of each finalist", [n for n in names if len(x[n]) < n0])
    s2 = {}
    for i in names:
        for j in names:
            if i < j:
                d = x[i][:n0] - x[j][:n0]
                s2[(i, j)] = s2[(j, i)] = float(np.var(d, ddof=1))
    n_il = {p: math.floor(h2 * v / delta ** 2) for p, v in s2.items()}
    max_stage = max(n_il.values()) + 1
    survivors = list(names)
    eliminated: dict[str, int] = {}
    r = n0
    cap = max_stage_cap

    def means_at(rr: int) -> dict[str, float]:
        return {n: float(np.mean(x[n][:rr])) for n in survivors}

    while True:
        m = means_at(r)
        if r >= max_stage:  # KN's own end: the survivors cannot be told apart beyond delta; the best mean wins
            best = max(survivors, key=lambda n: (m[n], -names.index(n)))
            return KNState(alpha, delta, n0, eta, h2, r, survivors, eliminated, True, best, max_stage,
                           f"stage {r} reached KN's last stage (max N_il + 1 = {max_stage}): the survivors are "
                           "within delta of each other with the stated probability; the best mean is selected",
                           [], m)
        out = [i for i in survivors if any(
            m[i] < m[j] - max(0.0, delta / (2 * r) * (h2 * s2[(i, j)] / delta ** 2 - r)) for j in survivors if j != i)]
        for i in out:
            eliminated[i] = r
        survivors = [n for n in survivors if n not in out]
        if len(survivors) == 1:
            return KNState(alpha, delta, n0, eta, h2, r, survivors, eliminated, True, survivors[0], max_stage,
                           f"every other finalist eliminated by stage {r}", [], {**m})
        if cap is not None and r >= cap:
            m = means_at(r)
            best = max(survivors, key=lambda n: (m[n], -names.index(n)))
            return KNState(alpha, delta, n0, eta, h2, r, survivors, eliminated, True, best, max_stage,
                           f"stopped by the launch cap at stage {r} before KN's last stage {max_stage}: "
                           f"{len(survivors)} finalists not separated; the best mean is selected WITHOUT the "
                           "guarantee", [], m)
        if any(len(x[n]) <= r for n in survivors):
            return KNState(alpha, delta, n0, eta, h2, r, survivors, eliminated, False, None, max_stage,
                           f"stage {r + 1}: one more launch of each survivor",
                           [n for n in survivors if len(x[n]) <= r], m)
        r += 1
